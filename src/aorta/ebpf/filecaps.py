"""File capabilities of an executable (what `setcap …+ep FILE` stored), read from its xattr.

Used to decide whether a bpftrace given `setcap cap_bpf,cap_perfmon+ep` can run without sudo,
and to say exactly which capability is missing when it cannot. Reads the `security.capability`
extended attribute (struct vfs_cap_data, versions 2 and 3); no subprocess, no libcap needed.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass

# Capability numbers from linux/capability.h (only the ones tracing needs to name).
CAP_NAMES = {
    2: "cap_dac_read_search",
    1: "cap_dac_override",
    21: "cap_sys_admin",
    24: "cap_sys_resource",
    38: "cap_perfmon",
    39: "cap_bpf",
}
_XATTR = "security.capability"
_REVISION_MASK = 0xFF000000
_FLAG_EFFECTIVE = 0x000001
_REVISIONS = {0x01000000: 1, 0x02000000: 2, 0x03000000: 3}


@dataclass(frozen=True)
class FileCaps:
    """The permitted capabilities stored on a file and whether they become effective at exec."""

    permitted: frozenset[str]
    effective: bool

    def has(self, *names: str) -> bool:
        """True if every named capability (e.g. "cap_bpf") is in the permitted set."""
        return all(n in self.permitted for n in names)

    def describe(self) -> str:
        """getcap-like text, e.g. 'cap_bpf,cap_perfmon=ep'."""
        return f"{','.join(sorted(self.permitted)) or 'none'}={'ep' if self.effective else 'p'}"


def parse_vfs_cap_data(raw: bytes) -> FileCaps | None:
    """Decode a security.capability value; None if it is not a known layout."""
    if len(raw) < 12:
        return None
    magic, perm_lo = struct.unpack_from("<II", raw, 0)
    revision = _REVISIONS.get(magic & _REVISION_MASK)
    if revision is None:
        return None
    mask = perm_lo
    if revision >= 2 and len(raw) >= 20:
        (perm_hi,) = struct.unpack_from("<I", raw, 12)
        mask |= perm_hi << 32
    names = {name for bit, name in CAP_NAMES.items() if mask >> bit & 1}
    unnamed = [bit for bit in range(64) if mask >> bit & 1 and bit not in CAP_NAMES]
    names.update(f"cap_{bit}" for bit in unnamed)
    return FileCaps(frozenset(names), bool(magic & _FLAG_EFFECTIVE))


def file_caps(path: str) -> FileCaps | None:
    """The file capabilities of `path`; None when it has none (or they cannot be read)."""
    with contextlib.suppress(OSError):
        return parse_vfs_cap_data(os.getxattr(path, _XATTR))
    return None

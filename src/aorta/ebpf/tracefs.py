"""Find tracefs and read tracepoint `format` files into typed fields.

Probe code is generated from these fields (their types decide `str()` and widths), never from
assumed layouts. `ebpf-info --tracefs DIR` reads another root (the folder that holds `events/`),
for tests and for inspecting a tree copied from another machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from aorta.common.errors import UsageError
from aorta.common.safedir import check_root_may_use

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
DEBUGFS = "/sys/kernel/debug"
KERNEL_BTF = "/sys/kernel/btf/vmlinux"
_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_FIELD_RE = re.compile(
    r"^\s*field:(?P<decl>.+?);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
    r"\s*signed:(?P<signed>\d+);"
)


@dataclass(frozen=True)
class Field:
    """One field of a tracepoint record, as the live format file declares it."""

    name: str
    type: str  # the C type without the name, e.g. "__data_loc char[]", "u64", "char[16]"
    offset: int
    size: int
    signed: bool

    @property
    def is_data_loc_string(self) -> bool:
        """A dynamic string (`__data_loc char[]`): read it with str(args->name)."""
        return self.type.startswith("__data_loc") and "char" in self.type

    @property
    def is_char_array(self) -> bool:
        """A fixed char array such as comm[16]: also printable with str()."""
        return self.type.startswith("char[")

    @property
    def is_string(self) -> bool:
        """Readable as text with str() (data_loc string or char array)."""
        return self.is_data_loc_string or self.is_char_array

    @property
    def is_pointer(self) -> bool:
        """A pointer: its value is an address, not readable text (e.g. old `char *ring_name`)."""
        return "*" in self.type

    @property
    def is_integer(self) -> bool:
        """A scalar integer field (not a string, array or pointer)."""
        return not (self.is_string or self.is_pointer or "[" in self.type)


@dataclass(frozen=True)
class EventFormat:
    """A tracepoint's id and its own (non-common) fields."""

    system: str
    name: str
    id: int | None
    fields: dict[str, Field]

    def has(self, *names: str) -> bool:
        """True if every named field exists."""
        return all(n in self.fields for n in names)

    def first_of(self, *names: str) -> Field | None:
        """The first of `names` that exists (for fields renamed across kernel versions)."""
        for n in names:
            if n in self.fields:
                return self.fields[n]
        return None


def _split_decl(decl: str) -> tuple[str, str]:
    """'__data_loc char[] ring' → ('__data_loc char[]', 'ring'); 'char comm[16]' → ('char[16]', 'comm')."""
    decl = decl.strip()
    array = ""
    match = re.match(r"^(?P<head>.*?)(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<arr>\[[^\]]*\])$", decl)
    if match and not decl.endswith("[]"):
        head, name, array = match.group("head").strip(), match.group("name"), match.group("arr")
        return (f"{head}{array}" if head else array), name
    head, _, name = decl.rpartition(" ")
    name = name.lstrip("*")
    if decl.split()[-1].startswith("*"):
        head = head + " *"
    return head.strip(), name


def parse_format(text: str, system: str = "", name: str = "") -> EventFormat:
    """Parse the text of a tracefs `format` file; common_* fields are dropped."""
    event_id = None
    fields: dict[str, Field] = {}
    for line in text.splitlines():
        if line.startswith("name:") and not name:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("ID:"):
            try:
                event_id = int(line.split(":", 1)[1].strip())
            except ValueError:
                event_id = None
        match = _FIELD_RE.match(line)
        if not match:
            continue
        ftype, fname = _split_decl(match.group("decl"))
        if fname.startswith("common_"):
            continue
        fields[fname] = Field(
            fname, ftype, int(match.group("offset")), int(match.group("size")), match.group("signed") == "1"
        )
    return EventFormat(system, name, event_id, fields)


class Tracefs:
    """Read-only access to one tracefs tree (live, or a recorded copy).

    `btf`: the kernel beside the tree has BTF type information (bpftrace can then read kernel
    structs such as `curtask->se`); a recorded copy has none."""

    def __init__(self, root: str | os.PathLike[str], btf: bool = False) -> None:
        self.root = Path(root)
        self.btf = btf
        self._formats: dict[tuple[str, str], EventFormat] = {}

    @property
    def events_dir(self) -> Path:
        return self.root / "events"

    def events(self, system: str) -> list[str]:
        """Event names in `system` (empty if the subsystem is absent)."""
        if not _NAME_RE.match(system):
            return []
        try:
            return sorted(p.name for p in (self.events_dir / system).iterdir() if (p / "format").is_file())
        except OSError:
            return []

    def event_state(self, system: str, event: str) -> str:
        """ "present", "not readable" (exists, but this user cannot read its format) or "missing"."""
        if self.read_format(system, event) is not None:
            return "present"
        if not (_NAME_RE.match(system) and _NAME_RE.match(event)):
            return "missing"
        for path in (
            self.events_dir / system / event / "format",
            self.events_dir / system / event,
            self.events_dir / system,
        ):
            try:
                os.stat(path)
            except PermissionError:
                return "not readable"
            except OSError:
                continue
            return "not readable" if path.name == "format" else "missing"
        return "missing"

    def has_event(self, system: str, event: str) -> bool:
        """True if `system:event` exists with a readable format file."""
        return self.read_format(system, event) is not None

    def read_format(self, system: str, event: str) -> EventFormat | None:
        """The parsed format of `system:event`, or None if absent or unreadable."""
        if not (_NAME_RE.match(system) and _NAME_RE.match(event)):
            return None
        return self._formats.get((system, event)) or self._load(system, event)

    def _load(self, system: str, event: str) -> EventFormat | None:
        path = self.events_dir / system / event / "format"
        try:
            text = path.read_text()
        except OSError:
            return None
        fmt = parse_format(text, system, event)
        self._formats[(system, event)] = fmt
        return fmt


def _is_tracefs(path: Path) -> bool:
    """True if `path` holds a readable events/ folder (False when permission is denied)."""
    try:
        return (path / "events").is_dir() and os.access(path / "events", os.R_OK | os.X_OK)
    except OSError:  # Python < 3.12 raises PermissionError from is_dir()
        return False


def kernel_btf() -> bool:
    """The running kernel exposes its BTF (CONFIG_DEBUG_INFO_BTF): struct fields are readable."""
    return os.path.isfile(KERNEL_BTF)


def check_tracefs_root(path: str, option: str = "--tracefs") -> Tracefs:
    """The tree at `path` (a tracefs root or a recorded copy, holding events/); UsageError (one
    line) when it has none or, as root, when another user could change it (root renders its
    program from these formats)."""
    check_root_may_use(path, option, "point it at a copy only root can change")
    if not _is_tracefs(Path(path)):
        raise UsageError(
            f"{option} {path}: no readable events/ folder; give a tracefs root (the folder holding events/)"
        )
    return Tracefs(path)


def find_tracefs(mount_if_root: bool = True, root: str | None = None) -> tuple[Tracefs | None, str]:
    """Locate tracefs: `root` (ebpf-info --tracefs), /sys/kernel/tracing, /sys/kernel/debug/tracing.

    As root with nothing mounted, mounts it where this kernel has it (see `mount_tracefs`) when
    `mount_if_root`; otherwise (read-only callers such as ebpf-info) says that it is not mounted
    and who mounts it. Returns the tree (or None) and a one-line explanation of what was found
    or why nothing was. A bad `root` raises UsageError (check_tracefs_root).
    """
    if root is not None:
        return check_tracefs_root(root), f"{root} (from --tracefs)"
    for candidate in TRACEFS_CANDIDATES:
        if _is_tracefs(Path(candidate)):
            return Tracefs(candidate, btf=kernel_btf()), candidate
    if mount_if_root and os.geteuid() == 0:
        return mount_tracefs()
    if os.geteuid() == 0 and any(os.path.isdir(p) for p in (TRACEFS_CANDIDATES[0], DEBUGFS)):
        return None, (
            f"tracefs is not mounted ({TRACEFS_CANDIDATES[0]} has no events/) and this command only "
            "reads: run --ebpf-trace and ebpf-attach mount it when they trace (ebpf-info --mount "
            "mounts it now)"
        )
    if os.geteuid() != 0:
        return None, (
            "tracefs not readable: run as root, or mount it: "
            f"sudo mount -t tracefs nodev {TRACEFS_CANDIDATES[0]}"
        )
    return None, "tracefs not found (kernel without CONFIG_TRACING?)"


def _mount(fstype: str, target: str) -> str | None:
    """`mount -t FSTYPE nodev TARGET`; None on success, else mount's message."""
    try:
        proc = subprocess.run(
            ["mount", "-t", fstype, "nodev", target], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


def mount_tracefs() -> tuple[Tracefs | None, str]:
    """Mount tracefs where this kernel expects it and say which (root only).

    /sys/kernel/tracing when that folder exists (kernels ≥ 4.1); otherwise debugfs at
    /sys/kernel/debug, whose tracing/ folder then holds tracefs (older kernels, some containers);
    when debugfs is mounted but its tracing/ is empty, tracefs is mounted there.
    """
    tracing, legacy = TRACEFS_CANDIDATES
    tried = []
    if os.path.isdir(tracing):
        error = _mount("tracefs", tracing)
        if error is None and _is_tracefs(Path(tracing)):
            return Tracefs(tracing, btf=kernel_btf()), f"{tracing} (tracefs mounted now)"
        tried.append(f"mount -t tracefs nodev {tracing}: {error or 'mounted, but no events/'}")
    if os.path.isdir(DEBUGFS):
        if os.path.isdir(legacy):
            fstype, target = "tracefs", legacy
        else:
            fstype, target = "debugfs", DEBUGFS
        error = _mount(fstype, target)
        if error is None and _is_tracefs(Path(legacy)):
            how = "tracefs mounted now" if fstype == "tracefs" else "debugfs mounted now"
            return Tracefs(legacy, btf=kernel_btf()), f"{legacy} ({how})"
        tried.append(f"mount -t {fstype} nodev {target}: {error or 'mounted, but no tracing/events/'}")
    if not tried:
        return None, (
            f"tracefs not found: neither {tracing} nor {DEBUGFS} exists (kernel without CONFIG_TRACING?)"
        )
    return None, (
        "tracefs not mounted and mounting failed ("
        + "; ".join(tried)
        + "): in a container, run it --privileged or mount /sys/kernel/tracing into it"
    )

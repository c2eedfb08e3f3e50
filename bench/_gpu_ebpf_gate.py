"""Whether bench/gpu_check.py's eBPF points can run here: bpftrace on PATH, privileges, bpf() works.

Lent machines run under gVisor (kernel 4.4, no eBPF) or Firecracker, without bpftrace: there the
eBPF points are skipped with the reason printed, not reported as failures. bpf() is probed
directly (BPF_MAP_CREATE of a one-entry array map, then close): ENOSYS or EPERM says why not.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

from aorta.ebpf.session import bpftrace_path, launcher

#: bpf(2)'s syscall number per machine (asm/unistd.h); BPF_MAP_CREATE is command 0
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_MAP_CREATE, _BPF_MAP_TYPE_ARRAY = 0, 2


def bpf_syscall_works() -> tuple[bool, str]:
    """Create and close a tiny array map through bpf(2); (works, why not)."""
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        return False, f"bpf() syscall number unknown on {platform.machine()}"
    attr = (ctypes.c_uint32 * 32)(_BPF_MAP_TYPE_ARRAY, 4, 4, 1)  # type, key, value size, entries
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(number, _BPF_MAP_CREATE, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        code = ctypes.get_errno()
        return False, f"bpf() fails here ({errno.errorcode.get(code, code)}: {os.strerror(code)})"
    os.close(fd)
    return True, "bpf() works"


def ebpf_gate() -> tuple[bool, str]:
    """(run the eBPF points, the reason): every missing piece is named, not only the first."""
    reasons = []
    if bpftrace_path() is None:
        reasons.append("bpftrace not on PATH")
    prefix, why = launcher()
    if prefix is None:
        reasons.append(f"no privileges for bpftrace ({why})")
    works, why = bpf_syscall_works()
    if not works:
        reasons.append(why)
    return (not reasons, "; ".join(reasons) or "bpftrace, privileges and bpf() all present")

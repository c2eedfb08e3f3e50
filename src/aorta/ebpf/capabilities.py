"""What this machine can trace. `readiness_summary` is the short form `info` prints;
`full_report` is `ebpf-info`: kernel, bpftrace, privileges, tracefs, lockdown, BTF, and per probe
family which tracepoints exist, then a verdict per tracing mode. Nothing is attached.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from aorta.ebpf.tracefs import Tracefs, find_tracefs

CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
AMDKFD_EVENTS = ("kfd_evict_process_worker_start", "kfd_restore_process_worker_start",
                 "kfd_map_memory_to_gpu_start", "kfd_kgd2kfd_schedule_evict_and_restore_process",
                 "kfd_evict_process", "kfd_restore_process")


def readiness_summary() -> dict[str, Any]:
    """A verdict line plus the reasons behind it; no probes are attached."""
    details = []
    bpftrace = shutil.which("bpftrace")
    details.append(f"bpftrace: {bpftrace or 'not found (apt-get install bpftrace)'}")
    root = os.geteuid() == 0
    details.append(f"privileges: {'root' if root else 'not root (needs sudo -n or CAP_BPF)'}")
    tracefs, why = find_tracefs(mount_if_root=False)
    details.append(f"tracefs: {why}")
    ready = bool(bpftrace) and root and tracefs is not None
    verdict = "available (see ebpf-info)" if ready else "not available (see ebpf-info)"
    return {"available": ready, "verdict": verdict, "details": details}


def effective_caps() -> dict[str, bool]:
    """CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN in this process's effective set (/proc/self/status)."""
    mask = 0
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                mask = int(line.split()[1], 16)
    return {"CAP_BPF": bool(mask >> CAP_BPF & 1), "CAP_PERFMON": bool(mask >> CAP_PERFMON & 1),
            "CAP_SYS_ADMIN": bool(mask >> CAP_SYS_ADMIN & 1)}


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def family_events(tracefs: Tracefs | None) -> dict[str, Any]:
    """Per probe family / subsystem: which of its tracepoints exist here."""
    from aorta.ebpf.probes.registry import families_for

    def present(system: str, events: list[str] | tuple[str, ...]) -> dict[str, bool]:
        return {e: bool(tracefs and tracefs.has_event(system, e)) for e in events}

    out: dict[str, Any] = {}
    for family in families_for(queue=True, memory=True):
        wanted = family.wanted_events()
        out[family.name] = {"section": family.section, "description": family.description,
                            "events": {ev: bool(tracefs and tracefs.has_event(*ev.split(":", 1)))
                                       for ev in wanted}}
    kfd = present("amdkfd", AMDKFD_EVENTS)
    variant = None
    if tracefs is not None:
        for event, ok in kfd.items():
            fmt = tracefs.read_format("amdkfd", event) if ok else None
            if fmt is not None:
                variant = "pasid" if "pasid" in fmt.fields else ("pid" if "pid" in fmt.fields else "?")
                break
    naming = ("worker (kfd_*_process_worker_*)" if kfd["kfd_evict_process_worker_start"]
              else "old (kfd_evict_process)" if kfd["kfd_evict_process"] else None)
    out["amdkfd (DKMS driver)"] = {"events": kfd, "identity_field": variant, "naming": naming}
    sched_names = ("drm_sched_job_queue" if tracefs and tracefs.has_event(
        "gpu_scheduler", "drm_sched_job_queue") else "drm_sched_job" if tracefs and
        tracefs.has_event("gpu_scheduler", "drm_sched_job") else None)
    out["gpu_scheduler naming"] = {"new (~6.17+)": sched_names == "drm_sched_job_queue",
                                   "old": sched_names == "drm_sched_job"}
    out["amdgpu (all)"] = {"count": len(tracefs.events("amdgpu")) if tracefs else 0}
    out["dma_fence (all)"] = {"count": len(tracefs.events("dma_fence")) if tracefs else 0}
    return out


def full_report() -> dict[str, Any]:
    """Everything `ebpf-info` shows, as JSON-safe data; never raises."""
    from aorta.ebpf.engine import check_readiness
    from aorta.ebpf.session import sudo_works

    ready = check_readiness(mount_tracefs=True)
    sudo_ok, sudo_why = sudo_works() if os.geteuid() != 0 else (None, "not needed (root)")
    families = family_events(ready.tracefs)
    modes: dict[str, Any] = {}
    for mode, section in (("--ebpf-trace", "queue"), ("--ebpf-memory-trace", "memory")):
        fams = {n: f for n, f in families.items() if f.get("section") == section}
        usable = [n for n, f in fams.items() if any(f["events"].values())]
        if not ready.ok:
            modes[mode] = {"available": False, "reason": ready.reason}
        elif not fams:
            modes[mode] = {"available": False, "reason": "no probe family of this kind is installed"}
        elif not usable:
            modes[mode] = {"available": False,
                           "reason": "none of its tracepoints exist on this kernel"}
        else:
            modes[mode] = {"available": True, "families_with_events": usable,
                           "reason": None}
    return {
        "kernel": os.uname().release,
        "bpftrace": {"path": ready.bpftrace,
                     "version": ".".join(map(str, ready.version)) if ready.version else None,
                     "args_syntax": ("args." if ready.version and ready.version >= (0, 20, 0)
                                     else "args->")},
        "privileges": {"euid": os.geteuid(), "effective_caps": effective_caps(),
                       "sudo_n": sudo_ok, "sudo_note": sudo_why, "launch": ready.privilege},
        "tracefs": {"root": str(ready.tracefs.root) if ready.tracefs else None,
                    "note": ready.tracefs_note},
        "lockdown": _read("/sys/kernel/security/lockdown") or "unknown (no securityfs lockdown file)",
        "btf": os.path.exists("/sys/kernel/btf/vmlinux"),
        "families": families,
        "modes": modes,
        "available": ready.ok,
        "reason": ready.reason,
    }

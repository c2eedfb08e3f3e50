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

from aorta.common.jsontypes import JsonObject
from aorta.ebpf.tracefs import Tracefs, find_tracefs, kernel_btf

CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
NO_SUBSYSTEM = {
    "amdgpu": "none on this kernel: amdgpu driver not loaded",
    "amdkfd": "none on this kernel: they ship only with AMD's DKMS amdgpu driver",
}
AMDKFD_EVENTS = (
    "kfd_evict_process_worker_start",
    "kfd_restore_process_worker_start",
    "kfd_map_memory_to_gpu_start",
    "kfd_kgd2kfd_schedule_evict_and_restore_process",
    "kfd_evict_process",
    "kfd_restore_process",
)


def readiness_summary() -> JsonObject:
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
    return {
        "CAP_BPF": bool(mask >> CAP_BPF & 1),
        "CAP_PERFMON": bool(mask >> CAP_PERFMON & 1),
        "CAP_SYS_ADMIN": bool(mask >> CAP_SYS_ADMIN & 1),
    }


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def _split_event(event: str) -> tuple[str, str] | None:
    """'system:event' → (system, event) for tracepoints; None for other probe kinds (uprobes …)."""
    system, _, name = event.partition(":")
    if not (system and name) or "/" in name or system in ("uprobe", "uretprobe", "usdt"):
        return None
    return system, name


def event_states(tracefs: Tracefs | None, events: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Each "system:event" → present / missing / not readable / not accessible (no tracefs)."""
    out = {}
    for event in events:
        split = _split_event(event)
        if tracefs is None:
            out[event] = "not accessible"
        elif split is None:
            out[event] = "not a tracepoint"
        else:
            out[event] = tracefs.event_state(*split)
    return out


def _by_subsystem(states: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per tracepoint subsystem: how many of the family's events are present, out of how many."""
    counts: dict[str, dict[str, int]] = {}
    for event, state in states.items():
        split = _split_event(event)
        if split is None:
            continue
        entry = counts.setdefault(split[0], {"present": 0, "wanted": 0})
        entry["wanted"] += 1
        entry["present"] += state == "present"
    return counts


def family_events(tracefs: Tracefs | None, program: Any = None) -> JsonObject:
    """Per probe family / subsystem: which of its tracepoints exist here, and what would attach."""
    from aorta.ebpf.probes.registry import families_for

    out: JsonObject = {}
    for family in families_for(queue=True, memory=True):
        states = event_states(tracefs, family.wanted_events())
        entry: JsonObject = {
            "section": family.section,
            "description": family.description,
            "events": {ev: state == "present" for ev, state in states.items()},
            "states": states,
            "by_subsystem": _by_subsystem(states),
        }
        if program is not None and family.name in program.used_events:
            entry["attach"] = {
                "events": list(program.used_events.get(family.name, [])),
                "not_attached": dict(program.missing.get(family.name, {})),
            }
        out[family.name] = entry
    kfd_states = event_states(tracefs, [f"amdkfd:{e}" for e in AMDKFD_EVENTS])
    kfd = {e.split(":", 1)[1]: st == "present" for e, st in kfd_states.items()}
    variant = None
    if tracefs is not None:
        for event, ok in kfd.items():
            fmt = tracefs.read_format("amdkfd", event) if ok else None
            if fmt is not None:
                variant = "pasid" if "pasid" in fmt.fields else ("pid" if "pid" in fmt.fields else "?")
                break
    naming = (
        "worker (kfd_*_process_worker_*)"
        if kfd["kfd_evict_process_worker_start"]
        else "old (kfd_evict_process)"
        if kfd["kfd_evict_process"]
        else None
    )
    out["amdkfd (DKMS driver)"] = {"events": kfd, "identity_field": variant, "naming": naming}
    sched_names = (
        "drm_sched_job_queue"
        if tracefs and tracefs.has_event("gpu_scheduler", "drm_sched_job_queue")
        else "drm_sched_job"
        if tracefs and tracefs.has_event("gpu_scheduler", "drm_sched_job")
        else None
    )
    out["gpu_scheduler naming"] = {
        "new (~6.17+)": sched_names == "drm_sched_job_queue",
        "old": sched_names == "drm_sched_job",
    }
    out["amdgpu (all)"] = {"count": len(tracefs.events("amdgpu")) if tracefs else 0}
    out["dma_fence (all)"] = {"count": len(tracefs.events("dma_fence")) if tracefs else 0}
    return out


def _render_program(ready: Any) -> Any:
    """The program a run with both tracing flags would load here (None when it cannot be built)."""
    from aorta.ebpf.engine import make_program
    from aorta.ebpf.probes.base import TraceTarget

    if ready.tracefs is None:
        return None
    try:
        return make_program(
            True, True, TraceTarget(pids=(os.getpid(),), follow_children=True), ready.tracefs, ready.version
        )
    except Exception:  # ebpf-info reports, it never fails (the modes below say why)
        return None


def _subsystem_list(
    tracefs: Tracefs | None, families: JsonObject, system: str, extra: tuple[str, ...] = ()
) -> JsonObject:
    """docs/guide.md's "<system> tracepoints:" list: every event aorta uses from `system`, with its state."""
    wanted = {
        ev for fam in families.values() for ev in (fam.get("states") or {}) if ev.startswith(f"{system}:")
    }
    wanted.update(f"{system}:{e}" for e in extra)
    states = event_states(tracefs, sorted(wanted))
    present_in_kernel = bool(tracefs and tracefs.events(system))
    if tracefs is None:
        note = "not accessible"
    elif not present_in_kernel:
        note = NO_SUBSYSTEM.get(system, f"none on this kernel: {system} driver not loaded")
    else:
        note = None
    return {"events": {ev.split(":", 1)[1]: st for ev, st in states.items()}, "note": note}


def guide_summary(ready: Any, families: JsonObject) -> JsonObject:
    """docs/guide.md's "eBPF Capabilities" block as data: versions, privileges, verdict, AMD tracepoints."""
    from aorta.ebpf.probes.kfd import KFD_DEVICE

    caps = effective_caps()
    root = os.geteuid() == 0
    if root:
        privilege = {"ok": True, "how": "root"}
    elif caps["CAP_BPF"] and caps["CAP_PERFMON"]:
        privilege = {"ok": True, "how": "CAP_BPF and CAP_PERFMON in this process"}
    elif ready.prefix is not None:
        privilege = {"ok": True, "how": ready.privilege}
    else:
        privilege = {"ok": False, "how": ready.privilege}
    kfd = families.get("amdkfd (DKMS driver)", {}).get("events", {})
    variant = (
        "kfd_evict_process_worker_*"
        if kfd.get("kfd_evict_process_worker_start")
        else "kfd_evict_process"
        if kfd.get("kfd_evict_process")
        else None
    )
    return {
        "kernel_version": os.uname().release,
        "bpftrace": (
            {
                "installed": True,
                "path": ready.bpftrace,
                "version": ".".join(map(str, ready.version)) if ready.version else None,
            }
            if ready.bpftrace
            else {"installed": False}
        ),
        "root_or_cap_bpf": privilege,
        "overall_available": ready.ok,
        "reason": ready.reason,
        "amdgpu_tracepoints": _subsystem_list(ready.tracefs, families, "amdgpu"),
        "amdkfd_tracepoints": _subsystem_list(ready.tracefs, families, "amdkfd", AMDKFD_EVENTS),
        "kfd_variant": variant,
        "kfd_device": {"path": KFD_DEVICE, "exists": os.path.exists(KFD_DEVICE)},
    }


def full_report(
    mount: bool = False, bpftrace: str | None = None, tracefs_root: str | None = None
) -> JsonObject:
    """Everything `ebpf-info` shows, as JSON-safe data. A diagnostic: it mounts tracefs only when
    asked (`mount`, ebpf-info --mount); run and ebpf-attach mount it to trace. `bpftrace` and
    `tracefs_root` are ebpf-info's --bpftrace and --tracefs (a bad one raises UsageError)."""
    from aorta.ebpf.engine import check_readiness
    from aorta.ebpf.session import sudo_works

    ready = check_readiness(mount_tracefs=mount, bpftrace=bpftrace, tracefs_root=tracefs_root)
    sudo_ok, sudo_why = sudo_works() if os.geteuid() != 0 else (None, "not needed (root)")
    program = _render_program(ready)
    families = family_events(ready.tracefs, program)
    modes: JsonObject = {}
    for mode, section in (("--ebpf-trace", "queue"), ("--ebpf-memory-trace", "memory")):
        fams = {n: f for n, f in families.items() if f.get("section") == section}
        if program is not None:
            usable = [n for n, f in fams.items() if (f.get("attach") or {}).get("events")]
        else:
            usable = [n for n, f in fams.items() if any(f["events"].values())]
        if not ready.ok:
            modes[mode] = {"available": False, "reason": ready.reason}
        elif not fams:
            modes[mode] = {"available": False, "reason": "no probe family of this kind is installed"}
        elif not usable:
            modes[mode] = {
                "available": False,
                "reason": "no probe of its families can attach on this machine",
            }
        else:
            modes[mode] = {"available": True, "families_with_events": usable, "reason": None}
    version = ".".join(map(str, ready.version)) if ready.version else None
    return {
        "summary": guide_summary(ready, families),
        "kernel": os.uname().release,
        "bpftrace": {
            "path": ready.bpftrace,
            "version": version,
            "args_syntax": (
                None if not ready.version else "args." if ready.version >= (0, 20, 0) else "args->"
            ),
        },
        "privileges": {
            "euid": os.geteuid(),
            "effective_caps": effective_caps(),
            "sudo_n": sudo_ok,
            "sudo_note": sudo_why,
            "launch": ready.privilege,
        },
        "tracefs": {"root": str(ready.tracefs.root) if ready.tracefs else None, "note": ready.tracefs_note},
        "lockdown": _read("/sys/kernel/security/lockdown") or "unknown (no securityfs lockdown file)",
        "btf": kernel_btf(),
        "families": families,
        "modes": modes,
        "available": ready.ok,
        "reason": ready.reason,
    }

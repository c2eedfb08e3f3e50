"""AMD KFD path (what HIP really does): /dev/kfd queue ioctls and the sysfs queue inventory.

Each HSA queue is one AMDKFD_IOC_CREATE_QUEUE ioctl. We catch ioctls of the traced processes on
file descriptors known to be /dev/kfd (open()s seen while tracing, plus descriptors already open
when tracing starts, read from /proc/PID/fd), match on type 'K' and the command number only
(struct sizes change between releases), and aggregate count and latency per command, in the window
and since attach separately (queues are usually created during warm-up). CREATE_QUEUE's queue type
and priority are read from the argument struct. `collect` adds the snapshot of
/sys/class/kfd/kfd/proc/<pid>/queues and a multiplexing verdict (hardware queues vs streams).
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import CollectContext, FamilyResult, ProbeCode, ProbeFamily, RenderContext
from aorta.ebpf.probes.common import KERNEL_BYPASS

KFD_TYPE = 0x4B
COMMANDS = {
    0x02: "CREATE_QUEUE",
    0x03: "DESTROY_QUEUE",
    0x07: "UPDATE_QUEUE",
    0x0C: "WAIT_EVENTS",
    0x1A: "SET_CU_MASK",
}
QUEUE_TYPES = {0: "COMPUTE", 1: "SDMA", 2: "COMPUTE_AQL", 3: "SDMA_XGMI", 4: "SDMA_BY_ENG_ID"}
# offsets in struct kfd_ioctl_create_queue_args (stable since 4.x): queue_type, queue_priority
CQ_TYPE_OFF, CQ_PRIO_OFF = 40, 48
SYSFS_PROC = Path("/sys/class/kfd/kfd/proc")
KFD_DEVICE = "/dev/kfd"
_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]+$")


def kfd_fds(pid: int, device: str = KFD_DEVICE) -> list[int]:
    """File descriptors of `pid` open on `device` right now (empty if none or unreadable)."""
    fds = []
    with contextlib.suppress(OSError):
        for entry in Path(f"/proc/{int(pid)}/fd").iterdir():
            with contextlib.suppress(OSError, ValueError):
                if os.readlink(entry) == device:
                    fds.append(int(entry.name))
    return fds


class KfdFamily(ProbeFamily):
    """Queue creation/destruction and event waits on /dev/kfd; sysfs queue inventory."""

    name = "kfd"
    section = "queue"
    description = "AMD KFD ioctls (CREATE/DESTROY_QUEUE, WAIT_EVENTS) and sysfs queue inventory"
    rank_keyed_maps = (
        "@kfd_calls",
        "@kfd_lat",
        "@kfd_created",
        "@kfd_errors",
        *hist.recorder_maps("kfd_wait_d"),
    )

    def __init__(self, device: str = KFD_DEVICE, force: bool = False) -> None:
        """`device`/`force` exist for tests: exercise the probes on a machine without a GPU."""
        if not _PATH_RE.match(device):
            raise ValueError(f"invalid device path {device!r}")
        self.device = device
        self.force = force

    def wanted_events(self) -> list[str]:
        return [
            "syscalls:sys_enter_ioctl",
            "syscalls:sys_exit_ioctl",
            "syscalls:sys_enter_openat",
            "syscalls:sys_exit_openat",
        ]

    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        enter, leave = ctx.event("syscalls", "sys_enter_ioctl"), ctx.event("syscalls", "sys_exit_ioctl")
        if enter is None or leave is None or not enter.has("fd", "cmd", "arg") or not leave.has("ret"):
            for ev in self.wanted_events():
                code.missing[ev] = "syscall tracepoints for ioctl absent"
            return code
        if not (self.force or ctx.tracefs.events("amdgpu") or Path(self.device).exists()):
            # KFD is part of the amdgpu driver: without it no process can hold /dev/kfd, and
            # syscall probes would only add cost to every ioctl/openat on the machine.
            for ev in self.wanted_events():
                code.missing[ev] = "no amdgpu driver here (no amdgpu tracepoints, no /dev/kfd)"
            return code
        a = ctx.dialect.arg
        for pid in ctx.target.pids:
            code.begin.extend(f"@kfd_fd[{int(pid)}, {fd}] = 1;" for fd in kfd_fds(pid, self.device))
        o_enter, o_exit = ctx.event("syscalls", "sys_enter_openat"), ctx.event("syscalls", "sys_exit_openat")
        if o_enter is not None and o_exit is not None and o_enter.fields.get("filename") is not None:
            code.used_events += ["syscalls:sys_enter_openat", "syscalls:sys_exit_openat"]
            code.probes.append(
                f"tracepoint:syscalls:sys_enter_openat\n/{ctx.pid_filter}/\n{{\n"
                f'  if (str({a("filename")}) == "{self.device}") {{ @kfd_opening[tid] = 1; }}\n}}'
            )
            code.probes.append(
                f"tracepoint:syscalls:sys_exit_openat\n/@kfd_opening[tid]/\n{{\n"
                f"  if ({a('ret')} >= 0) {{ @kfd_fd[pid, {a('ret')}] = 1; }}\n"
                "  delete(@kfd_opening[tid]);\n}"
            )
        else:
            code.missing["syscalls:sys_enter_openat"] = "absent: only fds open at start are known"
        phase = f"({ctx.gate} ? 1 : 0)"
        k = ctx.key
        created = k(f"*(uint32*)uptr($p + {CQ_TYPE_OFF})", f"*(uint32*)uptr($p + {CQ_PRIO_OFF})", "$ph")
        code.used_events += ["syscalls:sys_enter_ioctl", "syscalls:sys_exit_ioctl"]
        code.probes.append(
            f"tracepoint:syscalls:sys_enter_ioctl\n/{ctx.pid_filter} && @kfd_fd[pid, {a('fd')}]/\n{{\n"
            f"  $cmd = {a('cmd')};\n  $arg = {a('arg')};\n"
            f"  if ((($cmd >> 8) & 0xff) == {KFD_TYPE}) {{\n"
            "    @kfd_ts[tid] = nsecs;\n"
            "    @kfd_nr[tid] = $cmd & 0xff;\n"
            "    @kfd_arg[tid] = $arg;\n  }\n}"
        )
        code.probes.append(
            f"tracepoint:syscalls:sys_exit_ioctl\n/@kfd_ts[tid]/\n{{\n"
            # read the ctx field once, first: the verifier rejects ctx reads after branches
            f"  $ret = {a('ret')};\n"
            "  $nr = @kfd_nr[tid];\n"
            f"  $ph = {phase};\n"
            # a node program (torchrun) keys by the calling rank (ctx.key)
            f"  @kfd_calls{k('$nr', '$ph')} = count();\n"
            f"  @kfd_lat{k('$nr', '$ph')} = stats(nsecs - @kfd_ts[tid]);\n"
            "  if ($nr == 0x0C && $ph == 1) {\n"
            f"{hist.record_code('kfd_wait_d', 'nsecs - @kfd_ts[tid]', prefix=ctx.prefix())}\n  }}\n"
            "  if ($nr == 0x02 && $ret == 0) {\n"
            "    $p = @kfd_arg[tid];\n"
            f"    @kfd_created{created} = count();\n  }}\n"
            f"  if ($ret != 0) {{ @kfd_errors{k('$nr')} = count(); }}\n"
            "  delete(@kfd_ts[tid]); delete(@kfd_nr[tid]); delete(@kfd_arg[tid]);\n}"
        )
        code.end += [
            "clear(@kfd_ts);",
            "clear(@kfd_nr);",
            "clear(@kfd_arg);",
            "clear(@kfd_fd);",
            "clear(@kfd_opening);",
        ]
        return code

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        calls: dict[str, JsonObject] = {}
        lat = {k: hist.stats(v) for k, v in hist.keyed(maps.get("@kfd_lat")).items()}
        for key, value in hist.keyed(maps.get("@kfd_calls")).items():
            nr, _, ph = key.partition(",")
            if not nr:
                continue
            name = COMMANDS.get(int(nr), f"0x{int(nr):02X}")
            entry = calls.setdefault(name, {"window": 0, "outside_window": 0})
            where = "window" if ph == "1" else "outside_window"
            entry[where] = int(value)
            st = lat.get(key)
            entry[f"{where}_avg_us"] = st[1] / st[0] / 1e3 if st and st[0] else None
        created = []
        for key, value in hist.keyed(maps.get("@kfd_created")).items():
            parts = key.split(",")
            if len(parts) == 3:
                qtype, prio, phase = (int(p) for p in parts)
                created.append(
                    {
                        "queue_type": QUEUE_TYPES.get(qtype, str(qtype)),
                        "priority": prio,
                        "in_window": phase == 1,
                        "count": int(value),
                    }
                )
        wait = hist.distribution(maps, "kfd_wait_d")
        wait_p99 = hist.quantile(wait, 0.99)
        inventory = queue_inventory(list(context.pids))
        metrics = {
            "summary": None,
            "ioctls": calls,
            "queues_created": created,
            "wait_events_p99_us": wait_p99["value"] / 1e3 if wait_p99 else None,
            "wait_events_p99": wait_p99,
            "wait_events_hist_ns": hist.as_records(wait.hist),
            "sysfs_inventory": inventory,
            "multiplexing": multiplexing_verdict(created, inventory, context.streams),
        }
        coverage = {
            "source": "syscalls:sys_enter/exit_ioctl on /dev/kfd + sysfs "
            "/sys/class/kfd/kfd/proc/<pid>/queues",
            "covered": "KFD ioctls of the traced processes since attach (window and "
            "outside it reported apart)",
            "statement": f"{KERNEL_BYPASS}; KFD shows queue creation and host waits only.",
        }
        return FamilyResult(self.name, self.section, metrics, coverage)


def queue_inventory(pids: list[int]) -> JsonObject:
    """Snapshot of the hardware queues each pid holds, from KFD's sysfs; null with a reason."""
    if not SYSFS_PROC.is_dir():
        return {"queues": None, "reason": f"{SYSFS_PROC} absent (no AMD KFD driver on this machine)"}
    out: list[JsonObject] = []
    for pid in pids:
        qdir = SYSFS_PROC / str(int(pid)) / "queues"
        if not qdir.is_dir():
            continue
        for q in sorted(qdir.iterdir(), key=lambda p: p.name):
            entry: JsonObject = {"pid": int(pid), "queue_id": q.name}
            for attr in ("type", "gpuid", "size"):
                with contextlib.suppress(OSError):
                    entry[attr] = (q / attr).read_text().strip()
            out.append(entry)
    return {"queues": out, "count": len(out), "source": str(SYSFS_PROC)}


def multiplexing_verdict(created: list[JsonObject], inventory: JsonObject, streams: int | None) -> JsonObject:
    """Hardware compute queues vs streams requested → multiplexed, one per stream, or unknown."""
    compute = None
    if inventory.get("queues") is not None:
        compute = sum(1 for q in inventory["queues"] if "compute" in str(q.get("type", "")).lower())
        source = "sysfs inventory (compute queues)"
    elif created:
        compute = sum(c["count"] for c in created if c["queue_type"].startswith("COMPUTE"))
        source = "CREATE_QUEUE ioctls seen since attach"
    if compute is None or not streams:
        return {"verdict": None, "reason": "no KFD queue information (not an AMD GPU run)"}
    if compute == 0:
        return {
            "verdict": None,
            "reason": "no compute queues seen: were they created before tracing started?",
            "source": source,
        }
    verdict = "multiplexed" if compute < streams else "one hardware queue per stream"
    return {"verdict": verdict, "hardware_compute_queues": compute, "streams": streams, "source": source}

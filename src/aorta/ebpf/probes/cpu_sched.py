"""CPU scheduling of queue threads (CPU backend; any traced process).

Per thread of the traced processes, in the window only: run-queue latency (wakeup → on CPU, and
preempted → back on CPU, kept apart), on-CPU time, context switches, involuntary preemptions and
the CPUs it ran on. All of it aggregates in the kernel (hist, stats, sum, count). `collect`
attributes threads to hardware queues and streams through the backend's tid registry.
"""

from __future__ import annotations

import re
from typing import Any

from aorta.ebpf import hist
from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily, RenderContext
from aorta.ebpf.program import WINDOW_START_MAP

WAKE, PREEMPT = 0, 1
_WORKER_COMM = re.compile(r"^aorta-hwq(\d+)$")
SOURCE = "kernel sched tracepoints (sched_wakeup, sched_wakeup_new, sched_switch) via eBPF"


class CpuSchedFamily(ProbeFamily):
    """Run-queue latency and on-CPU time of the traced processes' threads."""

    name = "cpu_sched"
    section = "queue"
    description = "CPU scheduling of queue worker threads (run-queue latency, on-CPU, preemption)"

    def wanted_events(self) -> list[str]:
        return ["sched:sched_switch", "sched:sched_wakeup", "sched:sched_wakeup_new"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        switch = ctx.event("sched", "sched_switch")
        if switch is None or not switch.has("prev_pid", "prev_state", "next_pid"):
            code.missing["sched:sched_switch"] = "tracepoint absent (or lacks prev_pid/next_pid)"
            for ev in ("sched:sched_wakeup", "sched:sched_wakeup_new"):
                code.missing[ev] = "unused without sched:sched_switch"
            return code
        a, gate = ctx.dialect.arg, ctx.gate
        code.begin.extend(f"@cpu_sched_track[{tid}] = 1;" for tid in sorted(ctx.target.thread_labels))
        wakeups = [f"tracepoint:sched:{ev}" for ev in ("sched_wakeup", "sched_wakeup_new")
                   if (fmt := ctx.event("sched", ev)) is not None and fmt.has("pid")]
        for ev in ("sched_wakeup", "sched_wakeup_new"):
            (code.used_events.append(f"sched:{ev}") if f"tracepoint:sched:{ev}" in wakeups
             else code.missing.setdefault(f"sched:{ev}", "tracepoint absent"))
        if wakeups:
            code.probes.append(
                f"{','.join(wakeups)}\n/@cpu_sched_track[{a('pid')}]/\n{{\n"
                f"  @cpu_sched_wts[{a('pid')}] = nsecs;\n  @cpu_sched_wkind[{a('pid')}] = {WAKE};\n"
                f"  if ({gate}) {{ @cpu_sched_wakeups[{a('pid')}] = count(); }}\n}}")
        code.used_events.append("sched:sched_switch")
        code.probes.append(
            "tracepoint:sched:sched_switch\n{\n"
            f"  if ({ctx.pid_filter}) {{\n"
            # lookups are cheaper than updates: write the per-thread flags only once
            "    if (!@cpu_sched_track[tid]) { @cpu_sched_track[tid] = 1; }\n"
            f"    if ({gate}) {{\n"
            "      $on = @cpu_sched_onts[tid];\n"
            # unknown start (first seen while running): no on-CPU sample rather than a wrong one
            "      if ($on) {\n"
            f"        if ($on < {WINDOW_START_MAP}) {{ $on = {WINDOW_START_MAP}; }}\n"
            "        @cpu_sched_oncpu[tid] = sum(nsecs - $on);\n"
            "      }\n"
            "      @cpu_sched_switches[tid] = count();\n"
            "      if (!@cpu_sched_named[tid]) {\n"
            "        @cpu_sched_named[tid] = 1; @cpu_sched_comm[tid, comm] = count();\n      }\n"
            f"      if (({a('prev_state')} & 0xff) == 0) {{ @cpu_sched_preempt[tid] = count(); }}\n"
            "    }\n"
            "    delete(@cpu_sched_onts[tid]);\n"
            # still runnable after the switch: it waits on the run queue from now on
            f"    if (({a('prev_state')} & 0xff) == 0) {{\n"
            f"      @cpu_sched_wts[tid] = nsecs; @cpu_sched_wkind[tid] = {PREEMPT};\n    }}\n"
            "  }\n"
            f"  $n = {a('next_pid')};\n"
            "  if (@cpu_sched_track[$n]) {\n"
            "    $w = @cpu_sched_wts[$n];\n"
            f"    if ($w && {gate}) {{\n"
            f"      if ($w < {WINDOW_START_MAP}) {{ $w = {WINDOW_START_MAP}; }}\n"
            "      $k = @cpu_sched_wkind[$n];\n"
            "      @cpu_sched_runq[$n, $k] = hist(nsecs - $w);\n"
            "      @cpu_sched_runq_s[$n, $k] = stats(nsecs - $w);\n"
            "      @cpu_sched_cpus[$n, cpu] = count();\n"
            "    }\n"
            "    delete(@cpu_sched_wts[$n]);\n"
            "    delete(@cpu_sched_wkind[$n]);\n"
            "    @cpu_sched_onts[$n] = nsecs;\n"
            "  }\n}")
        code.end.extend(["clear(@cpu_sched_track);", "clear(@cpu_sched_named);", "clear(@cpu_sched_wts);",
                         "clear(@cpu_sched_wkind);", "clear(@cpu_sched_onts);"])
        return code

    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        workers = {int(w["tid"]): w for w in context.get("workers", []) if w.get("tid")}
        threads: dict[int, dict[str, Any]] = {}

        def thread(tid: int) -> dict[str, Any]:
            return threads.setdefault(tid, {
                "tid": tid, "comm": None, "wakeups": 0, "switches": 0, "involuntary": 0,
                "on_cpu_ms": 0.0, "cpus": [], "runq_wake": [], "runq_preempt": [],
                "runq_wake_stats": (0, 0), "runq_preempt_stats": (0, 0)})

        for key, value in hist.keyed(maps.get("@cpu_sched_wakeups")).items():
            if key:
                thread(int(key))["wakeups"] = int(value)
        for key, value in hist.keyed(maps.get("@cpu_sched_switches")).items():
            if key:
                thread(int(key))["switches"] = int(value)
        for key, value in hist.keyed(maps.get("@cpu_sched_preempt")).items():
            if key:
                thread(int(key))["involuntary"] = int(value)
        for key, value in hist.keyed(maps.get("@cpu_sched_oncpu")).items():
            if key:
                thread(int(key))["on_cpu_ms"] = int(value) / 1e6
        for key in hist.keyed(maps.get("@cpu_sched_comm")):
            tid, _, comm = key.partition(",")
            if tid:
                thread(int(tid))["comm"] = comm
        for key in hist.keyed(maps.get("@cpu_sched_cpus")):
            tid, _, cpu = key.partition(",")
            if tid and cpu:
                thread(int(tid))["cpus"].append(int(cpu))
        for key, value in hist.keyed(maps.get("@cpu_sched_runq")).items():
            tid, _, kind = key.partition(",")
            if tid and kind:
                thread(int(tid))["runq_wake" if int(kind) == WAKE else "runq_preempt"] = \
                    hist.buckets(value)
        for key, value in hist.keyed(maps.get("@cpu_sched_runq_s")).items():
            tid, _, kind = key.partition(",")
            st = hist.stats(value)
            if tid and kind and st:
                name = "runq_wake_stats" if int(kind) == WAKE else "runq_preempt_stats"
                thread(int(tid))[name] = st
        return self._summarise(threads, workers, maps)

    def _summarise(self, threads: dict[int, dict[str, Any]], workers: dict[int, dict[str, Any]],
                   maps: dict[str, Any]) -> FamilyResult:
        rows = []
        for tid, t in sorted(threads.items()):
            worker = workers.get(tid)
            rows.append(_thread_row(t, worker))
        queue_rows = [r for r in rows if r["queue"] is not None]
        all_wake = hist.merge(*(threads[r["tid"]]["runq_wake"] for r in queue_rows))
        wake_n = sum(threads[r["tid"]]["runq_wake_stats"][0] for r in queue_rows)
        wake_total = sum(threads[r["tid"]]["runq_wake_stats"][1] for r in queue_rows)
        pre_n = sum(threads[r["tid"]]["runq_preempt_stats"][0] for r in queue_rows)
        pre_total = sum(threads[r["tid"]]["runq_preempt_stats"][1] for r in queue_rows)
        p99 = hist.percentile(all_wake, 0.99)
        rings = sorted({r["queue"] for r in queue_rows if r["on_cpu_ms"] > 0})
        has_registry = bool(workers)
        summary = None
        if has_registry:
            summary = {
                "source": "cpu_sched",
                "total_submissions": sum(r["wakeups"] for r in queue_rows),
                "submissions_meaning": "wakeups of queue worker threads (work handed to an idle queue)",
                "total_dispatches": wake_n,
                "dispatches_meaning": "queue thread switched onto a CPU after a wakeup",
                "hw_rings_used": rings,
                "hw_rings_meaning": "CPU-backend queues whose worker thread ran in the window",
                "submit_to_dispatch_avg_us": (wake_total / wake_n / 1e3) if wake_n else None,
                "submit_to_dispatch_p99_us": (p99["estimate"] / 1e3) if p99 else None,
                "submit_to_dispatch_p99_bucket_us": ([p99["bucket_min"] / 1e3, p99["bucket_max"] / 1e3]
                                                     if p99 else None),
                "submit_to_dispatch_meaning": "run-queue latency: sched_wakeup → sched_switch in",
                "runq_wait_total_ms": wake_total / 1e6 + pre_total / 1e6,
                "runq_wait_after_wakeup_total_ms": wake_total / 1e6,
                "runq_wait_after_preemption_total_ms": pre_total / 1e6,
                "preemption_waits": pre_n,
            }
        coverage = {
            "source": SOURCE,
            "covered": "every thread of the traced processes, measurement window only",
            "attribution": ("thread id → queue/streams from the backend's worker registry"
                            if has_registry else "per thread only (no queue registry for this target)"),
            "threads_seen": len(rows),
        }
        metrics = {"summary": summary, "threads": rows,
                   "runq_latency_hist_ns": hist.as_records(all_wake),
                   "histogram_kind": "log2 buckets of ns (queue threads, wakeup → on CPU)"}
        return FamilyResult(self.name, self.section, metrics, coverage)


def _thread_row(t: dict[str, Any], worker: dict[str, Any] | None) -> dict[str, Any]:
    """One per-thread (= per queue on the CPU backend) row of the table."""
    n, total = t["runq_wake_stats"]
    p99 = hist.percentile(t["runq_wake"], 0.99)
    pn, ptotal = t["runq_preempt_stats"]
    helper = _WORKER_COMM.match(t["comm"] or "") if worker is None else None
    return {
        "tid": t["tid"], "comm": t["comm"],
        "queue": worker["queue"] if worker else None,
        # threads a queue worker started (torch/OpenMP pools) inherit its name: shown, not counted
        "helper_of_queue": int(helper.group(1)) if helper else None,
        "streams": list(worker["streams"]) if worker else None,
        "wakeups": t["wakeups"], "dispatches": n,
        "runq_avg_us": (total / n / 1e3) if n else None,
        "runq_p99_us": (p99["estimate"] / 1e3) if p99 else None,
        "runq_total_ms": total / 1e6,
        "preempt_waits": pn, "preempt_wait_total_ms": ptotal / 1e6,
        "on_cpu_ms": t["on_cpu_ms"], "switches": t["switches"],
        "involuntary": t["involuntary"], "cpus": sorted(set(t["cpus"])),
    }

"""CPU scheduling of queue threads (CPU backend; any traced process).

Per thread of the traced processes, in the window only: run-queue latency (wakeup → on CPU, and
preempted → back on CPU, kept apart), on-CPU time, context switches, involuntary preemptions and
the CPUs it ran on. All of it aggregates in the kernel (hist, stats, sum, count). `collect`
attributes threads to hardware queues and streams through the backend's tid registry.
"""

from __future__ import annotations

import re
from typing import Any

from aorta.ebpf import hist, procstat
from aorta.ebpf.probes.base import (
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    TraceTarget,
)
from aorta.ebpf.program import GATE_MAP

WAKE, PREEMPT, SUBMIT = 0, 1, 2  # woken by another thread, preempted, woken by the submitter
SUBMITTER_LABEL = "host"  # TraceTarget.thread_labels value of the thread that enqueues work
_WORKER_COMM = re.compile(r"^aorta-hwq(\d+)$")
SOURCE = "kernel sched tracepoints (sched_wakeup, sched_wakeup_new, sched_switch) via eBPF"


class CpuSchedFamily(ProbeFamily):
    """Run-queue latency and on-CPU time of the traced processes' threads."""

    name = "cpu_sched"
    section = "queue"
    description = "CPU scheduling of queue worker threads (run-queue latency, on-CPU, preemption)"

    def wanted_events(self) -> list[str]:
        return ["sched:sched_switch", "sched:sched_wakeup", "sched:sched_wakeup_new",
                "sched:sched_migrate_task"]

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
        submitters = sorted(t for t, label in ctx.target.thread_labels.items()
                            if label == SUBMITTER_LABEL)
        # the waker is the current task: a queue thread woken by the submitting (host) thread
        # is a submission; other wakeups (GIL hand-off, cross-stream waits) are counted apart
        kind = " || ".join(f"tid == {int(t)}" for t in submitters)
        kind_expr = f"(({kind}) ? {SUBMIT} : {WAKE})" if kind else str(WAKE)
        if wakeups:
            # one map per waiting thread: (since << 2) | kind, so one lookup gives both
            code.probes.append(
                f"{','.join(wakeups)}\n/@cpu_sched_track[{a('pid')}]/\n{{\n"
                f"  $p = {a('pid')};\n  $k = {kind_expr};\n"
                "  @cpu_sched_w[$p] = (nsecs << 2) | $k;\n"
                # submissions are counted where they happen; other wakeups are counted by the
                # dispatch that consumes them (runq stats), which saves a map update per wakeup
                f"  if ($k == {SUBMIT} && {gate}) {{ @cpu_sched_wakeups[$p, $k] = count(); }}\n}}")
        code.used_events.append("sched:sched_switch")
        # Hot path (every context switch): ctx fields read once, first (the verifier rejects ctx
        # reads after branches); the gate map holds the window start, so one lookup gives both;
        # per-thread flags are written once. On-CPU time and switch counts are not counted here:
        # the kernel keeps them per thread (see `snapshot`), so they cost nothing per event.
        code.probes.append(
            "tracepoint:sched:sched_switch\n{\n"
            f"  $st = {a('prev_state')} & 0xff;\n  $n = {a('next_pid')};\n"
            f"  if ({ctx.pid_filter}) {{\n"
            "    if (!@cpu_sched_track[tid]) {\n"
            "      @cpu_sched_track[tid] = 1; @cpu_sched_comm[tid, comm] = count();\n    }\n"
            # still runnable after the switch (preempted): it waits on the run queue from now on
            f"    if ($st == 0) {{ @cpu_sched_w[tid] = (nsecs << 2) | {PREEMPT}; }}\n"
            "  }\n"
            "  if (@cpu_sched_track[$n]) {\n"
            "    $v = @cpu_sched_w[$n];\n"
            "    if ($v) {\n"
            f"      $g = {GATE_MAP};\n"
            "      if ($g) {\n"
            "        $w = $v >> 2;\n        $k = $v & 3;\n"
            "        if ($w < $g) { $w = $g; }\n"
            "        @cpu_sched_runq[$n, $k] = hist(nsecs - $w);\n"
            "        @cpu_sched_runq_s[$n, $k] = stats(nsecs - $w);\n      }\n"
            "      delete(@cpu_sched_w[$n]);\n    }\n"
            "  }\n}")
        migrate = ctx.event("sched", "sched_migrate_task")
        if migrate is not None and migrate.has("pid", "dest_cpu"):
            # CPUs used = the CPU each thread was on at window start (from /proc) plus every
            # migration target in the window: exact, and migrations are rare (no per-switch cost)
            code.used_events.append("sched:sched_migrate_task")
            code.probes.append(
                f"tracepoint:sched:sched_migrate_task\n/@cpu_sched_track[{a('pid')}] && {gate}/\n"
                f"{{\n  @cpu_sched_cpus[{a('pid')}, {a('dest_cpu')}] = 1;\n}}")
        else:
            code.missing["sched:sched_migrate_task"] = "tracepoint absent: CPUs used not measured"
        code.end.extend(["clear(@cpu_sched_track);", "clear(@cpu_sched_w);"])
        return code

    def snapshot(self, target: TraceTarget) -> Any:
        """Per-thread kernel counters of the traced processes (on-CPU, run delay, switches)."""
        return procstat.task_counters(target.pids, target.exclude_pids)

    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        workers = {int(w["tid"]): w for w in context.get("workers", []) if w.get("tid")}
        threads: dict[int, dict[str, Any]] = {}

        def thread(tid: int) -> dict[str, Any]:
            return threads.setdefault(tid, {
                "tid": tid, "comm": None, "wakeups": {WAKE: 0, SUBMIT: 0}, "cpus": [],
                "hist": {WAKE: [], PREEMPT: [], SUBMIT: []},
                "stats": {WAKE: (0, 0), PREEMPT: (0, 0), SUBMIT: (0, 0)}})

        for key, value in hist.keyed(maps.get("@cpu_sched_wakeups")).items():
            tid, _, kind = key.partition(",")
            if tid and kind:
                thread(int(tid))["wakeups"][int(kind)] = int(value)

        snaps = (context.get("snapshots") or {}).get(self.name) or {}
        start, stop = snaps.get("start") or {}, snaps.get("stop") or {}
        for tid in stop:  # every thread that ran in the window, even without a traced event
            if (procstat.delta(start, stop, tid, "exec_ns") or 0) > 0:
                thread(tid)
        comms = {}
        for key in hist.keyed(maps.get("@cpu_sched_comm")):
            tid, _, comm = key.partition(",")
            if tid:
                comms[int(tid)] = comm
        for key in hist.keyed(maps.get("@cpu_sched_cpus")):
            tid, _, cpu = key.partition(",")
            if tid and cpu:
                thread(int(tid))["cpus"].append(int(cpu))
        for key, value in hist.keyed(maps.get("@cpu_sched_runq")).items():
            tid, _, kind = key.partition(",")
            if tid and kind:
                thread(int(tid))["hist"][int(kind)] = hist.buckets(value)
        for key, value in hist.keyed(maps.get("@cpu_sched_runq_s")).items():
            tid, _, kind = key.partition(",")
            st = hist.stats(value)
            if tid and kind and st:
                thread(int(tid))["stats"][int(kind)] = st
        for tid, t in threads.items():
            # non-submission wakeups are counted by the dispatch that consumed them
            t["wakeups"][WAKE] = t["stats"][WAKE][0]
            # CPUs: where it was at the window's edges plus every migration target in between
            t["cpus"].extend(c for c in (start.get(tid, {}).get("cpu"), stop.get(tid, {}).get("cpu"))
                             if c is not None)
            t["comm"] = comms.get(tid) or stop.get(tid, {}).get("comm") or start.get(tid, {}).get("comm")
            t["on_cpu_ns"] = procstat.delta(start, stop, tid, "exec_ns")
            t["run_delay_ns"] = procstat.delta(start, stop, tid, "run_delay_ns")
            vol = procstat.delta(start, stop, tid, "voluntary")
            invol = procstat.delta(start, stop, tid, "involuntary")
            t["switches"] = None if vol is None or invol is None else vol + invol
            t["involuntary"] = invol
        submitters = {int(t) for t in context.get("submitter_tids", [])}
        for tid in submitters & set(threads):
            threads[tid]["submitter"] = True
        return self._summarise(threads, workers, bool(submitters))

    def _summarise(self, threads: dict[int, dict[str, Any]], workers: dict[int, dict[str, Any]],
                   submitter_known: bool) -> FamilyResult:
        rows = [_thread_row(t, workers.get(tid)) for tid, t in sorted(threads.items())]
        queue_threads = [threads[r["tid"]] for r in rows if r["queue"] is not None]

        def total(kind: int) -> tuple[int, int]:
            return (sum(t["stats"][kind][0] for t in queue_threads),
                    sum(t["stats"][kind][1] for t in queue_threads))

        # submissions: wakeups by the submitting thread when it is known, else every wakeup
        kinds = (SUBMIT,) if submitter_known else (SUBMIT, WAKE)
        sub_hist = hist.merge(*(t["hist"][k] for t in queue_threads for k in kinds))
        sub_n = sum(total(k)[0] for k in kinds)
        sub_total = sum(total(k)[1] for k in kinds)
        p99 = hist.percentile(sub_hist, 0.99)
        rings = sorted({r["queue"] for r in rows if r["queue"] is not None
                        and ((r["on_cpu_ms"] or 0) > 0 or r["dispatches"] > 0)})
        summary = None
        if workers:
            summary = {
                "source": "cpu_sched",
                "total_submissions": sum(t["wakeups"][k] for t in queue_threads for k in kinds),
                "submissions_meaning": ("wakeups of queue worker threads by the submitting (host) "
                                        "thread: work handed to an idle queue" if submitter_known
                                        else "wakeups of queue worker threads (any waker)"),
                "total_dispatches": sub_n,
                "dispatches_meaning": "those queue threads switched onto a CPU after that wakeup",
                "hw_rings_used": rings,
                "hw_rings_meaning": "CPU-backend queues whose worker thread ran in the window",
                "submit_to_dispatch_avg_us": sub_total / sub_n / 1e3 if sub_n else None,
                "submit_to_dispatch_p99_us": p99["estimate"] / 1e3 if p99 else None,
                "submit_to_dispatch_p99_bucket_us": ([p99["bucket_min"] / 1e3, p99["bucket_max"] / 1e3]
                                                     if p99 else None),
                "submit_to_dispatch_meaning": "run-queue latency: sched_wakeup → sched_switch in",
                "runq_wait_after_submission_total_ms": sub_total / 1e6,
                "runq_wait_total_ms": sum(total(k)[1] for k in (SUBMIT, WAKE, PREEMPT)) / 1e6,
                "kernel_run_delay_total_ms": _sum_or_none(
                    [t["run_delay_ns"] for t in queue_threads], 1e6),
                "run_delay_source": ("schedstat run_delay of the same threads over the same window: "
                                     "the kernel's own total, a cross-check of the eBPF sum"),
                "runq_wait_after_other_wakeup_total_ms": total(WAKE)[1] / 1e6,
                "runq_wait_after_preemption_total_ms": total(PREEMPT)[1] / 1e6,
                "other_wakeups": sum(t["wakeups"][WAKE] for t in queue_threads),
                "preemption_waits": total(PREEMPT)[0],
            }
        coverage = {
            "source": SOURCE,
            "covered": "every thread of the traced processes, measurement window only",
            "attribution": ("thread id → queue/streams from the backend's worker registry"
                            if workers else "per thread only (no queue registry for this target)"),
            "threads_seen": len(rows),
        }
        metrics = {"summary": summary, "threads": rows,
                   "runq_latency_hist_ns": hist.as_records(sub_hist),
                   "histogram_kind": "log2 buckets of ns: queue threads, submission wakeup → on CPU"}
        return FamilyResult(self.name, self.section, metrics, coverage)


def _sum_or_none(values: list[int | None], scale: float) -> float | None:
    """Sum of known values / scale; None when any is unknown (never a partial total)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / scale


def _thread_row(t: dict[str, Any], worker: dict[str, Any] | None) -> dict[str, Any]:
    """One per-thread (= per queue on the CPU backend) row of the table."""
    woken = hist.merge(t["hist"][SUBMIT], t["hist"][WAKE])
    n = t["stats"][SUBMIT][0] + t["stats"][WAKE][0]
    total = t["stats"][SUBMIT][1] + t["stats"][WAKE][1]
    p99 = hist.percentile(woken, 0.99)
    pn, ptotal = t["stats"][PREEMPT]
    helper = _WORKER_COMM.match(t["comm"] or "") if worker is None else None
    return {
        "tid": t["tid"], "comm": t["comm"],
        "queue": worker["queue"] if worker else None,
        # threads a queue worker started (torch/OpenMP pools) inherit its name: shown, not counted
        "helper_of_queue": int(helper.group(1)) if helper else None,
        "submitter": bool(t.get("submitter")),
        "streams": list(worker["streams"]) if worker else None,
        "wakeups": t["wakeups"][SUBMIT] + t["wakeups"][WAKE],
        "submission_wakeups": t["wakeups"][SUBMIT], "dispatches": n,
        "runq_avg_us": (total / n / 1e3) if n else None,
        "runq_p99_us": (p99["estimate"] / 1e3) if p99 else None,
        "runq_total_ms": total / 1e6,
        "preempt_waits": pn, "preempt_wait_total_ms": ptotal / 1e6,
        "on_cpu_ms": None if t["on_cpu_ns"] is None else t["on_cpu_ns"] / 1e6,
        "kernel_run_delay_ms": None if t["run_delay_ns"] is None else t["run_delay_ns"] / 1e6,
        "switches": t["switches"], "involuntary": t["involuntary"],
        "cpus": sorted(set(t["cpus"])),
    }

"""CPU-backend queue submissions (doorbells) and CPU scheduling of the traced process's threads.

A submission is an explicit, kernel-visible event: the CPU backend gives each queue a doorbell
(an eventfd) that the host writes only when it hands work to that idle queue, and the queue's
worker blocks reading it (backends/cpu.py). The program sees exactly those events:

* submission = `sys_enter_write` by the owning process on a registered doorbell fd, in the window;
* dispatch = the worker's first switch onto a CPU after that write (`sched_switch` with
  next_pid = worker), or the doorbell time itself when the worker never left the CPU before it
  read the doorbell (it was running when the host rang);
* the doorbell is consumed when the worker's read returns 8 bytes (`sys_exit_read`), which closes
  the submission: submit→dispatch = dispatch − doorbell write.

The hot path (every context switch on the machine) is one hash lookup. Per-thread on-CPU time,
switches and run delay come from the counters the kernel keeps (`snapshot`), the CPUs a thread used
from the rare `sched_migrate_task`. No wake-up is classified: only doorbells are submissions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, cast

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist, procstat, timeline
from aorta.ebpf.probes.base import (
    CollectContext,
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    QueueWorker,
    RenderContext,
    TraceTarget,
)

SUBMITTER_LABEL = "host"  # TraceTarget.thread_labels value of the thread that enqueues work
WORKER_COMM = re.compile(r"^aorta-hwq(\d+)$")  # a queue worker thread (and the helpers it started)
SOURCE = (
    "doorbell eventfd writes (syscalls:sys_enter_write), the worker's first switch onto a CPU "
    "after each (sched:sched_switch) and its doorbell read (syscalls:sys_exit_read), via eBPF"
)
PER_SUBMISSION_CAP = 16384  # per-submission records kept per run (counts and sums are never capped)
DOORBELL_BYTES = 8  # an eventfd read returns its 8-byte counter
DISPATCH_HEAD = "tracepoint:sched:sched_switch\n{\n"  # the doorbells' switch probe (no predicate)
ON_CPU, RUN_QUEUE = "cpu_sched_tlon", "cpu_sched_tlrq"  # timeline slice kinds (timeline.py)
_EVENTS = ("sched:sched_switch", "syscalls:sys_enter_write", "syscalls:sys_exit_read")


@dataclass
class QueueStats:
    """One queue's doorbell figures from the printed maps: doorbells rung (submissions), those
    consumed by its worker (dispatches) with their summed delay, the delay histogram, and
    doorbells left unconsumed (protocol breaks)."""

    submissions: int = 0
    dispatches: int = 0
    total_ns: int = 0
    hist: list[tuple[int, int, int]] = field(default_factory=list)
    unconsumed: int = 0


class CpuSchedFamily(ProbeFamily):
    """Doorbell submissions → dispatch of CPU-backend queues; per-thread CPU scheduling."""

    name = "cpu_sched"
    section = "queue"
    description = "CPU-backend queue doorbells (submit→dispatch) and CPU scheduling of its threads"
    rank_keyed_maps = ("@cpu_sched_switches",)  # queue-keyed maps: see queue_slice
    timeline_keep = 0  # set by render: events kept per timeline kind (0: no timeline)
    charged_from: str | None = None  # set by render: the counter the slices' charged time is read from

    def wanted_events(self) -> list[str]:
        return [*_EVENTS, "sched:sched_migrate_task", "sched:sched_wakeup", "sched:sched_stat_runtime"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        a, gate = ctx.dialect.arg, ctx.gate
        code.begin.extend(f"@cpu_sched_track[{tid}] = 1;" for tid in sorted(ctx.target.thread_labels))
        self._render_doorbells(ctx, code)
        self._render_timeline(ctx, code)
        migrate = ctx.event("sched", "sched_migrate_task")
        if not ctx.target.thread_labels:
            code.missing["sched:sched_migrate_task"] = "no registered threads to follow"
        elif migrate is not None and migrate.has("pid", "dest_cpu"):
            # CPUs used = the CPU each thread was on at window start (from /proc) plus every
            # migration target in the window: exact, and migrations are rare (no per-switch cost)
            code.used_events.append("sched:sched_migrate_task")
            code.probes.append(
                f"tracepoint:sched:sched_migrate_task\n/@cpu_sched_track[{a('pid')}] && {gate}/\n"
                f"{{\n  @cpu_sched_cpus[{a('pid')}, {a('dest_cpu')}] = 1;\n}}"
            )
        else:
            code.missing["sched:sched_migrate_task"] = "tracepoint absent: CPUs used not measured"
        if ctx.target.thread_labels:
            code.end.append("clear(@cpu_sched_track);")
        return code

    def _render_doorbells(self, ctx: RenderContext, code: ProbeCode) -> None:
        """The three doorbell probes, or the reason they are not attached."""
        bells = ctx.target.doorbells
        if not bells:
            for ev in _EVENTS[1:]:
                code.missing[ev] = "no doorbells registered (only the CPU backend has them)"
            self._render_switch_counts(ctx, code)
            return
        switch = ctx.event("sched", "sched_switch")
        write = ctx.event("syscalls", "sys_enter_write")
        read = ctx.event("syscalls", "sys_exit_read")
        ok = {
            "sched:sched_switch": switch is not None and switch.has("next_pid"),
            "syscalls:sys_enter_write": write is not None and write.has("fd"),
            "syscalls:sys_exit_read": read is not None and read.has("ret"),
        }
        if not all(ok.values()):
            for ev, present in ok.items():
                code.missing[ev] = (
                    "tracepoint absent (or lacks its fields)"
                    if not present
                    else "unused: another doorbell tracepoint is absent"
                )
            return
        a, gate = ctx.dialect.arg, ctx.gate
        cap = per_queue_cap(len(bells))
        # the timeline puts each doorbell on the thread that wrote it
        ringt = " @cpu_sched_ringt[$q, $s] = tid;" if ctx.target.timeline_events else ""
        owners = " || ".join(f"pid == {p}" for p in sorted({b[0] for b in bells}))
        # keyed by (owner pid, fd): a node's torchrun ranks share one program and their fd numbers
        # overlap; their queue numbers are made disjoint by the tracer (see queue_slice)
        for pid, fd, tid, queue in bells:  # stored +1 so that 0 (absent) means "not a doorbell"
            code.begin.extend(
                [
                    f"@cpu_sched_bellq[{pid}, {fd}] = {queue + 1};",
                    f"@cpu_sched_wq[{tid}] = {queue + 1};",
                    f"@cpu_sched_qw[{queue}] = {tid};",
                ]
            )
        code.used_events.extend(_EVENTS)
        # submission: the host writes a doorbell; one ring per hand-off to an idle queue
        code.probes.append(
            f"tracepoint:syscalls:sys_enter_write\n/{owners}/\n{{\n"
            f"  $fd = (int64){a('fd')};\n"
            "  $q = @cpu_sched_bellq[pid, $fd];\n"
            f"  if ($q && {gate}) {{\n"
            "    $t = nsecs;\n    $q = $q - 1;\n"
            "    $w = @cpu_sched_qw[$q];\n"
            "    $s = @cpu_sched_seq[$q];\n    @cpu_sched_seq[$q] = $s + 1;\n"
            # a ring while the previous one is unconsumed breaks the protocol: counted, never hidden
            "    $lw = @cpu_sched_lat[$w];\n"
            "    if (@cpu_sched_bell[$w] || $lw) { @cpu_sched_unconsumed[$q] = count(); }\n"
            # deletes are guarded: deleting an absent key is a helper error, and with -k each
            # one is a record bpftrace prints and the measured process's reader thread reads
            "    @cpu_sched_bell[$w] = $t;\n    if ($lw) { delete(@cpu_sched_lat[$w]); }\n"
            "    @cpu_sched_bseq[$w] = $s;\n"
            f"    if ($s < {cap}) {{ @cpu_sched_ring[$q, $s] = $t;{ringt} }}\n  }}\n}}"
        )
        # dispatch: the first switch-in of that worker after the ring (one lookup per switch)
        code.probes.append(
            DISPATCH_HEAD + f"  $n = (int64){a('next_pid')};\n"
            "  $b = @cpu_sched_bell[$n];\n"
            "  if ($b) {\n"
            "    @cpu_sched_lat[$n] = nsecs - $b + 1;\n"
            "    delete(@cpu_sched_bell[$n]);\n  }\n}"
        )
        # consumption: the worker's doorbell read returns; closes the submission
        code.probes.append(
            f"tracepoint:syscalls:sys_exit_read\n/{a('ret')} == {DOORBELL_BYTES} && "
            "@cpu_sched_wq[tid]/\n{\n"
            "  $k = (int64)tid;\n"
            "  $b = @cpu_sched_bell[$k];\n  $l = @cpu_sched_lat[$k];\n"
            "  if ($b || $l) {\n"
            "    $d = 0;\n    if (!$b) { $d = $l - 1; }\n"
            "    $q = @cpu_sched_wq[$k] - 1;\n    $s = @cpu_sched_bseq[$k];\n"
            + "".join(f"    {line}\n" for line in hist.loglinear_index_code("s2d", "$d"))
            + "    @cpu_sched_s2d[$q, $s2d_i] = count();\n    @cpu_sched_s2d_s[$q] = stats($d);\n"
            f"    if ($s < {cap}) {{ @cpu_sched_sub[$q, $s] = $d; }}\n"
            "    if ($b) { delete(@cpu_sched_bell[$k]); }\n"
            "    if ($l) { delete(@cpu_sched_lat[$k]); }\n  }\n}"
        )
        code.end.extend(
            [
                "clear(@cpu_sched_bellq);",
                "clear(@cpu_sched_wq);",
                "clear(@cpu_sched_qw);",
                "clear(@cpu_sched_bell);",
                "clear(@cpu_sched_lat);",
                "clear(@cpu_sched_bseq);",
            ]
        )

    def _render_timeline(self, ctx: RenderContext, code: ProbeCode) -> None:
        """Per registered thread, on-CPU slices (switch-in → switch-out) and run-queue waits
        (wake-up or preemption → switch-in), the first `timeline_events` of each kind kept
        (timeline.py); only when the tracer asked for a timeline."""
        keep = self.timeline_keep = ctx.target.timeline_events
        if not keep:
            return
        switch, wakeup = ctx.event("sched", "sched_switch"), ctx.event("sched", "sched_wakeup")
        if (
            not ctx.target.thread_labels
            or switch is None
            or not switch.has("prev_pid", "next_pid", "prev_state")
        ):
            code.missing["sched:sched_switch (timeline)"] = (
                "no registered threads to follow" if not ctx.target.thread_labels else "tracepoint absent"
            )
            return
        a, cap = ctx.dialect.arg, timeline.cap_per_cpu(keep)
        # the run time the kernel charged each slice (what schedstat counts, which leaves out IRQ
        # and steal time): the switched-out task's own counter (curtask is prev at sched_switch),
        # read with BTF, minus its value at the previous switch-out. Without BTF, the sum of
        # sched_stat_runtime: the kernel skips that tracepoint's program when a tick lands while
        # another BPF program runs on the CPU, which lost 2.4 % of a worker's time under load
        runtime = ctx.event("sched", "sched_stat_runtime")
        counter = (
            "curtask->se.sum_exec_runtime"
            if ctx.btf
            else "@cpu_sched_tlrt[$p]"
            if runtime is not None and runtime.has("pid", "runtime")
            else None
        )
        charged = (
            [f"  $x = {counter} + 1; $x0 = @cpu_sched_tlx[$p]; @cpu_sched_tlx[$p] = $x;"] if counter else []
        )
        self.charged_from = (
            None if counter is None else "sum_exec_runtime" if ctx.btf else "sched_stat_runtime"
        )
        edges = _render_edge_counters(ctx, code, counter) if counter else False
        counters = (
            timeline.Charged(
                "$x",
                "$x0",
                "@cpu_sched_tlg[$p]" if edges else "0",
                "@cpu_sched_tlc[$p]" if edges else "0",
            )
            if charged
            else None
        )
        body = [
            "$t = nsecs;",
            f"$p = (int64){a('prev_pid')};",
            f"$n = (int64){a('next_pid')};",
            "if (@cpu_sched_track[$p]) {",
            *charged,
            *(
                f"  {line}"
                for line in timeline.slice_code(
                    ON_CPU, "@cpu_sched_tlsince[$p]", "$p", cap, counters, unstarted=True
                )
            ),
            "  if (@cpu_sched_tlsince[$p]) { delete(@cpu_sched_tlsince[$p]); }",
            # still runnable when switched out (preempted, yielded): its run-queue wait starts;
            # the low byte holds the sleep states, TASK_REPORT_MAX (0x100) marks a preemption
            f"  if (({a('prev_state')} & 0xff) == 0) {{ @cpu_sched_tlwait[$p] = $t; }}",
            "  else { if (@cpu_sched_tlwait[$p]) { delete(@cpu_sched_tlwait[$p]); } }",
            "}",
            "if (@cpu_sched_track[$n]) {",
            "  @cpu_sched_tlsince[$n] = $t;",
            "  $w = @cpu_sched_tlwait[$n];",
            "  if ($w) {",
            *(f"    {line}" for line in timeline.slice_code(RUN_QUEUE, "$w", "$n", cap)),
            "    delete(@cpu_sched_tlwait[$n]);",
            "  }",
            "}",
        ]
        guard = f"@cpu_sched_track[{a('prev_pid')}] || @cpu_sched_track[{a('next_pid')}]"
        dispatch = next((i for i, p in enumerate(code.probes) if p.startswith(DISPATCH_HEAD)), None)
        if dispatch is None:
            code.probes.append(
                f"tracepoint:sched:sched_switch\n/{guard}/\n{{\n" + "\n".join(f"  {x}" for x in body) + "\n}"
            )
        else:  # one program per context switch on the machine, not two: the doorbells' own probe
            code.probes[dispatch] = (
                code.probes[dispatch][:-1]
                + f"  if ({guard}) {{\n"
                + "\n".join(f"    {x}" for x in body)
                + "\n  }\n}"
            )
        if charged and not ctx.btf:
            code.used_events.append("sched:sched_stat_runtime")
            code.probes.append(
                f"tracepoint:sched:sched_stat_runtime\n/@cpu_sched_track[{a('pid')}]/\n{{\n"
                f"  $k = (int64){a('pid')};\n"
                f"  @cpu_sched_tlrt[$k] = @cpu_sched_tlrt[$k] + {a('runtime')};\n}}"
            )
        elif not charged:
            code.missing["sched:sched_stat_runtime"] = "tracepoint absent: slices carry no charged run time"
        if wakeup is not None and wakeup.has("pid"):
            code.used_events.append("sched:sched_wakeup")
            code.probes.append(
                f"tracepoint:sched:sched_wakeup\n/@cpu_sched_track[{a('pid')}]/\n{{\n"
                f"  @cpu_sched_tlwait[(int64){a('pid')}] = nsecs;\n}}"
            )
        else:
            code.missing["sched:sched_wakeup"] = (
                "tracepoint absent: run-queue waits start at preemptions only"
            )
        if "sched:sched_switch" not in code.used_events:
            code.used_events.append("sched:sched_switch")
        code.end.extend(
            ["clear(@cpu_sched_tlwait);", "clear(@cpu_sched_tlx);"]
            + (["clear(@cpu_sched_tlg);", "clear(@cpu_sched_tlc);"] if edges else [])
        )  # @cpu_sched_tlsince prints: slices open at the end

    def _render_switch_counts(self, ctx: RenderContext, code: ProbeCode) -> None:
        """Without doorbells (ebpf-attach): per-thread switches of the traced processes in the
        window, so threads born and gone inside it (not in either /proc snapshot) still show."""
        switch = ctx.event("sched", "sched_switch")
        if switch is None:
            code.missing["sched:sched_switch"] = "tracepoint absent"
            return
        code.used_events.append("sched:sched_switch")
        code.probes.append(
            f"tracepoint:sched:sched_switch\n/{ctx.pid_filter} && {ctx.gate}/\n{{\n"
            f"  @cpu_sched_switches{ctx.key('tid')} = count();\n}}"
        )

    def snapshot(self, target: TraceTarget) -> Any:
        """Per-thread kernel counters of the traced processes (on-CPU, run delay, switches)."""
        return procstat.task_counters(target.pids, target.exclude_pids)

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        workers: dict[int, QueueWorker] = {w.tid: w for w in context.workers if w.tid}
        queues = _queue_stats(maps)
        snaps = context.edges(self.name)
        # the harness thread runs at both edges: its on-CPU time is read at the markers
        start, stop = procstat.with_marker_clock(
            cast("dict[int, procstat.ThreadCounters]", snaps.get("start") or {}),
            cast("dict[int, procstat.ThreadCounters]", snaps.get("stop") or {}),
            context.marker_clock,
        )
        cpus: dict[int, set[int]] = {}
        for key in hist.keyed(maps.get("@cpu_sched_cpus")):
            thread, _, cpu = key.partition(",")
            if thread and cpu:
                cpus.setdefault(int(thread), set()).add(int(cpu))
        tids = {t for t in stop if (procstat.delta(start, stop, t, "exec_ns") or 0) > 0}
        tids |= set(workers)
        counted = {int(k): int(v) for k, v in hist.keyed(maps.get("@cpu_sched_switches")).items()}
        tids |= set(counted)
        submitters = {int(t) for t in context.submitter_tids}
        bells_on = set(_EVENTS) <= set(context.attached)
        per_submission = _per_submission(maps)
        rows = []
        for tid in sorted(tids):
            worker = workers.get(tid)
            q = queues.get(worker.queue) if worker else None
            if worker and bells_on and q is None:  # traced, and nothing rang: a measured 0
                q = QueueStats()
            first, last = start.get(tid), stop.get(tid)
            edge_cpus = {c.cpu for c in (first, last) if c is not None and c.cpu is not None}
            comm = (last.comm if last else None) or (first.comm if first else None)
            mine = worker.queue if worker else None
            samples = [r[3] for r in per_submission if r[0] == mine and r[3] is not None]
            row = _thread_row(
                tid,
                comm,
                worker if bells_on else None,
                q if bells_on else None,
                samples,
                tid in submitters,
                sorted(cpus.get(tid, set()) | edge_cpus),
                start,
                stop,
            )
            if worker and not bells_on:  # a queue worker whose doorbell was not traced
                row["queue"], row["streams"] = worker.queue, _streams_of(worker)
            if row["switches"] is None and tid in counted:  # not in both /proc snapshots
                row["switches"] = counted[tid]
            rows.append(row)
        # the kernel divides its record store over every doorbell of the program (a node's
        # torchrun session holds every local rank's): the cap is the program's, not this rank's
        bells = context.doorbells_traced or len(workers)
        result = self._summarise(
            rows, queues, workers, per_submission, list(context.attached), per_queue_cap(bells)
        )
        if self.timeline_keep:
            result.metrics["timeline"] = _timeline(maps, context, queues, self.timeline_keep, bells)
            result.metrics["timeline"]["on_cpu"]["charged_from"] = self.charged_from
        return result

    def _summarise(
        self,
        rows: list[JsonObject],
        queues: dict[int, QueueStats],
        workers: dict[int, QueueWorker],
        per_submission: list[list[Any]],
        attached: list[str],
        cap: int,
    ) -> FamilyResult:
        worker_rows = [r for r in rows if r["queue"] is not None]
        summary = (
            _summary(queues, worker_rows, per_submission, cap)
            if workers and set(_EVENTS) <= set(attached)
            else None
        )
        coverage = {
            "source": SOURCE,
            "covered": "doorbells of the CPU backend's queues and every thread of the traced "
            "processes, measurement window only",
            "attribution": (
                "doorbell fd → queue and worker tid from the backend's registry"
                if workers
                else "per thread only (no queue registry for this target)"
            ),
            "threads_seen": len(rows),
            "per_thread": (
                "submissions, dispatches and submit→dispatch are null for a thread that is not a "
                "queue worker with a traced doorbell (not measured there, not 0); the per-thread "
                "P99 is exact (nearest rank) when every dispatch of its queue was recorded, else "
                "the log-linear histogram's estimate, said by submit_to_dispatch_p99_method"
            ),
        }
        merged = hist.merge(*(q.hist for q in queues.values()))
        metrics = {
            "summary": summary,
            "threads": rows,
            "per_submission": per_submission,
            "submit_to_dispatch_hist_ns": hist.as_records(merged),
            "histogram_kind": f"{hist.LOGLINEAR_KIND}: doorbell write → worker on a CPU",
        }
        return FamilyResult(self.name, self.section, metrics, coverage)


QUEUE_KEYED_MAPS = (
    "@cpu_sched_seq",
    "@cpu_sched_s2d_s",
    "@cpu_sched_s2d",
    "@cpu_sched_unconsumed",
    "@cpu_sched_ring",
    "@cpu_sched_sub",
)


def queue_slice(maps: JsonObject, first: int, count: int) -> JsonObject:
    """The maps of queues first..first+count-1 renumbered from 0 (one rank's share of a node's
    program, whose ranks got disjoint queue ranges); maps not keyed by queue are kept as they are."""
    out = dict(maps)
    for name in QUEUE_KEYED_MAPS:
        value = maps.get(name)
        if value is None:
            continue
        kept: JsonObject = {}
        for key, item in hist.keyed(value).items():
            head, sep, rest = key.partition(",")
            if head.lstrip("-").isdigit() and first <= int(head) < first + count:
                kept[f"{int(head) - first}{sep}{rest}"] = item
        out[name] = kept or None
    return out


def _queue_stats(maps: JsonObject) -> dict[int, QueueStats]:
    """Per queue: rings (submissions), dispatches, their sum, histogram, protocol breaks."""
    queues: dict[int, QueueStats] = {}

    def queue(q: int) -> QueueStats:
        return queues.setdefault(q, QueueStats())

    for key, value in hist.keyed(maps.get("@cpu_sched_seq")).items():
        queue(int(key)).submissions = int(value)
    for key, value in hist.keyed(maps.get("@cpu_sched_s2d_s")).items():
        st = hist.stats(value)
        if st:
            queue(int(key)).dispatches, queue(int(key)).total_ns = st
    for key, buckets in hist.loglinear_keyed(maps.get("@cpu_sched_s2d")).items():
        queue(int(key)).hist = buckets
    for key, value in hist.keyed(maps.get("@cpu_sched_unconsumed")).items():
        queue(int(key)).unconsumed = int(value)
    return queues


def _per_submission(maps: JsonObject) -> list[list[int | None]]:
    """[queue, seq, doorbell ns, submit→dispatch ns or None] per recorded submission (sorted)."""
    rings = hist.keyed(maps.get("@cpu_sched_ring"))
    delays = hist.keyed(maps.get("@cpu_sched_sub"))
    out: list[tuple[int, int, int, int | None]] = []
    for key, ring in rings.items():
        q, _, s = key.partition(",")
        delay = delays.get(key)
        out.append((int(q), int(s), int(ring), None if delay is None else int(delay)))
    return [list(row) for row in sorted(out, key=lambda r: (r[0], r[1]))]


def _render_edge_counters(ctx: RenderContext, code: ProbeCode, counter: str) -> bool:
    """The run-time counter of a registered thread at the window's markers, read in the marker
    syscall of the thread that sends it (the harness thread: running at both edges, so the
    window clips its slices there); its clipped slices are charged from these. The tracer reads
    the thread's CPU clock right before each marker, which brings the counter up to date (the
    kernel updates a running task's counter only at ticks and switches). False: no marker probe
    (a program rendered without one)."""
    edges = ctx.edges
    if edges is None:
        return False
    # first: bpftrace 0.17 types a map where it is first assigned, and the switch probe that
    # reads these may already be in the list (the doorbells' own)
    code.probes.insert(
        0,
        f"{edges.attach}\n/{edges.match} && @cpu_sched_track[tid]/\n{{\n"
        "  $p = (int64)tid;\n"
        f"  if ({edges.opens}) {{ @cpu_sched_tlg[$p] = {counter} + 1; }}\n"
        f"  if ({edges.closes}) {{ @cpu_sched_tlc[$p] = {counter} + 1; }}\n}}",
    )
    if edges.event not in code.used_events:
        code.used_events.append(edges.event)
    return True


def _timeline(
    maps: JsonObject, context: CollectContext, queues: dict[int, QueueStats], keep: int, bells: int
) -> JsonObject:
    """The per-event records for --trace-out: on-CPU slices and run-queue waits per registered
    thread, and each doorbell [queue, seq, writer tid, write ns, dispatch ns or null]; each kind
    with the exact number seen, how many were kept (the first ones) and dropped."""
    window = context.window.to_json()
    on_cpu = timeline.slices(maps, ON_CPU, unstarted=True)
    timeline.open_slices(maps, "@cpu_sched_tlsince", window, on_cpu, timeline.cap_per_cpu(keep) * _cpus())
    run_queue = timeline.slices(maps, RUN_QUEUE)
    writers = hist.keyed(maps.get("@cpu_sched_ringt"))
    delays = hist.keyed(maps.get("@cpu_sched_sub"))
    rows = []
    for key, ring in hist.keyed(maps.get("@cpu_sched_ring")).items():
        q, _, s = key.partition(",")
        delay, writer = delays.get(key), writers.get(key)
        rows.append(
            [
                int(q),
                int(s),
                None if writer is None else int(writer),
                int(ring),
                None if delay is None else int(ring) + int(delay),
            ]
        )
    rows.sort(key=lambda r: (r[3], r[0]))
    seen = sum(q.submissions for q in queues.values())
    threads = [{"tid": w.tid, "label": f"q{w.queue}", "queue": w.queue} for w in context.workers if w.tid]
    threads += [{"tid": int(t), "label": SUBMITTER_LABEL, "queue": None} for t in context.submitter_tids]
    return {
        "clock": "CLOCK_MONOTONIC ns (bpftrace nsecs), the clock of op_intervals",
        "window": {k: window.get(k) for k in ("start_monotonic_ns", "stop_monotonic_ns")},
        "threads": threads,
        "on_cpu": on_cpu,
        "run_queue": run_queue,
        "doorbells": {"rows": rows, "seen": seen, "kept": len(rows), "dropped": seen - len(rows)},
        "caps": {
            "on_cpu_per_cpu": timeline.cap_per_cpu(keep),
            "run_queue_per_cpu": timeline.cap_per_cpu(keep),
            "doorbells_per_queue": per_queue_cap(bells),
        },
        "meaning": (
            "the first events of each kind in the window (per CPU for slices, per queue for "
            "doorbells); seen is the exact in-kernel count, dropped = seen - kept; on_cpu's "
            "unstarted: slices that ended in the window whose switch-in was not seen (not in "
            "seen, not drawn; their charged ns per thread in unstarted_by_thread)"
        ),
    }


def _cpus() -> int:
    return os.cpu_count() or 1


def exact_percentile(values: list[int], q: float) -> float:
    """Nearest-rank percentile of all samples (no interpolation, no bucket error)."""
    ordered = sorted(values)
    rank = max(1, -(-round(q * 1e6) * len(ordered) // 1_000_000))
    return float(ordered[min(rank, len(ordered)) - 1])


def per_queue_cap(queues: int) -> int:
    """Per-submission records kept per queue (the first ones of the window)."""
    return max(1, PER_SUBMISSION_CAP // max(1, queues))


def _summary(
    queues: dict[int, QueueStats],
    worker_rows: list[JsonObject],
    per_submission: list[list[Any]],
    cap: int,
) -> JsonObject:
    """The queue section's headline: counts behind every mean, exact P99 when all samples are kept."""
    n = sum(q.dispatches for q in queues.values())
    total = sum(q.total_ns for q in queues.values())
    merged = hist.merge(*(q.hist for q in queues.values()))
    samples = [r[3] for r in per_submission if r[3] is not None]
    p99 = _p99_record(samples, merged, n)
    rings = sorted({r["queue"] for r in worker_rows if (r["on_cpu_ms"] or 0) > 0 or r["dispatches"]})
    return {
        "source": "cpu_sched",
        "total_submissions": sum(q.submissions for q in queues.values()),
        "submissions_meaning": (
            "doorbell writes: hand-offs of work to an idle CPU-backend queue "
            "(one eventfd write each), window only"
        ),
        "submissions_per_queue": {str(k): v.submissions for k, v in sorted(queues.items())},
        "total_dispatches": n,
        "dispatches_meaning": (
            "those doorbells consumed by their worker, each timed at the "
            "worker's first switch onto a CPU after the write"
        ),
        "unconsumed_doorbells": sum(q.unconsumed for q in queues.values()),
        "hw_rings_used": rings,
        "hw_rings_meaning": "CPU-backend queues whose worker thread ran in the window",
        "submit_to_dispatch_avg_us": total / n / 1e3 if n else None,
        "submit_to_dispatch_p99_us": p99["value"] / 1e3 if p99 else None,
        "submit_to_dispatch_p99_method": p99["method"] if p99 else None,
        "submit_to_dispatch_p99": p99,
        "submit_to_dispatch_samples": n,
        "submit_to_dispatch_meaning": (
            "doorbell write → the worker's first switch onto a CPU after "
            "it (0 when it was already running); mean over "
            "total_dispatches"
        ),
        "per_submission_records": len(per_submission),
        "per_submission_cap_per_queue": cap,
        "kernel_run_delay_total_ms": _sum_or_none([r["kernel_run_delay_ms"] for r in worker_rows]),
        "run_delay_source": (
            "schedstat run_delay of the queue worker threads over the window: all "
            "their run-queue waits (after doorbells, GIL hand-offs, preemption)"
        ),
    }


def _p99_record(samples: list[int], merged: list[tuple[int, int, int]], n: int) -> JsonObject | None:
    """The P99 in hist.quantile's shape (ns): exact nearest rank when the per-submission store
    kept every dispatch, else the log-linear histogram's bucket with its error bound."""
    if not n:
        return None
    if len(samples) == n:
        value = exact_percentile(samples, 0.99)
        return {
            "value": value,
            "method": "exact",
            "count": n,
            "bucket_min": value,
            "bucket_max": value,
            "error_bound_pct": 0.0,
            "detail": f"nearest rank of all {n} submissions",
        }
    est = hist.percentile(merged, 0.99)
    if est is None:
        return None
    low, high = est["bucket_min"], est["bucket_max"]
    return {
        "value": est["estimate"],
        "method": "log-linear",
        "count": n,
        "bucket_min": low,
        "bucket_max": high,
        "error_bound_pct": 100.0 * (high - low) / low if low > 0 else None,
        "detail": (
            "4 buckets per power of two, interpolated inside the bucket; the per-submission store was capped"
        ),
    }


def _sum_or_none(values: list[float | None]) -> float | None:
    """Sum of known values; None when any is unknown (never a partial total)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _thread_row(
    tid: int,
    comm: str | None,
    worker: QueueWorker | None,
    q: QueueStats | None,
    samples: list[int],
    submitter: bool,
    cpus: list[int],
    start: dict[int, procstat.ThreadCounters],
    stop: dict[int, procstat.ThreadCounters],
) -> JsonObject:
    """One per-thread (= per queue on the CPU backend) row of the table; the doorbell columns are
    null unless the thread is a queue worker whose doorbell was traced (`q` given)."""
    helper = WORKER_COMM.match(comm or "") if worker is None else None
    n = q.dispatches if q else None
    p99 = _p99_record(samples, q.hist, n) if q and n else None
    on_cpu = procstat.delta(start, stop, tid, "exec_ns")
    delay = procstat.delta(start, stop, tid, "run_delay_ns")
    vol = procstat.delta(start, stop, tid, "voluntary")
    invol = procstat.delta(start, stop, tid, "involuntary")
    return {
        "tid": tid,
        "comm": comm,
        "queue": worker.queue if worker else None,
        # threads a queue worker started (torch/OpenMP pools) inherit its name: shown, not counted
        "helper_of_queue": int(helper.group(1)) if helper else None,
        "submitter": submitter,
        "streams": _streams_of(worker),
        "submissions": q.submissions if q else None,
        "dispatches": n,
        "submit_to_dispatch_avg_us": (q.total_ns / n / 1e3) if q and n else None,
        "submit_to_dispatch_p99_us": (p99["value"] / 1e3) if p99 else None,
        "submit_to_dispatch_p99_method": (
            None if p99 is None else "exact" if p99["method"] == "exact" else "log-linear estimate"
        ),
        "on_cpu_ms": None if on_cpu is None else on_cpu / 1e6,
        "kernel_run_delay_ms": None if delay is None else delay / 1e6,
        "switches": None if vol is None or invol is None else vol + invol,
        "involuntary": invol,
        "cpus": cpus,
    }


def _streams_of(worker: QueueWorker | None) -> list[int] | None:
    """The streams a worker serves (None when unknown: not a worker, or found from outside)."""
    streams = worker.streams if worker else None
    return list(streams) if streams is not None else None

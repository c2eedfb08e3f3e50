"""Why scaling stops: the documented causes the measured evidence supports, with confidence. Pure.

For a sweep's knee (or "no scaling at all": the knee at the first point) every documented cause
is checked on the runs of the point right after the knee (where the added streams added no
work), against the knee's own runs where a cause is a growth. Each cause has one *primary*
figure with a named threshold, and gates that must also hold; definitions, thresholds and the
confidence rule are in docs/sweep-compare-report.md ("Diagnosis"). A cause whose evidence these
runs do not carry is "not measured" with the reason, never claimed. When the sweep scales (no
knee, with a scaling confidence "high"), no cause is claimed; when the scaling is not established
(no knee, confidence low or unknown) the causes are checked at the last point.

Confidence of a supported cause, from the runs of the examined point:
- "high": it holds in every run, the run-to-run spread of the primary figure (max − min) is
  smaller than its distance to the threshold, a growth cause is above the knee's every run, and
  the point has at least HIGH_MIN_RUNS runs;
- "medium": it holds in at least MOST of the runs (or in all, without the separation);
- "low": it holds in fewer, or the point has one run (never more than "low" then).
A cause that holds in half the runs or fewer is not supported at all.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.collectives import is_collective_label
from aorta.hw_queue_eval.workloads.transfer import is_copy_label

STARVATION_MIN = 0.25  # lanes idle ≥ 25 % of their time waiting for the host's launch, or
LANES_IDLE_MIN = 0.50  # streams without an op in flight ≥ 50 % of the window
HOL_SHARE_MIN = 0.15  # ops queued behind other streams' ops ≥ 15 % of their ready→end time
HOST_SHARE_MIN = 0.5  # the host thread took ≥ half the run's CPU time (host + queue threads)
CPU_DEMAND_MIN = 1.0  # host + queue threads runnable ≥ the CPUs they may use (demand ≥ supply)
CORES_HELD_MIN = 0.5  # … and on a CPU ≥ half the CPUs they may use: else others held what they waited for
RUN_QUEUE_WAIT_MIN = 0.20  # queue threads waited for a CPU ≥ 20 % of the time they wanted one
SYNC_DEFECTS_MIN = 0.5  # ≥ 1 (an integer count): undeclared waited pairs + declared unwaited ones
COPY_SHARE_MIN = 0.5  # host↔device copies took ≥ half of the ops' busy (start→end) time
# a rank waited inside collectives for a later peer ≥ 30 % of its ops' busy time; under torchrun
# (gloo, 2 ranks, 2 CPUs, 4 streams) unmodified comms_compute_overlap measured 0.11 (88 % of its
# busy time is in collectives: the transfer is not the wait), with rank 1 late by 3 ms before
# every all-reduce 0.55
PEER_WAIT_SHARE_MIN = 0.3
RECLAIM_EPISODES_MIN = 3  # reclaim episodes (memcg + direct) or GPU evictions in the window
MOST = 2 / 3  # "most runs" for medium
HIGH_MIN_RUNS = 3  # runs of the examined point for "high"

CONFIDENCE_RANK = {"high": 0, "medium": 1, "low": 2}
DEFECT_CAUSES = frozenset({"synchronisation"})  # ranked first among causes of one confidence

#: documented causes, in the order they are listed when equally supported
CAUSES: dict[str, str] = {
    "host_launch_bound": "host launch-bound",
    "queue_multiplexing": "streams multiplexed onto too few hardware queues",
    "device_saturated": "device saturated",
    "copy_bound": "copy-bound",
    "collective_bound": "collective-bound",
    "synchronisation": "synchronisation",
    "memory_pressure": "memory pressure",
}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    """An integer count from a result file, None when it holds something else (or nothing)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def usable_cpus(result: JsonObject) -> int | None:
    """CPUs the run's threads could use: the distinct --cpus, else the allowed set, else all."""
    env = result.get("environment") or {}
    pinned = env.get("cpus_pinned") or {}
    if isinstance(pinned, dict) and pinned.get("cpus"):
        return len(set(pinned["cpus"]))
    for key in ("cpus_allowed", "cpu_count"):
        value = env.get(key)
        if isinstance(value, list):
            return len(value) or None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def busiest_shared_queue(result: JsonObject) -> tuple[float | None, int | None, str | None]:
    """(busy share of the window of the busiest queue serving ≥ 2 streams, its stream count,
    reason when unknown). A CPU queue runs one op at a time: its busy time is Σ its streams'."""
    qmap = result.get("queue_mapping") or {}
    mapping = qmap.get("stream_to_queue")
    busy = result.get("per_stream_times_ms")
    window = _num((result.get("concurrency") or {}).get("window_ms"))
    if not isinstance(mapping, list) or not mapping:
        return None, None, "stream→queue mapping not known (runtime-managed)"
    if not isinstance(busy, list) or len(busy) != len(mapping) or not window:
        return None, None, "per-stream busy time not recorded"
    queues: dict[int, list[int]] = {}
    for stream, queue in enumerate(mapping):
        queues.setdefault(queue, []).append(stream)
    shared = [s for s in queues.values() if len(s) > 1]
    if not shared:
        return None, 1, None
    best = max(shared, key=lambda s: sum(busy[i] or 0.0 for i in s))
    return sum(busy[i] or 0.0 for i in best) / window, len(best), None


def head_of_line_share(result: JsonObject) -> tuple[float | None, str | None]:
    """(share of the ops' ready→end time they spent queued behind *another stream's* op on their
    own queue, reason when unknown), from the op rows. A CPU queue runs one op at a time, so the
    other streams' ops on it are disjoint intervals; waiting behind one's own stream is order."""
    table = result.get("op_intervals") or {}
    rows, cols = table.get("rows"), table.get("columns") or []
    need = ("stream", "queue", "ready_us", "start_us", "end_us")
    if not rows or any(c not in cols for c in need):
        return None, "no op rows with ready times (GPU, or --no-op-timing)"
    st, qu, rd, sa, en = (cols.index(c) for c in need)
    per_queue: dict[Any, list[tuple[float, float, Any]]] = {}
    for row in rows:
        per_queue.setdefault(row[qu], []).append((row[sa], row[en], row[st]))
    starts = {q: sorted(ops) for q, ops in per_queue.items()}
    keys = {q: [op[0] for op in ops] for q, ops in starts.items()}
    queued = total = 0.0
    for row in rows:
        ready, start = row[rd], row[sa]
        if ready is None or start is None or row[en] is None:
            continue
        total += row[en] - ready
        ops, key = starts[row[qu]], keys[row[qu]]
        i = max(bisect.bisect_right(key, ready) - 1, 0)
        while i < len(ops) and ops[i][0] < start:
            other_start, other_end, stream = ops[i]
            if stream != row[st]:
                queued += max(0.0, min(other_end, start) - max(other_start, ready))
            i += 1
    return (queued / total, None) if total > 0 else (None, "no op with a ready time")


def _op_spans(result: JsonObject) -> tuple[list[tuple[str, float, float]], str | None]:
    """[(label, start µs, end µs)] of one run's op rows, or ([], why not)."""
    table = result.get("op_intervals") or {}
    rows, cols, labels = table.get("rows"), table.get("columns") or [], table.get("labels")
    need = ("label", "start_us", "end_us")
    if not rows or any(c not in cols for c in need):
        return [], "no op rows (--no-op-timing, or an older run)"
    lb, sa, en = (cols.index(c) for c in need)
    spans = []
    for row in rows:
        if row[sa] is None or row[en] is None:
            continue
        label = row[lb]
        if isinstance(label, int) and isinstance(labels, list) and 0 <= label < len(labels):
            label = labels[label]
        spans.append((str(label), float(row[sa]), float(row[en])))
    return spans, None


def copy_share(result: JsonObject) -> tuple[float | None, int | None, str | None]:
    """(share of the ops' busy start→end time spent in host↔device copies, copy ops, reason when
    unknown), from the op rows: a copy occupies its stream while it runs, on a GPU as a DMA
    transfer, on the CPU backend as a memcpy. A run without copies measures 0."""
    spans, why = _op_spans(result)
    if why:
        return None, None, why
    busy = sum(end - start for _, start, end in spans)
    copies = [end - start for label, start, end in spans if is_copy_label(label)]
    return (sum(copies) / busy, len(copies), None) if busy > 0 else (None, None, "no op with a duration")


def peer_wait_share(result: JsonObject) -> tuple[float | None, int | None, str | None]:
    """(the largest share, over ranks, of a rank's op busy time spent waiting inside collectives
    for a later peer, collectives matched, reason when unknown), from every rank's op rows
    (torchrun). The largest, not the mean: one late rank makes the others wait, not itself.

    The k-th collective op of each rank is the same collective (torch.distributed runs them in
    one order on every rank); it cannot complete before the last rank enters it, so a rank's wait
    is (the latest entry − its own entry), at most the op's duration. Entries are CLOCK_MONOTONIC
    (the window start of each rank + the op's start), one clock for every process on the node.
    What remains of a collective's time is the transfer itself: a rank waiting on nobody."""
    ranks = (result.get("distributed") or {}).get("rank_results")
    if not isinstance(ranks, list) or len(ranks) < 2:
        return None, None, "not a torchrun run with 2 or more ranks: no peers to wait for"
    entries: list[list[tuple[float, float]]] = []
    busy: list[float] = []
    for rank in ranks:
        origin = (
            (rank.get("metadata") or {}).get("window_start_monotonic_ns") if isinstance(rank, dict) else None
        )
        spans, why = _op_spans(rank) if isinstance(rank, dict) else ([], "a rank's result is missing")
        if not isinstance(origin, int):
            return None, None, why or "a rank's window start (metadata.window_start_monotonic_ns) is missing"
        if why:
            return None, None, why
        busy.append(sum(end - start for _, start, end in spans))
        entries.append(
            sorted(
                (origin / 1e3 + start, origin / 1e3 + end)
                for label, start, end in spans
                if is_collective_label(label)
            )
        )
    matched = min(len(e) for e in entries)
    if matched == 0 or min(busy) <= 0:
        return None, None, "no collective op in the ranks' op rows"
    waited = [0.0] * len(entries)
    for k in range(matched):
        latest = max(e[k][0] for e in entries)
        for r, e in enumerate(entries):
            waited[r] += min(max(0.0, latest - e[k][0]), e[k][1] - e[k][0])
    return max(w / b for w, b in zip(waited, busy, strict=True)), matched, None


@dataclass(frozen=True)
class RunEvidence:
    """The figures the causes are judged on, from one run (None where not measured), and why a
    figure is missing. The field names are the names the diagnosis writes (`primary_figure`,
    `evidence`)."""

    sync_defects: int | None
    missing_synchronisation: int | None
    needless_serialisation: int | None
    needless_waits: int | None
    sync_reason: str | None
    streams: int | None
    queues_in_use: int | None
    launch_starvation_share: float | None
    lanes_idle_share: float | None
    cross_stream_waits: object  # as the result file holds it
    host_on_cpu: float | None
    host_cpu_share: float | None
    host_runnable: float | None
    busiest_shared_queue_busy: float | None
    streams_on_busiest_shared_queue: int | None
    queue_reason: str | None
    head_of_line_reason: str | None
    head_of_line_wait_mean_ms: float | None
    head_of_line_share: float | None
    usable_cpus: int | None
    cores_busy: float | None
    cpu_demand: float | None
    run_queue_wait_share: float | None
    reclaim_episodes: float | None
    copy_share: float | None
    copy_ops: int | None
    copy_reason: str | None
    peer_wait_share: float | None
    collectives_matched: int | None
    peer_wait_reason: str | None

    def figure(self, name: str) -> float | None:
        """The figure a rule names (its primary figure, or one of its evidence figures)."""
        value: float | None = getattr(self, name)
        return value


def run_evidence(result: JsonObject) -> RunEvidence:
    """The figures the causes are judged on, from one run (None where not measured)."""
    conc = result.get("concurrency") or {}
    starv = (result.get("switch_latency") or {}).get("launch_starvation") or {}
    qmap = result.get("queue_mapping") or {}
    mem = result.get("ebpf_memory_metrics") or {}
    hol = (result.get("ops") or {}).get("ready_to_start_ms") or {}
    share, per_queue, queue_reason = busiest_shared_queue(result)
    cpus = usable_cpus(result)
    on_cpu, host = _num(conc.get("on_cpu_queues")), _num(conc.get("host_on_cpu"))
    host_wait = _num(conc.get("host_run_queue_wait"))
    window = _num(conc.get("window_ms"))
    queue_wait_ms = _num(conc.get("queue_run_queue_wait_ms"))
    demand = None
    if None not in (on_cpu, host, host_wait, queue_wait_ms) and window and cpus:
        demand = (on_cpu + queue_wait_ms / window + host + host_wait) / cpus  # type: ignore[operator]
    streams = result.get("stream_count")
    achieved = _num(conc.get("achieved"))
    lanes_idle = 1.0 - achieved / streams if achieved is not None and streams else None
    hol_share, hol_reason = head_of_line_share(result)
    copying, copy_ops, copy_reason = copy_share(result)
    peer_wait, collectives, peer_reason = peer_wait_share(result)
    host_share = (
        host / (host + on_cpu) if host is not None and on_cpu is not None and host + on_cpu > 0 else None
    )
    reclaim = None
    if isinstance(mem, dict) and mem.get("status") == "ok":
        parts = [
            _num(mem.get(k))
            for k in ("host_memcg_reclaim_episodes", "host_direct_reclaim_episodes", "evictions")
        ]
        reclaim = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    order = result.get("stream_order") or {}
    missing, needless = order.get("missing_synchronisation"), order.get("needless_serialisation")
    measured = isinstance(missing, list) and isinstance(needless, list) and order.get("edges") is not None
    missing_edges: list[Any] = missing if isinstance(missing, list) else []
    needless_edges: list[Any] = needless if isinstance(needless, list) else []
    return RunEvidence(
        sync_defects=len(missing_edges) + len(needless_edges) if measured else None,
        missing_synchronisation=len(missing_edges) if measured else None,
        needless_serialisation=len(needless_edges) if measured else None,
        needless_waits=sum(_count(e.get("waits")) or 0 for e in needless_edges) if measured else None,
        sync_reason=None if measured else (order.get("note") or "no stream order check in this run"),
        streams=_count(result.get("stream_count")),
        queues_in_use=_count(qmap.get("queues_created")),
        launch_starvation_share=_num(starv.get("share_of_lane_time")),
        lanes_idle_share=lanes_idle,
        cross_stream_waits=starv.get("cross_stream_waits"),
        host_on_cpu=host,
        host_cpu_share=host_share,
        host_runnable=None if host is None or host_wait is None else host + host_wait,
        busiest_shared_queue_busy=share,
        streams_on_busiest_shared_queue=per_queue,
        queue_reason=queue_reason,
        head_of_line_reason=hol_reason,
        head_of_line_wait_mean_ms=_num(hol.get("mean")),
        head_of_line_share=hol_share,
        usable_cpus=cpus,
        cores_busy=(on_cpu + host) / cpus if on_cpu is not None and host is not None and cpus else None,
        cpu_demand=demand,
        run_queue_wait_share=_num(conc.get("queue_run_queue_wait_share")),
        reclaim_episodes=reclaim,
        copy_share=copying,
        copy_ops=copy_ops,
        copy_reason=copy_reason,
        peer_wait_share=peer_wait,
        collectives_matched=collectives,
        peer_wait_reason=peer_reason,
    )


@dataclass(frozen=True)
class Rule:
    """One documented cause: its primary figure and threshold, and the gates beside it."""

    cause: str
    primary: str
    threshold: float
    gates: Callable[[RunEvidence], bool]
    unmeasured: Callable[[RunEvidence], str | None]
    growth: bool = False  # must also exceed the knee's runs


def _launch_unmeasured(ev: RunEvidence) -> str | None:
    if ev.host_cpu_share is None:
        return "host and queue threads' on-CPU time not measured (GPU backend, or an older run)"
    return None


def _launch_gates(ev: RunEvidence) -> bool:
    # while the host is busy the lanes must sit idle: waited gaps for the host's launch (a lane
    # waiting for a cross-stream wait is not waiting for the host), or streams with nothing in
    # flight (one op per lane per iteration leaves no lane gaps to count)
    starved = ev.cross_stream_waits == 0 and (ev.launch_starvation_share or 0.0) >= STARVATION_MIN
    return starved or (ev.lanes_idle_share or 0.0) >= LANES_IDLE_MIN


def _mux_unmeasured(ev: RunEvidence) -> str | None:
    if ev.queues_in_use is None:
        return "queues in use not known (runtime-managed stream→queue mapping)"
    return ev.head_of_line_reason if ev.head_of_line_share is None else None


def _mux_gates(ev: RunEvidence) -> bool:
    streams, queues = ev.streams, ev.queues_in_use
    return isinstance(streams, int) and isinstance(queues, int) and streams > queues


def _sat_unmeasured(ev: RunEvidence) -> str | None:
    if ev.run_queue_wait_share is None or ev.cpu_demand is None:
        return "on-CPU and run-queue wait of the threads not measured (GPU backend, or an older run)"
    return None


def _sat_gates(ev: RunEvidence) -> bool:
    # our own threads want at least every CPU they may use, and held at least half of them: the
    # wait is for each other's CPUs. Demand counts run-queue wait, which other processes' load
    # inflates; on a busy machine (on a CPU 22-35 % of 2 CPUs, waiting 62-78 %) the CPUs they
    # waited for were mostly someone else's, which is not this workload saturating the device
    return (
        ev.cpu_demand is not None
        and ev.cpu_demand >= CPU_DEMAND_MIN
        and ev.cores_busy is not None
        and ev.cores_busy >= CORES_HELD_MIN
    )


def _mem_unmeasured(ev: RunEvidence) -> str | None:
    if ev.reclaim_episodes is None:
        return "not measured: run with --ebpf-memory-trace"
    return None


def _copy_unmeasured(ev: RunEvidence) -> str | None:
    return None if ev.copy_share is not None else ev.copy_reason


def _peer_unmeasured(ev: RunEvidence) -> str | None:
    return None if ev.peer_wait_share is not None else ev.peer_wait_reason


def _sync_unmeasured(ev: RunEvidence) -> str | None:
    if ev.sync_defects is None:
        return f"cross-stream waits not recorded: {ev.sync_reason}"
    return None


RULES = (
    Rule("host_launch_bound", "host_cpu_share", HOST_SHARE_MIN, _launch_gates, _launch_unmeasured),
    Rule("queue_multiplexing", "head_of_line_share", HOL_SHARE_MIN, _mux_gates, _mux_unmeasured, True),
    Rule("device_saturated", "run_queue_wait_share", RUN_QUEUE_WAIT_MIN, _sat_gates, _sat_unmeasured, True),
    Rule("copy_bound", "copy_share", COPY_SHARE_MIN, lambda ev: True, _copy_unmeasured),
    Rule("collective_bound", "peer_wait_share", PEER_WAIT_SHARE_MIN, lambda ev: True, _peer_unmeasured),
    Rule("synchronisation", "sync_defects", SYNC_DEFECTS_MIN, lambda ev: True, _sync_unmeasured),
    Rule("memory_pressure", "reclaim_episodes", RECLAIM_EPISODES_MIN, lambda ev: True, _mem_unmeasured),
)


def _holds(rule: Rule, ev: RunEvidence) -> bool:
    value = ev.figure(rule.primary)
    return value is not None and value >= rule.threshold and rule.gates(ev)


def _confidence(rule: Rule, runs: list[RunEvidence], base: list[RunEvidence]) -> tuple[str, str]:
    """(high | medium | low, why) of a cause that holds in some of `runs`."""
    holding = [ev for ev in runs if _holds(rule, ev)]
    values = [v for v in (ev.figure(rule.primary) for ev in runs) if v is not None]
    n, k = len(runs), len(holding)
    text = f"holds in {k}/{n} run(s)"
    if n == 1:
        return "low", text + "; one run per point: run-to-run spread not measured"
    spread = max(values) - min(values)
    separated = k == n and min(values) - rule.threshold > spread
    if rule.growth:
        before = [v for v in (ev.figure(rule.primary) for ev in base) if v is not None]
        if before and k == n:
            grows = min(values) > max(before)
            separated = separated and grows
            text += f"; {'above' if grows else 'not above'} every run at the knee ({max(before):.2f})"
    if separated and n >= HIGH_MIN_RUNS:
        return "high", text + f"; spread {spread:.2f} < its distance to the threshold"
    if k / n >= MOST:
        return "medium", text + ("" if separated else f"; spread {spread:.2f} not outside it")
    return "low", text


#: per cause, the RunEvidence figures its `evidence` reports (medians over the runs)
EVIDENCE_FIGURES: dict[str, tuple[str, ...]] = {
    "host_launch_bound": (
        "host_cpu_share",
        "host_on_cpu",
        "host_runnable",
        "launch_starvation_share",
        "lanes_idle_share",
    ),
    "queue_multiplexing": (
        "streams",
        "queues_in_use",
        "head_of_line_share",
        "head_of_line_wait_mean_ms",
        "busiest_shared_queue_busy",
        "streams_on_busiest_shared_queue",
    ),
    "device_saturated": ("usable_cpus", "cpu_demand", "cores_busy", "run_queue_wait_share"),
    "synchronisation": (
        "sync_defects",
        "missing_synchronisation",
        "needless_serialisation",
        "needless_waits",
    ),
    "copy_bound": ("copy_share", "copy_ops"),
    "collective_bound": ("peer_wait_share", "collectives_matched"),
    "memory_pressure": ("reclaim_episodes",),
}


def _evidence_figures(rule: Rule, runs: list[RunEvidence]) -> JsonObject:
    """The medians over the runs of the figures this cause is judged on."""
    keys = EVIDENCE_FIGURES[rule.cause]
    out: JsonObject = {}
    for key in keys:
        vals = [v for v in (ev.figure(key) for ev in runs) if isinstance(v, (int, float))]
        out[key] = statistics.median(vals) if vals else None
    return out


def _describe(cause: str, fig: JsonObject, base: JsonObject | None) -> str:
    """One line of the figures behind a cause."""

    def pct(v: Any) -> str:
        return "n/a" if v is None else f"{v:.0%}"

    if cause == "host_launch_bound":
        return (
            f"host thread took {pct(fig['host_cpu_share'])} of the run's CPU time, on a CPU "
            f"{pct(fig['host_on_cpu'])} of the window (runnable "
            f"{pct(fig['host_runnable'])}); lanes idle {pct(fig['launch_starvation_share'])} of their "
            f"time waiting for its launch; streams with nothing in flight {pct(fig['lanes_idle_share'])}"
        )
    if cause == "queue_multiplexing":
        hol = fig["head_of_line_wait_mean_ms"]
        before = (base or {}).get("head_of_line_wait_mean_ms")
        hol_text = "n/a" if hol is None else f"{hol * 1000:.0f} µs"
        if hol is not None and before is not None:
            hol_text += f" (at the knee {before * 1000:.0f} µs)"
        return (
            f"{fig['streams']:g} streams on {fig['queues_in_use']:g} queue(s); ops queued behind other "
            f"streams' ops {pct(fig['head_of_line_share'])} of their ready→end time (mean ready→start "
            f"{hol_text}); the busiest shared queue busy {pct(fig['busiest_shared_queue_busy'])} "
            "of the window"
        )
    if cause == "device_saturated":
        before = (base or {}).get("run_queue_wait_share")
        return (
            f"host + queue threads wanted {pct(fig['cpu_demand'])} of {fig['usable_cpus']:g} usable "
            f"CPU(s) (on a CPU {pct(fig['cores_busy'])}); queue threads waited for a CPU "
            f"{pct(fig['run_queue_wait_share'])} of the time they were runnable (at the knee "
            f"{pct(before)})"
        )
    if cause == "copy_bound":
        before = (base or {}).get("copy_share")
        return (
            f"host↔device copies took {pct(fig['copy_share'])} of the ops' busy time "
            f"({fig['copy_ops']:g} copy op(s), median per run; at the knee {pct(before)})"
        )
    if cause == "collective_bound":
        before = (base or {}).get("peer_wait_share")
        return (
            f"a rank waited inside collectives for a later peer {pct(fig['peer_wait_share'])} of its "
            f"ops' busy time ({fig['collectives_matched']:g} collective(s) matched across ranks, median "
            f"per run; at the knee {pct(before)})"
        )
    if cause == "synchronisation":
        return (
            f"{fig['needless_serialisation']:g} stream pair(s) waited on with no declared dependency "
            f"({fig['needless_waits']:g} wait(s): needless serialisation), "
            f"{fig['missing_synchronisation']:g} declared dependency(ies) never waited on (missing "
            "synchronisation: a race) (median per run; stream_order)"
        )
    return f"{fig['reclaim_episodes']:g} reclaim episode(s) / evictions in the window (median per run)"


def diagnose_point(runs: list[JsonObject], knee_runs: list[JsonObject] | None = None) -> JsonObject:
    """Every documented cause checked on the runs of one point (`knee_runs`: the point before,
    for growth causes): the supported ones ranked, the others with why not."""
    evs = [run_evidence(r) for r in runs]
    base = [run_evidence(r) for r in knee_runs or []]
    supported, checked = [], []
    for rule in RULES:
        reason = next((r for r in (rule.unmeasured(ev) for ev in evs) if r), None)
        if reason is not None:
            checked.append({"cause": rule.cause, "status": "not_measured", "reason": reason})
            continue
        holding = sum(_holds(rule, ev) for ev in evs)
        figures = _evidence_figures(rule, evs)
        entry: JsonObject = {
            "cause": rule.cause,
            "label": CAUSES[rule.cause],
            "primary_figure": rule.primary,
            "threshold": rule.threshold,
            "runs": len(evs),
            "runs_holding": holding,
            "evidence": figures,
            "text": _describe(rule.cause, figures, _evidence_figures(rule, base) if base else None),
        }
        if holding == 0 or (len(evs) > 1 and holding * 2 <= len(evs)):  # not in most runs
            why = entry["text"] + (f" (holds in {holding}/{len(evs)} runs)" if holding else "")
            checked.append({"cause": rule.cause, "status": "not_supported", "reason": why})
            continue
        entry["confidence"], entry["confidence_reason"] = _confidence(rule, evs, base)
        entry["score"] = figures[rule.primary] / rule.threshold if figures[rule.primary] else 0.0
        supported.append(entry)
        checked.append({"cause": rule.cause, "status": "supported", "reason": entry["text"]})
    # within one confidence, a synchronisation defect leads: its figure is an exact count of
    # recorded waits (no threshold noise), and a wrong wait is the program's, not the machine's
    supported.sort(
        key=lambda e: (CONFIDENCE_RANK[e["confidence"]], e["cause"] not in DEFECT_CAUSES, -e["score"])
    )
    return {"causes": supported, "checked": checked}


def _runs_at(results: list[JsonObject], streams: int) -> list[JsonObject]:
    return [r for r in results if r.get("stream_count") == streams and r.get("throughput") is not None]


def diagnose_sweep(results: list[JsonObject], analysis: JsonObject) -> JsonObject:
    """`analysis.diagnosis` of a sweep: what is examined, the supported causes (first = primary)
    and every documented cause's status."""
    counts = analysis.get("stream_counts") or []
    knee = analysis.get("knee_streams")
    rule = "docs/sweep-compare-report.md#diagnosis-analysisdiagnosispy-pure-functions"
    if knee is None and analysis.get("confidence") != "high" and len(counts) >= 2:
        # scaling not established (the rise is within the runs' CIs, unstable or unrepeated
        # points): check the causes at the last point, against the one before
        found = diagnose_point(_runs_at(results, counts[-1]), _runs_at(results, counts[-2]))
        how = f"scaling up to {counts[-1]} streams not established (confidence {analysis.get('confidence')})"
        top = found["causes"][0] if found["causes"] else None
        return {
            "subject": "scaling_uncertain",
            "text": f"{how}: "
            + (f"{top['label']} (confidence {top['confidence']})" if top else "no cause claimed"),
            "knee_streams": None,
            "examined_streams": counts[-1],
            **found,
            "rules": rule,
        }
    if knee is None:
        return {
            "subject": "scales",
            "text": f"throughput scales up to {counts[-1] if counts else '?'} streams: no cause claimed",
            "knee_streams": None,
            "examined_streams": None,
            "causes": [],
            "checked": [],
            "rules": rule,
        }
    after = [n for n in counts if n > knee]
    examined = after[0] if after else knee
    found = diagnose_point(_runs_at(results, examined), _runs_at(results, knee))
    subject = "no_scaling" if counts and knee == counts[0] else "knee"
    where = f"no scaling from {knee} streams" if subject == "no_scaling" else f"knee at {knee} streams"
    if found["causes"]:
        top = found["causes"][0]
        text = f"{where}: {top['label']} (confidence {top['confidence']})"
    else:
        text = f"{where}: no documented cause is supported by the measured evidence"
    return {
        "subject": subject,
        "text": text,
        "knee_streams": knee,
        "examined_streams": examined,
        **found,
        "rules": rule,
    }


def diagnose_run(result: JsonObject) -> JsonObject:
    """The causes one run's own evidence supports (confidence at most "low": one run, unless it
    carries repeats' runs, which are not kept whole)."""
    return diagnose_point([result])

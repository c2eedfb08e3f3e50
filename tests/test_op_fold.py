"""Bounded op memory: the fold's figures against exact recomputation, rows kept, and flat RSS.

Ground truths: the exact metrics functions over every op (synthetic windows), the stored rows of
a real run (recomputed by hand), the known op count of a workload (iterations × ops per
iteration), and the peak RSS of two runs in subprocesses at N and 4N iterations.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.loghist import RELATIVE_ERROR, LogHistogram
from aorta.hw_queue_eval.ops.opfold import WORDS, OpFold, OpWindow
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results.run_result import validate_run_dict
from aorta.hw_queue_eval.run import harness

ALPHA = RELATIVE_ERROR
QS = [25, 50, 75, 95, 99]


@pytest.mark.parametrize("kind", ["lognormal", "uniform_int", "with_zeros", "tiny_floats"])
def test_histogram_percentiles_within_the_stated_relative_error(kind: str) -> None:
    rng = np.random.default_rng(7)
    data = {
        "lognormal": lambda: rng.lognormal(8, 2.5, 50_000).astype(np.int64) + 1,
        "uniform_int": lambda: rng.integers(900, 1_100, 20_000),
        "with_zeros": lambda: np.concatenate([np.zeros(300, np.int64), rng.integers(1, 10**6, 3_000)]),
        "tiny_floats": lambda: rng.exponential(1e-3, 10_000),
    }[kind]()
    hist = LogHistogram()
    for part in np.array_split(data, 7):  # folded in pieces, as chunks arrive
        hist.add(part)
    assert len(hist) == len(data)
    exact = np.percentile(data, QS)
    approx = hist.percentiles(QS, float(data.min()), float(data.max()))
    for a, e in zip(approx, exact, strict=True):
        assert abs(a - e) <= ALPHA * abs(e) + 1e-12, (a, e)
    # and the error is real: a coarser histogram would not pass (the test can fail)
    assert len(hist.counts) < len(np.unique(data)) or kind == "uniform_int"


def _serial_window(seed: int, iterations: int, streams: int = 6, queues: int = 3) -> dict[int, np.ndarray]:
    """Per queue, op records (WORDS columns) as a serial CPU lane produces them."""
    rng = np.random.default_rng(seed)
    out = {}
    for q in range(queues):
        mine = [s for s in range(streams) if s % queues == q]
        rows = []
        t = 1_000 + int(rng.integers(0, 500))
        for it in range(iterations):
            for _ in range(8):
                stream = int(rng.choice(mine))
                label = int(rng.integers(0, 3))
                gap = int(rng.lognormal(7, 1)) if rng.random() < 0.9 else int(rng.integers(0, 3))
                start = t + gap
                end = start + int(rng.lognormal(9 + label, 0.5))
                rows.append((it, stream, label, start - int(rng.integers(0, 5_000)), start, end))
                t = end
        out[q] = np.asarray(rows, dtype=np.int64).reshape(-1, WORDS)
    return out


def _records(window: dict[int, np.ndarray], labels: list[str]) -> list[OpRecord]:
    ops = [
        OpRecord(it, st, q, labels[lab], rdy, s, e)
        for q, rows in window.items()
        for it, st, lab, rdy, s, e in rows.tolist()
    ]
    return sorted(ops, key=lambda o: (o.start_ns, o.stream))


def _fold(window: dict[int, np.ndarray], labels: list[str], cap: int, chunk: int) -> OpFold:
    fold = OpFold(6, labels, cap)
    cursors = dict.fromkeys(window, 0)
    while any(cursors[q] < len(window[q]) for q in window):  # queues' chunks interleaved
        for q, rows in window.items():
            fold.add(q, rows[cursors[q] : cursors[q] + chunk])
            cursors[q] += chunk
    return fold


def _close(a: float, e: float, scale: float) -> bool:
    return abs(a - e) <= ALPHA * scale + 1e-12


def test_folded_figures_match_exact_recomputation_over_every_op() -> None:
    labels = ["gemm", "add", "copy"]
    window = _serial_window(3, iterations=400)
    ops = _records(window, labels)
    cap = 1_000
    fold = _fold(window, labels, cap, chunk=777)
    folded = fold.statistics()
    assert folded is not None and folded.total == len(ops) > cap
    view = OpWindow(fold.records(0), folded)
    # exact: counts and busy time (serial lanes: union = sum of durations)
    assert view.total == len(ops)
    assert view.per_stream_op_counts(6) == metrics.per_stream_op_counts(ops, 6)
    assert view.per_stream_busy_ms(6) == pytest.approx(metrics.per_stream_busy_ms(ops, 6), rel=1e-12)
    # ops per stream and label (the collective join's harness side): exact
    assert folded.per_stream_label_counts() == Counter((op.stream, op.label) for op in ops)
    # count/mean/std/min/max exact; percentiles within α
    exact_labels = metrics.per_label_summary(ops)
    for label, got in view.per_label().items():
        want = exact_labels[label]
        assert got["count"] == want["count"]
        for key in ("mean", "std", "min", "max"):
            assert got[key] == pytest.approx(want[key], rel=1e-9), (label, key)
        for key in ("p50", "p95", "p99", "median"):
            assert _close(got[key], want[key], want[key]), (label, key, got[key], want[key])
    delays = view.ready_to_start_ms()
    want = metrics.summarize(metrics.ready_to_start_delays_ms(ops))
    assert delays["count"] == want["count"] and delays["mean"] == pytest.approx(want["mean"])
    assert _close(delays["p95"], want["p95"], want["p95"])
    # switch analysis: the same gaps counted and matched, medians within α
    got, want = view.switch_analysis(), metrics.switch_analysis(ops)
    for key in (
        "switch_count",
        "no_switch_count",
        "matched_switch_count",
        "matched_on_both_kinds",
        "matched_on_previous_kind",
    ):
        assert got[key] == want[key], key
    assert got["switch_count"] > 0
    scale = 0.0
    for g, w in zip(got["pairs"], want["pairs"], strict=True):
        assert (g["lane"], g["after"], g["before"]) == (w["lane"], w["after"], w["before"])
        assert g["switch_gaps"] == w["switch_gaps"] and g["no_switch_gaps"] == w["no_switch_gaps"]
        assert _close(g["switch_gap_median_ms"], w["switch_gap_median_ms"], w["switch_gap_median_ms"])
        scale = max(scale, w["switch_gap_median_ms"] + w["no_switch_gap_median_ms"])
    assert _close(got["switch_overhead_ms"], want["switch_overhead_ms"], scale)
    # readiness and launch waits: counts, total, mean and max exact, the p50 within α
    assert got["gap_readiness"] == want["gap_readiness"]
    assert 0 < want["gap_readiness"]["waited"] < want["gap_readiness"]["ready"]
    g_wait, w_wait = got["launch_starvation"], want["launch_starvation"]
    for key in ("gaps", "switch_gaps", "gaps_with_known_readiness"):
        assert g_wait[key] == w_wait[key], key
    for key in ("wait_total_ms", "wait_mean_ms", "wait_max_ms"):
        assert g_wait[key] == pytest.approx(w_wait[key], rel=1e-9), key
    assert _close(g_wait["wait_p50_ms"], w_wait["wait_p50_ms"], w_wait["wait_p50_ms"])
    for lane, row in want["per_lane"].items():
        assert got["per_lane"][lane]["launch_wait_gaps"] == row["launch_wait_gaps"]
        assert got["per_lane"][lane]["launch_wait_total_ms"] == pytest.approx(row["launch_wait_total_ms"])
    assert got["all_gaps"]["matched_switch_count"] == want["all_gaps"]["matched_switch_count"]


def test_rows_are_the_first_ops_by_start_and_a_prefix_of_every_stream() -> None:
    labels = ["gemm", "add", "copy"]
    window = _serial_window(5, iterations=300)
    ops = _records(window, labels)
    fold = _fold(window, labels, cap=900, chunk=250)
    rows = fold.records(0)
    assert 0 < len(rows) <= 900
    assert rows == ops[: len(rows)]  # the first ops of the window by (start, stream)
    assert ops[len(rows)].start_ns > rows[-1].start_ns or len(rows) == 900
    per_stream_kept = {s: [o for o in rows if o.stream == s] for s in range(6)}
    for stream, kept in per_stream_kept.items():
        mine = [o for o in ops if o.stream == stream]
        assert kept == mine[: len(kept)]  # wait ordinals stay valid in the kept rows


def test_small_windows_are_not_folded_and_keep_every_op() -> None:
    labels = ["gemm", "add", "copy"]
    window = _serial_window(9, iterations=20)
    ops = _records(window, labels)
    fold = _fold(window, labels, cap=len(ops), chunk=64)
    assert fold.statistics() is None and fold.records(0) == ops


def _hand_summary(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values)
    p25, p50, p75, p95, p99 = np.percentile(arr, QS)
    return {
        "count": len(arr),
        "mean": arr.mean(),
        "min": arr.min(),
        "max": arr.max(),
        "std": arr.std(ddof=1),
        "p50": p50,
        "p95": p95,
        "p99": p99,
        "iqr": p75 - p25,
    }


@pytest.mark.parametrize("workload", ["moe", "hetero_kernels"])
def test_real_run_below_the_cap_equals_a_hand_recomputation_from_its_rows(workload: str) -> None:
    result = harness.run_benchmark(
        RunConfig(workload=workload, streams=4, iterations=4, warmup=1, device="cpu", size="small")
    ).to_dict()
    table = result["op_intervals"]
    rows, labels = table["rows"], table["labels"]
    assert not table["truncated"] and table["total_ops"] == len(rows) == result["ops"]["count"]
    assert result["ops"]["statistics"]["percentile_relative_error"] == 0.0
    counts = [sum(1 for r in rows if r[1] == s) for s in range(4)]
    assert result["per_stream_op_counts"] == counts
    busy = [sum(r[6] - r[5] for r in rows if r[1] == s) / 1e3 for s in range(4)]
    assert result["per_stream_times_ms"] == pytest.approx(busy, abs=1e-9)
    assert result["concurrency"]["achieved"] == pytest.approx(
        sum(busy) / result["concurrency"]["window_ms"], rel=1e-9
    )
    for index, label in enumerate(labels):
        want = _hand_summary([(r[6] - r[5]) / 1e3 for r in rows if r[3] == index])
        got = result["ops"]["per_label"][label]
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (label, key)
    want = _hand_summary([(r[5] - r[4]) / 1e3 for r in rows])
    for key, value in want.items():
        assert result["ops"]["ready_to_start_ms"][key] == pytest.approx(value, rel=1e-9, abs=1e-9)


def test_run_above_the_cap_counts_every_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 streams × 16 ops × 40 iterations = 5,120 ops, rows capped at 1,500."""
    monkeypatch.setattr(harness, "MAX_STORED_OPS", 1_500)
    config = RunConfig(
        workload="tiny_kernel_stress", streams=8, iterations=40, warmup=1, device="cpu", size="small"
    )
    result = harness.run_benchmark(config).to_dict()
    assert validate_run_dict(result) == []
    expected = 8 * 16 * 40
    table = result["op_intervals"]
    assert result["ops"]["count"] == table["total_ops"] == expected
    assert table["truncated"] and 0 < len(table["rows"]) <= 1_500
    assert result["per_stream_op_counts"] == [16 * 40] * 8
    assert result["ops"]["per_label"]["tiny_mul"]["count"] == expected
    assert result["ops"]["ready_to_start_ms"]["count"] == expected
    stats = result["ops"]["statistics"]
    assert stats["ops"] == expected and stats["rows_kept"] == len(table["rows"])
    assert stats["percentile_relative_error"] == ALPHA
    work = result["metadata"]["work_per_iteration"] * 40
    assert result["throughput"] == pytest.approx(work / (result["total_time_ms"] / 1e3) / 1e9)
    sw = result["switch_latency"]  # every lane gap counted: one per op after the lane's first
    assert sw["switch_count"] + sw["no_switch_count"] <= expected
    assert sw["switch_count"] + sw["no_switch_count"] >= expected - 4 * 40
    assert result["instrumentation"]["op_fold_ms"] > 0


_RSS_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from aorta.hw_queue_eval.run import harness
    from aorta.hw_queue_eval.config.run_config import RunConfig
    harness.MAX_STORED_OPS = 5_000
    config = RunConfig(workload="tiny_kernel_stress", streams=16, iterations=int(sys.argv[1]),
                       warmup=1, device="cpu", size="small", sync_mode=sys.argv[2])
    result = harness.run_benchmark(config).to_dict()
    text = json.dumps(result)
    print(json.dumps({"ops": result["ops"]["count"], "peak": result["memory"]["peak_bytes"],
                      "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
""")


@pytest.mark.slow  # two fresh processes that import torch
@pytest.mark.parametrize(("sync_mode", "n"), [("per_iteration", 150), ("end_only", 300)])
def test_peak_rss_stays_flat_with_iterations(sync_mode: str, n: int) -> None:
    """N and 4N iterations (16 × 16 ops each; rows capped at 5,000): before the fold every op
    stayed in memory (~340-500 B each: 40-60 MB more at 4N); now the figures are folded and the
    difference is noise. end_only has no host wait per iteration: before each queue's bounded
    FIFO (cpu.MAX_QUEUED_TASKS) every op waited there with its closure (1.7 GB at 4 M ops), +36
    MB from 300 to 1,200 iterations; now +3 MB (its first 150 iterations fill fixed structures:
    +10 MB from 150 to 600, so N starts at 300)."""
    peaks = {}
    for iterations in (n, 4 * n):
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _RSS_SCRIPT, str(iterations), sync_mode],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        peaks[iterations] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert peaks[4 * n]["ops"] == 4 * peaks[n]["ops"] == 4 * n * 16 * 16
    grown = peaks[4 * n]["maxrss"] - peaks[n]["maxrss"]
    grown_window = peaks[4 * n]["peak"] - peaks[n]["peak"]
    bound = 12 * 2**20  # the old code grew by > 35 MiB here
    assert grown < bound and grown_window < bound, (grown, grown_window)


def test_handoffs_beyond_the_kept_rings_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each op on an idle queue is one ring: 30 rings counted, 4 kept with their times, and the
    eBPF comparison compares its totals over all 30 and its matches over the kept ones."""
    from aorta.ebpf.probes.cpu_sched import per_queue_cap
    from aorta.hw_queue_eval.backends import cpu
    from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness

    assert per_queue_cap(1) <= cpu.MAX_KEPT_RINGS  # every record the kernel keeps has a partner
    monkeypatch.setattr(cpu, "MAX_KEPT_RINGS", 4)
    backend = cpu.CpuBackend(1, pool_size=1)
    try:
        backend.start_window()
        for i in range(30):
            backend.begin_iteration(i)
            backend.streams[0].launch(lambda: None, "op")
            backend.synchronize()  # the queue goes idle: the next launch rings again
        backend.stop_window()
        totals, subs = backend.handoff_totals(), backend.submissions()
    finally:
        backend.close()
    assert len(subs) == 4 and [s.seq for s in subs] == [0, 1, 2, 3]
    assert totals.kept == 4 and totals.count >= 30  # markers may ring too (timing)
    assert totals.first_task_kinds["op"] == 30
    section = {
        "status": "ok",
        "source": "cpu_sched",
        "total_submissions": totals.count,
        "lost_events": 0,
        "per_submission_cap_per_queue": 3,
    }
    kernel = [[0, s.seq, s.ring_ns, s.start_ns - s.ring_ns] for s in subs[:3]]
    c = compare_with_harness(section, subs, kernel, totals)
    assert c["harness_submissions"] == totals.count and c["submissions_equal"]
    assert c["matched_submissions"] == 3 and c["coverage_pct"] == 100.0
    assert c["beyond_record_cap"] == totals.count - 3
    assert c["first_task_kinds"]["op"] == 30


def test_waits_beyond_the_kept_rows_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    from aorta.hw_queue_eval.backends.base import DependencyLog

    monkeypatch.setattr(DependencyLog, "max_rows", 3)
    log = DependencyLog()
    log.start()
    for _ in range(5):
        log.launched(0)
        log.launched(1)
        log.waited(1, 0)
    assert log.stop() == [(1, 1, 0, 0), (1, 2, 0, 1), (1, 3, 0, 2)] and log.total == 5

"""--trace-out: a Chrome trace-event file Perfetto can open, one track per stream and per queue."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

from aorta.hw_queue_eval.report.trace import build_trace, busy_stream_counter, trace_chunks
from aorta.hw_queue_eval.results.models import QueueMapping
from aorta.hw_queue_eval.run.harness import MAX_STORED_OPS
from conftest import load_json, run_cli_inprocess
from factories import op_intervals, queue_section, run_result
from trace_checks import validate_trace


@pytest.mark.slow
def test_run_trace_out_structure(tmp_path):
    trace_path, result_path = tmp_path / "t.trace.json", tmp_path / "r.json"
    proc = run_cli_inprocess(  # the run's outputs are what is checked, not its process
        "run",
        "hetero_kernels",
        "--streams",
        "6",
        "-i",
        "3",
        "-w",
        "1",
        "-d",
        "cpu",
        "-o",
        str(result_path),
        "--trace-out",
        str(trace_path),
    )
    assert proc.returncode == 0, proc.stderr
    trace, result = load_json(trace_path), load_json(result_path)
    assert validate_trace(trace) == []
    events = trace["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    stream_ops = [e for e in ops if e["pid"] == 1]
    queue_ops = [e for e in ops if e["pid"] == 2]
    assert len(stream_ops) == len(queue_ops) == result["ops"]["count"] > 0
    assert {e["tid"] for e in stream_ops} == set(range(1, 7))  # one track per stream
    assert {e["tid"] for e in queue_ops} == set(range(1, result["queue_mapping"]["queues_created"] + 1))
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert names[(1, 5)] == "stream 4 → queue 0"  # 6 streams on a pool of 4: stream 4 shares q0
    window_us = result["total_time_ms"] * 1000
    assert all(e["ts"] >= 0 and e["ts"] + e["dur"] <= window_us + 1 for e in ops)
    busy = [e["args"]["busy"] for e in events if e["ph"] == "C" and e["name"] == "busy streams"]
    assert busy
    assert max(busy) <= 6
    assert busy[-1] == 0
    for tid in {e["tid"] for e in stream_ops}:  # ops on one track never overlap (Perfetto nests)
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in stream_ops if e["tid"] == tid)
        assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(track))


def test_busy_counter_merges_a_streams_ops():
    ops = [
        {"stream": 0, "start_us": 0.0, "end_us": 10.0},
        {"stream": 0, "start_us": 5.0, "end_us": 12.0},
        {"stream": 1, "start_us": 8.0, "end_us": 9.0},
        {"stream": 1, "start_us": 20.0, "end_us": 30.0},
    ]
    assert busy_stream_counter(ops) == [(0.0, 1), (8.0, 2), (9.0, 1), (12.0, 0), (20.0, 1), (30.0, 0)]


def test_ebpf_aggregates_become_counters_and_a_marker():
    result = run_result(
        streams=1,
        op_intervals=op_intervals([[0, 0, 0, 0, None, 1.0, 2.0]], ["a"]),
        ebpf_queue_metrics=queue_section("cpu_sched", submissions=800, p99_us=45.7),
    )
    trace = build_trace(result)
    assert validate_trace(trace) == []
    counters = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == 3}
    assert counters["ebpf_queue_metrics.submit_to_dispatch_p99_us"]["args"] == {"value": 45.7}
    marker = next(e for e in trace["traceEvents"] if e["ph"] == "i")
    assert marker["args"]["total_submissions"] == 800


def test_validate_trace_catches_bad_events():
    assert validate_trace(
        {"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": -1}]}
    ) == ["event 0: complete event needs dur ≥ 0"]
    assert validate_trace([]) == ["top level must be an object with a traceEvents list"]


def test_gpu_like_result_without_queue_ids():
    rows = [[0, 0, None, 0, None, 1.0, 5.0], [0, 1, None, 0, None, 2.0, 6.0]]
    result = run_result(
        streams=2,
        backend="gpu",
        pool_size=None,
        op_intervals=op_intervals(rows, ["mm"]),
        queue_mapping=QueueMapping(
            pool_size=None, stream_to_queue=None, reason="the GPU runtime assigns hardware queues"
        ),
    )
    trace = build_trace(result)
    assert validate_trace(trace) == []
    assert not [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert "hardware queues (not observed: the GPU runtime assigns hardware queues)" in names


def test_cross_stream_waits_become_flow_arrows():
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.run.harness import run_benchmark

    result = run_benchmark(
        RunConfig(workload="graph_subgraphs", streams=4, iterations=2, warmup=1, device="cpu")
    ).to_dict()
    trace = build_trace(result)
    assert validate_trace(trace) == []
    starts = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    # per iteration: 3 branches wait for the fork, the join waits for 3 branches
    assert len(starts) == len(ends) == 2 * 6 == trace["otherData"]["waits_in_trace"]
    for flow_id, start in starts.items():
        end = ends[flow_id]
        assert start["ts"] <= end["ts"]
        assert start["tid"] != end["tid"]
    fork_waits = [e for e in starts.values() if e["tid"] == 1]  # stream 0 = track 1
    assert len(fork_waits) == 2 * 3


def test_the_streamed_trace_is_the_built_one():
    """What --trace-out writes piece by piece parses to exactly `build_trace` (pieces of ~64
    bytes here: every event boundary falls inside or between pieces)."""
    rows = [[i % 3, i % 2, i % 2, 0, float(i), float(i) + 0.5, float(i) + 1.0] for i in range(40)]
    result = run_result(
        streams=2,
        op_intervals=op_intervals(rows, ["mm", "add"]),
        ebpf_queue_metrics=queue_section("cpu_sched", submissions=800, p99_us=45.7),
    )
    result["workload_name"] = "\ud800 ünïcode \x1b"  # a lone surrogate and a control character
    pieces = list(trace_chunks(result, chunk_bytes=64))
    assert len(pieces) > 10
    assert json.loads(b"".join(pieces)) == build_trace(result)


@pytest.mark.slow  # one real run of just over the row cap, with its trace
def test_trace_export_adds_little_to_the_runs_own_peak(tmp_path):
    """206,848 ops: the trace holds the first 200,000 (MAX_STORED_OPS), its largest size. Before,
    the whole event list and its indented encoding were in memory at once: the process peaked at
    2.2 GB for a 174 MB trace, 1.9 GB above the window's own peak; now the events are encoded as
    they are made and written in pieces (~110 MB above it, the -o file's encoding included)."""
    out, trace = tmp_path / "r.json", tmp_path / "t.trace.json"
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "aorta.hw_queue_eval", "run", "tiny_kernel_stress"),
                *("--streams", "16"),
                *("--size", "large", "-i", "101", "-w", "1", "-d", "cpu"),
                *("-o", str(out), "--trace-out", str(trace)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (tmp_path / "stderr").read_text()[-2000:]
    result, events = load_json(out), load_json(trace)["traceEvents"]
    assert result["ops"]["count"] == 101 * 16 * 128 > MAX_STORED_OPS
    assert sum(e["ph"] == "X" and e["pid"] == 1 for e in events) == MAX_STORED_OPS
    above_window = usage.ru_maxrss * 1024 - result["memory"]["peak_bytes"]  # ru_maxrss is in KiB
    assert above_window < 256 * 2**20, f"the writes peaked {above_window / 2**20:.0f} MiB above the run"

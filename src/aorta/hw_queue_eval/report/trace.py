"""Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing) from a run result.

Layout: process 1 "streams" has one track per stream with every measured op (complete events)
and a "busy streams" counter; process 2 "hardware queues" has one track per queue with the same
ops named by stream; process 3 "eBPF" carries the kernel aggregates as counters over the window and
one instant marker with every value; cross-stream waits are flow arrows between stream tracks.
All timestamps are µs since the measurement-window start, the clock of `op_intervals`
(CLOCK_MONOTONIC on the CPU backend, the one bpftrace uses).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aorta.common.flatten import flatten_numbers

PID_STREAMS, PID_QUEUES, PID_EBPF = 1, 2, 3
MAX_EBPF_COUNTERS = 64
PHASES = {"X", "C", "M", "i", "s", "f"}


def _meta(pid: int, tid: int | None, kind: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "pid": pid, "name": kind, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _op_rows(result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    table = result.get("op_intervals") or {}
    columns = table.get("columns") or []
    labels = table.get("labels") or []
    rows = [dict(zip(columns, row, strict=True)) for row in table.get("rows") or []]
    for row in rows:
        row["name"] = labels[row["label"]] if isinstance(row["label"], int) else str(row["label"])
    return rows, labels


def busy_stream_counter(ops: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """(time µs, number of streams with an op running) at every change."""
    edges: dict[float, int] = defaultdict(int)
    by_stream: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for op in ops:
        by_stream[op["stream"]].append((op["start_us"], op["end_us"]))
    for intervals in by_stream.values():  # merge per stream: a stream is busy or not
        intervals.sort()
        cur_start, cur_end = intervals[0]
        for start, end in intervals[1:]:
            if start > cur_end:
                edges[cur_start] += 1
                edges[cur_end] -= 1
                cur_start, cur_end = start, end
            else:
                cur_end = max(cur_end, end)
        edges[cur_start] += 1
        edges[cur_end] -= 1
    level, out = 0, []
    for ts in sorted(edges):
        if edges[ts]:
            level += edges[ts]
            out.append((ts, level))
    return out


def wait_flows(result: dict[str, Any], ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flow arrows (ph s → f) from the op waited for to the op that waited, one per wait.

    `op_intervals.waits` names ops by their ordinal on their stream in the window; ops run in
    launch order on a stream, so the k-th op by start time is the k-th launched.
    """
    waits = ((result.get("op_intervals") or {}).get("waits") or {}).get("rows") or []
    by_stream: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        by_stream[op["stream"]].append(op)
    for stream_ops in by_stream.values():
        stream_ops.sort(key=lambda op: op["start_us"])
    events = []
    for flow_id, (waiter, waiter_op, target, target_op) in enumerate(waits, start=1):
        after, before = by_stream.get(waiter, []), by_stream.get(target, [])
        if not (0 <= waiter_op < len(after) and 0 <= target_op < len(before)):
            continue  # the waiting op was never launched in the window, or ops were truncated
        src, dst = before[target_op], after[waiter_op]
        name = f"s{waiter} waits s{target}"
        events.append(
            {
                "ph": "s",
                "id": flow_id,
                "name": name,
                "cat": "wait",
                "pid": PID_STREAMS,
                "tid": target + 1,
                "ts": src["end_us"],
            }
        )
        events.append(
            {
                "ph": "f",
                "bp": "e",
                "id": flow_id,
                "name": name,
                "cat": "wait",
                "pid": PID_STREAMS,
                "tid": waiter + 1,
                "ts": max(dst["start_us"], src["end_us"]),
            }
        )
    return events


def _ebpf_events(result: dict[str, Any], window_us: float) -> list[dict[str, Any]]:
    events = []
    sections = {
        k: result.get(k)
        for k in ("ebpf_queue_metrics", "ebpf_memory_metrics", "ebpf_vs_cuda_comparison")
        if result.get(k)
    }
    if not sections:
        return events
    events.append(_meta(PID_EBPF, None, "process_name", "eBPF (kernel aggregates over the window)"))
    events.append(_meta(PID_EBPF, 1, "thread_name", "eBPF aggregates"))
    counters = 0
    for section, data in sections.items():
        flat = flatten_numbers(data)
        events.append(
            {"ph": "i", "s": "p", "name": section, "pid": PID_EBPF, "tid": 1, "ts": 0.0, "args": flat}
        )
        for key, value in flat.items():
            if counters >= MAX_EBPF_COUNTERS:
                break
            counters += 1
            for ts in (0.0, window_us):
                events.append(
                    {
                        "ph": "C",
                        "name": f"{section}.{key}",
                        "pid": PID_EBPF,
                        "ts": ts,
                        "args": {"value": value},
                    }
                )
    return events


def build_trace(result: dict[str, Any]) -> dict[str, Any]:
    """The trace-event object for one run result (uses its `op_intervals` table)."""
    ops, _ = _op_rows(result)
    events: list[dict[str, Any]] = [
        _meta(
            PID_STREAMS,
            None,
            "process_name",
            f"streams ({result.get('workload_name')}, {result.get('stream_count')} streams)",
        ),
    ]
    qmap = result.get("queue_mapping") or {}
    mapping = qmap.get("stream_to_queue") or []
    queues = sorted({op["queue"] for op in ops if op["queue"] is not None})
    events.append(
        _meta(
            PID_QUEUES,
            None,
            "process_name",
            "hardware queues"
            if queues
            else f"hardware queues (not observed: {qmap.get('reason') or 'no queue ids'})",
        )
    )
    for stream in range(int(result.get("stream_count") or 0)):
        queue = mapping[stream] if stream < len(mapping) else None
        suffix = f" → queue {queue}" if queue is not None else ""
        events.append(_meta(PID_STREAMS, stream + 1, "thread_name", f"stream {stream}{suffix}"))
        events.append(
            {
                "ph": "M",
                "pid": PID_STREAMS,
                "tid": stream + 1,
                "name": "thread_sort_index",
                "args": {"sort_index": stream},
            }
        )
    for queue in queues:
        events.append(_meta(PID_QUEUES, queue + 1, "thread_name", f"queue {queue}"))
    for op in ops:
        dur = max(0.0, op["end_us"] - op["start_us"])
        wait = None if op["ready_us"] is None else round(op["start_us"] - op["ready_us"], 3)
        args = {
            "iteration": op["iteration"],
            "stream": op["stream"],
            "queue": op["queue"],
            "ready_to_start_us": wait,
        }
        events.append(
            {
                "ph": "X",
                "name": op["name"],
                "cat": "op",
                "pid": PID_STREAMS,
                "tid": op["stream"] + 1,
                "ts": op["start_us"],
                "dur": dur,
                "args": args,
            }
        )
        if op["queue"] is not None:
            events.append(
                {
                    "ph": "X",
                    "name": f"s{op['stream']} {op['name']}",
                    "cat": "op",
                    "pid": PID_QUEUES,
                    "tid": op["queue"] + 1,
                    "ts": op["start_us"],
                    "dur": dur,
                    "args": args,
                }
            )
    flows = wait_flows(result, ops)
    events += flows
    for ts, level in busy_stream_counter(ops):
        events.append(
            {"ph": "C", "name": "busy streams", "pid": PID_STREAMS, "ts": ts, "args": {"busy": level}}
        )
    window_us = float(result.get("total_time_ms") or 0.0) * 1000.0
    events += _ebpf_events(result, window_us)
    table = result.get("op_intervals") or {}
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "workload": result.get("workload_name"),
            "streams": result.get("stream_count"),
            "clock": "µs since the measurement-window start (op_intervals clock)",
            "window_start_monotonic_ns": (result.get("metadata") or {}).get("window_start_monotonic_ns"),
            "ops_in_trace": len(ops),
            "ops_measured": table.get("total_ops"),
            "waits_in_trace": len(flows) // 2,
            "truncated": bool(table.get("truncated")),
            "note": None if ops else "the run recorded no op intervals",
        },
    }


def validate_trace(trace: Any) -> list[str]:
    """Structural problems of a trace-event object (empty list: Perfetto can load it)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["top level must be an object with a traceEvents list"]
    problems = []
    for i, event in enumerate(trace["traceEvents"]):
        ph = event.get("ph")
        if ph not in PHASES:
            problems.append(f"event {i}: unknown phase {ph!r}")
            continue
        if not isinstance(event.get("name"), str) or not isinstance(event.get("pid"), int):
            problems.append(f"event {i}: needs a string name and an integer pid")
        if ph != "M" and not isinstance(event.get("ts"), (int, float)):
            problems.append(f"event {i}: needs a numeric ts")
        if ph == "X" and not (isinstance(event.get("dur"), (int, float)) and event["dur"] >= 0):
            problems.append(f"event {i}: complete event needs dur ≥ 0")
        if ph in ("s", "f") and not isinstance(event.get("id"), int):
            problems.append(f"event {i}: flow event needs an integer id")
        if ph in ("X", "i", "s", "f") and not isinstance(event.get("tid"), int):
            problems.append(f"event {i}: needs an integer tid")
        if ph == "C" and not all(
            isinstance(v, (int, float)) for v in (event.get("args") or {None: None}).values()
        ):
            problems.append(f"event {i}: counter args must be numbers")
    return problems

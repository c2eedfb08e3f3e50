"""Chrome trace-event JSON (opens in ui.perfetto.dev and chrome://tracing) from a run result.

Layout: process 1 "streams" has one track per stream with every measured op (complete events)
and a "busy streams" counter; process 2 "hardware queues" has one track per queue with the same
ops named by stream; process 3 "eBPF" carries the kernel aggregates as counters over the window and
one instant marker with every value; cross-stream waits are flow arrows between stream tracks.
With an eBPF timeline (run --ebpf-trace --trace-out), process 4 "threads" has two tracks per
traced thread, its on-CPU slices (sched_switch) and its run-queue waits, one instant per doorbell
write on the writer's track with a flow arrow to the worker's dispatch, and from there to the op
it started on its queue's track (timeline.py keeps the first events of each kind, and says how
many it dropped, in otherData.ebpf_timeline). With --ebpf-gpu-runtime too, process 7 "GPU
runtime (eBPF uprobes)" has one track per stream with each runtime call from entry to return and
record → wait flow arrows (report/trace_gpu_runtime.py; otherData.ebpf_gpu_runtime_timeline).
All timestamps are µs since the measurement-window start, the clock of `op_intervals`
(CLOCK_MONOTONIC on the CPU backend, the one bpftrace uses; on the GPU backend the ops count from
the window-start event, and eBPF records from the host's clock right before it was enqueued).
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterator

from aorta.common.flatten import flatten_numbers
from aorta.common.jsontypes import JsonObject
from aorta.ebpf import memory_metrics as mm
from aorta.hw_queue_eval.report.trace_gpu_runtime import gpu_runtime_events

PID_STREAMS, PID_QUEUES, PID_EBPF, PID_THREADS, PID_MEMORY, PID_GPU_MEMORY = 1, 2, 3, 4, 5, 6
MEMORY_KINDS = ("page_faults_per_ms", "direct_reclaim", "memcg_reclaim", "migrations")
TIMELINE_KINDS = ("on_cpu", "run_queue", "doorbells")
MAX_EBPF_COUNTERS = 64


def _meta(pid: int, tid: int | None, kind: str, name: str) -> JsonObject:
    event: JsonObject = {"ph": "M", "pid": pid, "name": kind, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _op_rows(result: JsonObject) -> tuple[list[JsonObject], list[str]]:
    table = result.get("op_intervals") or {}
    columns = table.get("columns") or []
    labels = table.get("labels") or []
    rows = [dict(zip(columns, row, strict=True)) for row in table.get("rows") or []]
    for row in rows:
        row["name"] = labels[row["label"]] if isinstance(row["label"], int) else str(row["label"])
    return rows, labels


def busy_stream_counter(ops: list[JsonObject]) -> list[tuple[float, int]]:
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


def wait_flows(result: JsonObject, ops: list[JsonObject]) -> list[JsonObject]:
    """Flow arrows (ph s → f) from the op waited for to the op that waited, one per wait.

    `op_intervals.waits` names ops by their ordinal on their stream in the window; ops run in
    launch order on a stream, so the k-th op by start time is the k-th launched.
    """
    waits = ((result.get("op_intervals") or {}).get("waits") or {}).get("rows") or []
    by_stream: dict[int, list[JsonObject]] = defaultdict(list)
    for op in ops:
        by_stream[op["stream"]].append(op)
    for stream_ops in by_stream.values():
        stream_ops.sort(key=lambda op: op["start_us"])
    events = []
    for flow_id, (waiter, waiter_op, target, target_op) in enumerate(waits, start=1):  # ids 1..len
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


def _ebpf_events(result: JsonObject, window_us: float) -> list[JsonObject]:
    events: list[JsonObject] = []
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


def _trace_events(result: JsonObject, ops: list[JsonObject], tally: dict[str, int]) -> Iterator[JsonObject]:
    """Every event of the trace, one at a time (a trace of 200,000 ops is ~600,000 events: kept
    as one list and encoded with indent, they took 1.8 GB for a 174 MB file). Counts the waits
    drawn into `tally`."""
    yield _meta(
        PID_STREAMS,
        None,
        "process_name",
        f"streams ({result.get('workload_name')}, {result.get('stream_count')} streams)",
    )
    qmap = result.get("queue_mapping") or {}
    mapping = qmap.get("stream_to_queue") or []
    queues = sorted({op["queue"] for op in ops if op["queue"] is not None})
    yield _meta(
        PID_QUEUES,
        None,
        "process_name",
        "hardware queues"
        if queues
        else f"hardware queues (not observed: {qmap.get('reason') or 'no queue ids'})",
    )
    for stream in range(int(result.get("stream_count") or 0)):
        queue = mapping[stream] if stream < len(mapping) else None
        suffix = f" → queue {queue}" if queue is not None else ""
        yield _meta(PID_STREAMS, stream + 1, "thread_name", f"stream {stream}{suffix}")
        yield {
            "ph": "M",
            "pid": PID_STREAMS,
            "tid": stream + 1,
            "name": "thread_sort_index",
            "args": {"sort_index": stream},
        }
    for queue in queues:
        yield _meta(PID_QUEUES, queue + 1, "thread_name", f"queue {queue}")
    for op in ops:
        dur = max(0.0, op["end_us"] - op["start_us"])
        wait = None if op["ready_us"] is None else round(op["start_us"] - op["ready_us"], 3)
        args = {
            "iteration": op["iteration"],
            "stream": op["stream"],
            "queue": op["queue"],
            "ready_to_start_us": wait,
        }
        yield {
            "ph": "X",
            "name": op["name"],
            "cat": "op",
            "pid": PID_STREAMS,
            "tid": op["stream"] + 1,
            "ts": op["start_us"],
            "dur": dur,
            "args": args,
        }
        if op["queue"] is not None:
            yield {
                "ph": "X",
                "name": f"s{op['stream']} {op['name']}",
                "cat": "op",
                "pid": PID_QUEUES,
                "tid": op["queue"] + 1,
                "ts": op["start_us"],
                "dur": dur,
                "args": args,
            }
    flows = wait_flows(result, ops)
    tally["waits"] = len(flows) // 2
    yield from flows
    yield from timeline_events(result, ops, tally)
    yield from memory_timeline_events(result, tally)
    yield from gpu_memory_timeline_events(result, tally)
    yield from gpu_runtime_events(result, tally)
    for ts, level in busy_stream_counter(ops):
        yield {"ph": "C", "name": "busy streams", "pid": PID_STREAMS, "ts": ts, "args": {"busy": level}}
    window_us = float(result.get("total_time_ms") or 0.0) * 1000.0
    yield from _ebpf_events(result, window_us)


def ebpf_timeline(result: JsonObject) -> JsonObject | None:
    """The cpu_sched family's per-event records of a traced run, None when it kept none."""
    families = (result.get("ebpf_queue_metrics") or {}).get("families") or {}
    found = ((families.get("cpu_sched") or {}).get("metrics") or {}).get("timeline")
    return found if isinstance(found, dict) else None


def _flow(
    flow_id: int, name: str, start: tuple[int, int, float], end: tuple[int, int, float]
) -> list[JsonObject]:
    """A flow arrow (ph s → f) from (pid, tid, ts) to (pid, tid, ts)."""
    return [
        {
            "ph": "s",
            "id": flow_id,
            "name": name,
            "cat": "dispatch",
            "pid": start[0],
            "tid": start[1],
            "ts": start[2],
        },
        {
            "ph": "f",
            "bp": "e",
            "id": flow_id,
            "name": name,
            "cat": "dispatch",
            "pid": end[0],
            "tid": end[1],
            "ts": end[2],
        },
    ]


def timeline_events(result: JsonObject, ops: list[JsonObject], tally: JsonObject) -> Iterator[JsonObject]:
    """Process 4: the eBPF timeline's slices, doorbell and dispatch instants and their flows,
    on the ops' clock (ns since window_start_monotonic_ns); counts what it drew into `tally`."""
    tl = ebpf_timeline(result)
    origin = (result.get("metadata") or {}).get("window_start_monotonic_ns")
    if tl is None or not isinstance(origin, int):
        return
    tally["timeline"] = {  # + on-CPU slices that ended in the window with no start seen (not drawn)
        kind: {
            **{k: part.get(k) for k in ("seen", "kept", "dropped")},
            **({"unstarted": part["unstarted"]} if "unstarted" in part else {}),
            "in_trace": 0,
        }
        for kind, part in ((kind, tl.get(kind) or {}) for kind in TIMELINE_KINDS)
    }

    def us(ns: int) -> float:
        return (ns - origin) / 1e3

    threads = {t["tid"]: t for t in tl.get("threads") or []}
    for kind in ("on_cpu", "run_queue"):
        for tid, *_ in (tl.get(kind) or {}).get("rows") or []:
            threads.setdefault(tid, {"tid": tid, "label": "thread", "queue": None})
    order = sorted(threads.values(), key=lambda t: (t["queue"] is not None, t["queue"] or 0, t["tid"]))
    track = {t["tid"]: 2 * i + 1 for i, t in enumerate(order)}  # its run-queue track is the next id
    yield _meta(PID_THREADS, None, "process_name", "threads (eBPF: sched_switch, doorbells)")
    for t in order:
        for offset, what in ((0, "on CPU"), (1, "run queue")):
            yield _meta(
                PID_THREADS, track[t["tid"]] + offset, "thread_name", f"{t['label']} tid {t['tid']} {what}"
            )
            yield {
                "ph": "M",
                "pid": PID_THREADS,
                "tid": track[t["tid"]] + offset,
                "name": "thread_sort_index",
                "args": {"sort_index": track[t["tid"]] + offset},
            }
    for kind, offset, name in (("on_cpu", 0, "on CPU"), ("run_queue", 1, "run queue")):
        for tid, start, end, *charged in (tl.get(kind) or {}).get("rows") or []:
            tally["timeline"][kind]["in_trace"] += 1
            event = {
                "ph": "X",
                "name": name,
                "cat": "sched",
                "pid": PID_THREADS,
                "tid": track[tid] + offset,
                "ts": us(start),
                "dur": (end - start) / 1e3,
            }
            if kind == "on_cpu":  # the kernel's run time of the slice (no IRQ or steal time)
                ran = charged[0] if charged else None
                event["args"] = {"charged_us": None if ran is None else ran / 1e3}
            yield event
    worker_of = {t["queue"]: t["tid"] for t in order if t["queue"] is not None}
    by_queue: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        if op["queue"] is not None:
            by_queue[op["queue"]].append(op["start_us"])
    for starts in by_queue.values():
        starts.sort()
    flow_id = tally["waits"] + 1  # wait flows use ids 1..waits
    bells = (tl.get("doorbells") or {}).get("rows") or []
    unknown = 2 * len(order) + 1  # doorbells whose writer is not a registered thread
    if any(row[2] not in track for row in bells):
        yield _meta(PID_THREADS, unknown, "thread_name", "doorbells (writer not registered)")
    for queue, seq, writer, write_ns, dispatch_ns in bells:
        where = track.get(writer, unknown)
        tally["timeline"]["doorbells"]["in_trace"] += 1
        ts = us(write_ns)
        delay = None if dispatch_ns is None else (dispatch_ns - write_ns) / 1e3
        args = {"queue": queue, "seq": seq, "writer_tid": writer, "submit_to_dispatch_us": delay}
        yield {
            "ph": "i",
            "s": "t",
            "name": f"doorbell q{queue}",
            "cat": "doorbell",
            "pid": PID_THREADS,
            "tid": where,
            "ts": ts,
            "args": args,
        }
        worker = worker_of.get(queue)
        if dispatch_ns is None or worker is None:
            continue
        at = us(dispatch_ns)
        yield {
            "ph": "i",
            "s": "t",
            "name": f"dispatch q{queue}",
            "cat": "dispatch",
            "pid": PID_THREADS,
            "tid": track[worker],
            "ts": at,
            "args": args,
        }
        yield from _flow(
            flow_id,
            f"doorbell q{queue} → dispatch",
            (PID_THREADS, where, ts),
            (PID_THREADS, track[worker], at),
        )
        flow_id += 1
        starts = by_queue.get(queue) or []
        k = bisect.bisect_left(starts, at)
        if k < len(starts):  # the first op its worker started after the dispatch
            yield from _flow(
                flow_id,
                f"dispatch q{queue} → op",
                (PID_THREADS, track[worker], at),
                (PID_QUEUES, queue + 1, starts[k]),
            )
            flow_id += 1


def memory_timeline_events(result: JsonObject, tally: JsonObject) -> Iterator[JsonObject]:
    """Process 5: page faults per ms (a counter), reclaim episodes per thread (slices) and page
    migrations (instants) from the hostmem family's records (--ebpf-memory-trace)."""
    families = (result.get("ebpf_memory_metrics") or {}).get("families") or {}
    tl = ((families.get("hostmem") or {}).get("metrics") or {}).get("timeline")
    origin = (result.get("metadata") or {}).get("window_start_monotonic_ns")
    if not isinstance(tl, dict) or not isinstance(origin, int):
        return
    tally["memory_timeline"] = {
        kind: {k: (tl.get(kind) or {}).get(k) for k in ("seen", "kept", "dropped")} for kind in MEMORY_KINDS
    }
    yield _meta(PID_MEMORY, None, "process_name", "host memory (eBPF)")
    yield _meta(PID_MEMORY, 1, "thread_name", "page migrations (machine-wide)")
    start = tl.get("bucket_origin_monotonic_ns")
    faults = (tl.get("page_faults_per_ms") or {}).get("rows") or []
    if isinstance(start, int) and faults:
        base, last = (start - origin) / 1e3, faults[0][0] - 1
        for ms, count in faults:
            if ms > last + 1:  # an empty millisecond after a busy one
                yield _fault_counter(base + (last + 1) * 1e3, 0)
            yield _fault_counter(base + ms * 1e3, count)
            last = ms
        yield _fault_counter(base + (last + 1) * 1e3, 0)
    tracks: dict[int, int] = {}
    for kind in ("direct_reclaim", "memcg_reclaim"):
        for tid, begin, end, *_ in (tl.get(kind) or {}).get("rows") or []:
            if tid not in tracks:
                tracks[tid] = len(tracks) + 2
                yield _meta(PID_MEMORY, tracks[tid], "thread_name", f"reclaim tid {tid}")
            yield {
                "ph": "X",
                "name": kind.replace("_", " "),
                "cat": "memory",
                "pid": PID_MEMORY,
                "tid": tracks[tid],
                "ts": (begin - origin) / 1e3,
                "dur": (end - begin) / 1e3,
            }
    for ts, pages in (tl.get("migrations") or {}).get("rows") or []:
        yield {
            "ph": "i",
            "s": "t",
            "name": "page migration",
            "cat": "memory",
            "pid": PID_MEMORY,
            "tid": 1,
            "ts": (ts - origin) / 1e3,
            "args": {"pages": pages},
        }


def gpu_memory_timeline_events(result: JsonObject, tally: JsonObject) -> Iterator[JsonObject]:
    """Process 6: AMD GPU memory from the amdmem family's records: BO move hops as instants on
    one track (every BO of the GPU), KFD evict/restore worker runs as slices per process and
    kind, and every KFD event as an instant on its process's track."""
    families = (result.get("ebpf_memory_metrics") or {}).get("families") or {}
    tl = ((families.get("amdmem") or {}).get("metrics") or {}).get("timeline")
    origin = (result.get("metadata") or {}).get("window_start_monotonic_ns")
    if not isinstance(tl, dict) or not isinstance(origin, int):
        return
    moves, kfd = tl.get("bo_moves") or {}, tl.get("kfd") or {}
    tally["gpu_memory_timeline"] = {
        name: ({k: part.get(k) for k in ("seen", "kept", "dropped")} if part else None)
        for name, part in (("bo_moves", tl.get("bo_moves")), ("kfd", tl.get("kfd")))
    }
    yield _meta(PID_GPU_MEMORY, None, "process_name", "GPU memory (eBPF: amdgpu, amdkfd)")
    if moves.get("rows"):
        yield _meta(PID_GPU_MEMORY, 1, "thread_name", "BO moves (every BO of the GPU)")
    for ns, old, new, traced, size in moves.get("rows") or []:
        yield {
            "ph": "i",
            "s": "t",
            "name": f"BO {mm.placement_name(old)}→{mm.placement_name(new)}",
            "cat": "gpu_memory",
            "pid": PID_GPU_MEMORY,
            "tid": 1,
            "ts": (ns - origin) / 1e3,
            "args": {"bytes": size, "in_traced_process": bool(traced)},
        }
    tracks: dict[tuple[int, str], int] = {}

    def track(ident: int, what: str) -> Iterator[JsonObject]:
        if (ident, what) not in tracks:
            tracks[(ident, what)] = len(tracks) + 2
            yield _meta(PID_GPU_MEMORY, tracks[(ident, what)], "thread_name", f"KFD process {ident} {what}")

    for ident, what, begin, end in kfd.get("slices") or []:
        yield from track(ident, what)
        yield {
            "ph": "X",
            "name": f"KFD {what}",
            "cat": "gpu_memory",
            "pid": PID_GPU_MEMORY,
            "tid": tracks[(ident, what)],
            "ts": (begin - origin) / 1e3,
            "dur": (end - begin) / 1e3,
        }
    for ns, name, ident in kfd.get("events") or []:
        yield from track(ident, "events")
        yield {
            "ph": "i",
            "s": "t",
            "name": f"KFD {name}",
            "cat": "gpu_memory",
            "pid": PID_GPU_MEMORY,
            "tid": tracks[(ident, "events")],
            "ts": (ns - origin) / 1e3,
            "args": {"kfd_process_id": ident},
        }


def _trailer(result: JsonObject, ops: list[JsonObject], tally: dict[str, int]) -> JsonObject:
    """The trace's top-level fields besides its events (known once every event was made)."""
    table = result.get("op_intervals") or {}
    return {
        "displayTimeUnit": "ms",
        "otherData": {
            "workload": result.get("workload_name"),
            "streams": result.get("stream_count"),
            "clock": "µs since the measurement-window start (op_intervals clock)",
            "window_start_monotonic_ns": (result.get("metadata") or {}).get("window_start_monotonic_ns"),
            "ops_in_trace": len(ops),
            "ops_measured": table.get("total_ops"),
            "waits_in_trace": tally["waits"],
            "truncated": bool(table.get("truncated")),
            "ebpf_timeline": tally.get("timeline"),
            "ebpf_memory_timeline": tally.get("memory_timeline"),
            "ebpf_gpu_memory_timeline": tally.get("gpu_memory_timeline"),
            "ebpf_gpu_runtime_timeline": tally.get("gpu_runtime_timeline"),
            "note": None if ops else "the run recorded no op intervals",
        },
    }


def build_trace(result: JsonObject) -> JsonObject:
    """The trace-event object for one run result (uses its `op_intervals` table)."""
    ops, _ = _op_rows(result)
    tally: dict[str, int] = {}
    events = list(_trace_events(result, ops, tally))
    return {"traceEvents": events, **_trailer(result, ops, tally)}


def trace_chunks(result: JsonObject, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
    """`build_trace(result)` as UTF-8 JSON in pieces of about `chunk_bytes`, one event per line,
    each event encoded as it is made: what `--trace-out` writes, in memory that does not grow
    with the trace (NaN/Infinity refused, as in every file aorta writes)."""
    ops, _ = _op_rows(result)
    tally: dict[str, int] = {}
    encode = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
    parts, size, sep = ['{"traceEvents":[\n'], 0, ""
    for event in _trace_events(result, ops, tally):
        text = sep + encode(event)
        sep = ",\n"
        parts.append(text)
        size += len(text)
        if size >= chunk_bytes:
            yield "".join(parts).encode("utf-8")
            parts, size = [], 0
    trailer = encode(_trailer(result, ops, tally))
    parts.append("\n]," + trailer[1:] + "\n")
    yield "".join(parts).encode("utf-8")


def _fault_counter(ts_us: float, faults: int) -> JsonObject:
    """One sample of the host page-fault counter track (faults in that millisecond)."""
    return {
        "ph": "C",
        "name": "page faults per ms",
        "pid": PID_MEMORY,
        "ts": ts_us,
        "args": {"faults": faults},
    }

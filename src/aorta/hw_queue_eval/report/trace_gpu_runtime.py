"""The trace's process 7, "GPU runtime (eBPF uprobes)": the gpu_runtime family's per-call records.

One track per stream handle (named by the harness's stream index where it created the stream,
else by handle; calls with no stream argument, device and event syncs, on a track of their own),
one complete slice per runtime call from its entry to its return (uprobe → uretprobe), with the
api, tid, stream, bytes and copy kind (collectives: elements and datatype) and the event handle
of event records and stream waits. A flow arrow goes from an event record to each stream wait
that consumed it (the same event handle, the last record of it before the wait).

Slices of one track never overlap: the family keeps only a thread's outermost call (a nested
one is counted as `nested`), and calls that other threads made on the same stream while one was
still running go to the stream's next lane (a track of their own, "lane 2", …), first fit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aorta.common.jsontypes import JsonObject

PID_GPU_RUNTIME = 7
FLOW_ID_BASE = 1 << 32  # above every other flow id of the trace (those count from 1)
KINDS = ("launch", "copy", "collective", "sync", "event_record", "stream_wait")
NO_STREAM = "no stream"


def gpu_runtime_timeline(result: JsonObject) -> JsonObject | None:
    """The gpu_runtime family's per-call records of a traced run, None when it kept none."""
    families = (result.get("ebpf_queue_metrics") or {}).get("families") or {}
    found = ((families.get("gpu_runtime") or {}).get("metrics") or {}).get("timeline")
    return found if isinstance(found, dict) else None


def calls(tl: JsonObject) -> list[JsonObject]:
    """Every finished call of every kind as a dict of the record's columns plus `call_kind`."""
    columns = tl.get("columns") or []
    out = []
    for kind in KINDS:
        for row in ((tl.get("kinds") or {}).get(kind) or {}).get("rows") or []:
            call = dict(zip(columns, row, strict=True))
            if call.get("end_ns") is not None:
                call["call_kind"] = kind
                out.append(call)
    out.sort(key=lambda c: (c["start_ns"], c["tid"]))
    return out


def lanes(rows: list[JsonObject]) -> list[int]:
    """A lane per call (rows sorted by start): the first lane whose last call ended by its start."""
    ends: list[int] = []
    out = []
    for call in rows:
        lane = next((i for i, end in enumerate(ends) if end <= call["start_ns"]), len(ends))
        if lane == len(ends):
            ends.append(call["end_ns"])
        else:
            ends[lane] = call["end_ns"]
        out.append(lane)
    return out


def _stream_label(handle: str | None, index: int | None) -> str:
    if handle is None:
        return f"{NO_STREAM} (device / event syncs)"
    return f"stream {index} ({handle})" if index is not None else f"stream {handle}"


def gpu_runtime_events(result: JsonObject, tally: JsonObject) -> Iterator[JsonObject]:
    """Process 7's events on the ops' clock (µs since window_start_monotonic_ns); what it drew,
    and each kind's seen / kept / dropped, into tally["gpu_runtime_timeline"]."""
    tl = gpu_runtime_timeline(result)
    origin = (result.get("metadata") or {}).get("window_start_monotonic_ns")
    if tl is None or not isinstance(origin, int):
        return

    def us(ns: int) -> float:
        return (ns - origin) / 1e3

    kinds = tl.get("kinds") or {}
    summary: JsonObject = {
        kind: {
            **{
                k: (kinds.get(kind) or {}).get(k)
                for k in ("seen", "kept", "dropped", "nested", "unfinished", "complete_until_ns")
            },
            "in_trace": 0,
        }
        for kind in KINDS
    }
    for part in summary.values():
        until = part["complete_until_ns"]
        part["complete_until_us"] = us(until) if isinstance(until, int) else None
    index = {s["handle"]: s.get("stream_index") for s in tl.get("streams") or []}
    rows = calls(tl)
    by_stream: dict[str | None, list[JsonObject]] = {}
    for call in rows:
        by_stream.setdefault(call["stream"], []).append(call)
    order = sorted(
        by_stream,
        key=lambda h: (h is None, index.get(h) is None if h else True, index.get(h) or 0, int(h or "0", 16)),
    )
    yield {
        "ph": "M",
        "pid": PID_GPU_RUNTIME,
        "name": "process_name",
        "args": {"name": "GPU runtime (eBPF uprobes)"},
    }
    track_of: dict[int, int] = {}  # id(call) → track id
    next_track = 1
    for handle in order:
        stream_calls = by_stream[handle]
        lane_of = lanes(stream_calls)
        first = next_track
        for lane in range(max(lane_of) + 1):
            name = _stream_label(handle, index.get(handle) if handle else None)
            if lane:
                name += f" · lane {lane + 1} (calls overlapping in time from other threads)"
            for meta, args in (
                ("thread_name", {"name": name}),
                ("thread_sort_index", {"sort_index": next_track}),
            ):
                yield {"ph": "M", "pid": PID_GPU_RUNTIME, "tid": next_track, "name": meta, "args": args}
            next_track += 1
        for call, lane in zip(stream_calls, lane_of, strict=True):
            track_of[id(call)] = first + lane
    for call in rows:
        summary[call["call_kind"]]["in_trace"] += 1
        yield {
            "ph": "X",
            "name": call["api"],
            "cat": "gpu_runtime",
            "pid": PID_GPU_RUNTIME,
            "tid": track_of[id(call)],
            "ts": us(call["start_ns"]),
            "dur": (call["end_ns"] - call["start_ns"]) / 1e3,
            "args": {
                "api": call["api"],
                "call_kind": call["call_kind"],
                "tid": call["tid"],
                "stream": call["stream"],
                "stream_index": index.get(call["stream"]) if call["stream"] else None,
                "bytes": call.get("bytes"),
                "kind": call.get("kind"),
                "elements": call.get("elements"),
                "event": call.get("event"),
                "host_call_us": (call["end_ns"] - call["start_ns"]) / 1e3,
            },
        }
    flows: dict[str, int] = {}
    yield from record_wait_flows(rows, track_of, summary["event_record"]["complete_until_ns"], flows, us)
    tally["gpu_runtime_timeline"] = {
        "kinds": summary,
        "cap_per_thread": tl.get("cap_per_thread"),
        "tracks": next_track - 1,
        **flows,
    }


def record_wait_flows(
    rows: list[JsonObject],
    track_of: dict[int, int],
    records_complete_until: int | None,
    counts: dict[str, int],
    us: Any,
) -> Iterator[JsonObject]:
    """A flow arrow from each stream wait's producer record (the last record of the same event
    handle that entered before the wait did) to the wait; none where the records were capped
    before the wait (a dropped record may be the true producer) or none was recorded in the
    window. Counts both into `counts`."""
    last: dict[str, JsonObject] = {}
    counts.update({"flows": 0, "waits_without_record": 0, "waits_after_records_dropped": 0})
    for call in rows:  # by entry time
        event = call.get("event")
        if call["call_kind"] == "event_record" and event is not None:
            last[event] = call
        elif call["call_kind"] == "stream_wait" and event is not None:
            if records_complete_until is not None and call["start_ns"] > records_complete_until:
                counts["waits_after_records_dropped"] += 1
                continue
            src = last.get(event)
            if src is None:
                counts["waits_without_record"] += 1
                continue
            flow_id = FLOW_ID_BASE + counts["flows"]
            counts["flows"] += 1
            name = f"event {event}: record → wait"
            common = {"id": flow_id, "name": name, "cat": "gpu_runtime_event", "pid": PID_GPU_RUNTIME}
            yield {"ph": "s", **common, "tid": track_of[id(src)], "ts": us(src["start_ns"])}
            yield {"ph": "f", "bp": "e", **common, "tid": track_of[id(call)], "ts": us(call["start_ns"])}

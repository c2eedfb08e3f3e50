"""gpu_runtime's per-call records for --trace-out: entry and return time of each runtime call.

Rendered only when the tracer asked for a timeline (TraceTarget.timeline_events > 0, i.e. run /
sweep / ebpf-attach with --trace-out) and never in a node program: extra uprobe/uretprobe blocks
on the same entry points as gpu_runtime_bpf's, so the default program and its cost are unchanged.

Per call (outermost calls of a thread only: a timeline-probed entry point reached from inside
another one counts as `nested`, never as a slice): entry ns, return ns, api, stream handle, tid,
and for copies bytes and kind, for collectives elements and datatype, for event records and
stream waits the event handle.

Bounded per thread, not per CPU: a uprobe's BPF program runs with migration disabled but can be
preempted (bpf_prog_run_array_uprobe, kernel ≥ 6.0), so two threads on one CPU may interleave in
a per-CPU slot index (timeline.py's design, safe for tracepoints that run with preemption off); a
thread's own probes never interleave, so a per-thread index needs no atomics and its count is
exact. A kind `k` of thread `tid` keeps its first `cap` calls of the window in slots
[tid, k, i] of @gpu_runtime_tl = (entry ns, stream, api | arg << 16, bytes / elements / event)
and @gpu_runtime_tle = return ns; @gpu_runtime_tln[tid, k] counts every call (exact `seen`).
Every map has the program's key limit, sized before it loads (mapcap.MAP_KEYS_MAX); more slots
than that (more than keys_max / cap thread-kinds) are reported as dropped map updates by mapcap,
and `dropped` stays exact (seen minus the slots read back).
"""

from __future__ import annotations

from typing import NamedTuple

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import CollectContext
from aorta.ebpf.probes.gpu_runtime_apis import (
    API_BY_ID,
    MEMCPY_KINDS,
    NCCL_TYPE_NAMES,
    NCCL_TYPE_SIZES,
    Api,
    P,
)
from aorta.ebpf.probes.gpu_runtime_metrics import handle_indices, hex_handle

U64 = 2**64 - 1
INT32 = "0xffffffff"
TL = f"{P}tl"
# kind → (id in the maps, the roles whose calls it holds)
KINDS: dict[str, tuple[int, tuple[str, ...]]] = {
    "launch": (1, ("launch", "graph_launch")),
    "copy": (2, ("copy", "memset")),
    "collective": (3, ("collective",)),
    "sync": (4, ("sync_stream", "sync_device", "sync_event")),
    "event_record": (5, ("event_record",)),
    "stream_wait": (6, ("stream_wait",)),
}
KIND_OF_ROLE = {role: (name, ident) for name, (ident, roles) in KINDS.items() for role in roles}
KIND_NAMES = {ident: name for name, (ident, _) in KINDS.items()}
THREAD_SHARE = 16  # a thread's kind keeps timeline_events / THREAD_SHARE calls (1024 by default)


class Call(NamedTuple):
    """One call kept, a row of the result's `rows` (COLUMNS, in this order): entry and return ns
    (None: no return seen), its stream handle (None: the API takes none), bytes and kind
    (copy: direction; collective: datatype), elements, the event handle."""

    tid: int
    start_ns: int
    end_ns: int | None
    api: str
    stream: str | None
    bytes: int | None
    kind: str | None
    elements: int | None
    event: str | None


COLUMNS = Call._fields


def cap_per_thread(timeline_events: int) -> int:
    """Calls kept per thread and kind (the first ones of the window)."""
    return max(1, int(timeline_events) // THREAD_SHARE)


def wanted(api: Api) -> bool:
    """Whether the timeline records this entry point's calls."""
    return api.role in KIND_OF_ROLE


def _arg(api: Api) -> str | None:
    """The bpftrace expression packed above the api id (copy kind / collective datatype)."""
    if api.role in ("copy", "memset", "collective") and api.kind is not None:
        return f"(uint64)(({api.kind}) & {INT32})"
    return None


def _extra(api: Api) -> str | None:
    """The second value kept per call: bytes or elements, or the event handle."""
    if api.role in ("copy", "memset", "collective"):
        return api.size
    if api.role in ("event_record", "stream_wait"):
        return api.event
    return None


def blocks(api: Api, where: str, pf: str, gate: str, cap: int) -> list[str]:
    """Entry and return blocks recording `api`'s calls (only for roles in KINDS; the argument
    expressions come from the fixed table in gpu_runtime_apis, never from input).

    Per thread one state word @gpu_runtime_tlc[tid] = depth << 56 | kind << 32 | slot + 1 (0:
    the outer call keeps no slot), so an outer call costs one state update at entry and one
    at return besides its count and its slot."""
    if not wanted(api):
        return []
    _, k = KIND_OF_ROLE[api.role]
    packed = f"(uint64){api.ident}" + (f" | ({_arg(api)} << 16)" if _arg(api) else "")
    extra = _extra(api)
    value = f"(nsecs, (uint64)({api.stream or '0'}), {packed}, (uint64)({extra or '0'}))"
    entry = "\n".join(
        [
            f"uprobe:{where}",
            f"/{pf}/",
            "{",
            f"  $c = {TL}c[tid];",
            "  $d = $c >> 56;",
            f"  if ($d == 0 && {gate}) {{",
            f"    $n = {TL}n[tid, (uint64){k}];",
            f"    {TL}n[tid, (uint64){k}] = $n + 1;",
            f"    if ($n < {int(cap)}) {{",
            f"      {TL}[tid, (uint64){k}, $n] = {value};",
            f"      $c = ((uint64){k} << 32) | ($n + 1);",
            "    }",
            "  }",
            f"  if ($d > 0 && {gate}) {{ {TL}nest[tid, (uint64){k}] = count(); }}",
            f"  {TL}c[tid] = $c + (1 << 56);",
            "}",
        ]
    )
    ret = "\n".join(
        [
            f"uretprobe:{where}",
            f"/{pf}/",
            "{",
            f"  $c = {TL}c[tid];",
            "  $d = $c >> 56;",
            f"  if ($d > 1) {{ {TL}c[tid] = $c - (1 << 56); }}",
            "  if ($d == 1) {",
            f"    delete({TL}c[tid]);",
            f"    $i = $c & {INT32};",
            f"    if ($i != 0) {{ {TL}e[tid, ($c >> 32) & 0xff, $i - 1] = nsecs; }}",
            "  }",
            "}",
        ]
    )
    return [entry, ret]


def end_code() -> list[str]:
    """END statements: the per-thread call state is not a result."""
    return [f"clear({TL}c);"]


def _keys3(maps: JsonObject, name: str) -> dict[tuple[int, int, int], int]:
    out: dict[tuple[int, int, int], int] = {}
    for key, value in hist.keyed(maps.get(name)).items():
        parts = key.split(",")
        if len(parts) == 3 and isinstance(value, int):
            out[(int(parts[0]), int(parts[1]) & U64, int(parts[2]) & U64)] = value & U64
    return out


def _slots(maps: JsonObject) -> dict[tuple[int, int, int], tuple[int, int, int, int]]:
    """@gpu_runtime_tl: slot → (entry ns, stream, api | arg << 16, bytes / elements / event)."""
    out: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
    for key, value in hist.keyed(maps.get(TL)).items():
        parts = key.split(",")
        if len(parts) == 3 and isinstance(value, list) and len(value) == 4:
            start, stream, packed, x = (int(v) & U64 for v in value)
            out[(int(parts[0]), int(parts[1]) & U64, int(parts[2]) & U64)] = (start, stream, packed, x)
    return out


def _keys2(maps: JsonObject, name: str) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for key, value in hist.keyed(maps.get(name)).items():
        parts = key.split(",")
        if len(parts) == 2 and isinstance(value, int):
            out[(int(parts[0]), int(parts[1]) & U64)] = value
    return out


def _row(kind: str, tid: int, start: int, end: int | None, packed: int, stream: int, x: int | None) -> Call:
    """One call as COLUMNS."""
    api_id, arg = packed & 0xFFFF, packed >> 16
    api = API_BY_ID.get(api_id)
    nbytes: int | None = None
    what: str | None = None
    elements: int | None = None
    event: str | None = None
    if kind == "copy":
        nbytes = x
        what = api.direction if api is not None and api.direction else MEMCPY_KINDS.get(arg, f"kind {arg}")
    elif kind == "collective":
        elements = x
        size = NCCL_TYPE_SIZES.get(arg)
        nbytes = None if size is None or x is None else x * size
        what = NCCL_TYPE_NAMES.get(arg, f"type {arg}")
    elif kind in ("event_record", "stream_wait") and x is not None:
        event = hex_handle(x)
    no_stream = api is not None and api.stream is None
    return Call(
        tid,
        start,
        end,
        api.name if api is not None else f"api {api_id}",
        None if no_stream else hex_handle(stream),
        nbytes,
        what,
        elements,
        event,
    )


def collect(maps: JsonObject, context: CollectContext, cap: int) -> JsonObject:
    """Per kind: the calls kept (rows of COLUMNS, by entry time) with `seen` (exact), `kept`,
    `dropped`, `nested`, `unfinished` (kept, no return seen before bpftrace stopped) and
    `complete_until_ns` (every call of the kind that entered before it is kept; null: none
    dropped); the stream handles with the harness's index where it created them."""
    slots, ends = _slots(maps), _keys3(maps, f"{TL}e")
    seen, nested = _keys2(maps, f"{TL}n"), _keys2(maps, f"{TL}nest")
    kinds: JsonObject = {}
    handles: set[str] = set()
    for name, (k, _) in KINDS.items():
        rows = [
            _row(name, key[0], start, ends.get(key), packed, stream, x)
            for key, (start, stream, packed, x) in slots.items()
            if key[1] == k
        ]
        rows.sort(key=lambda r: (r.start_ns, r.tid))
        n_seen = sum(v for (_, kk), v in seen.items() if kk == k)
        # a thread that dropped calls is complete up to its last kept entry
        limits = []
        for (tid, kk), v in seen.items():
            if kk == k and v > cap:
                last = max((r.start_ns for r in rows if r.tid == tid), default=None)
                if last is not None:
                    limits.append(last)
        handles |= {r.stream for r in rows if r.stream is not None}
        kinds[name] = {
            "rows": [list(r) for r in rows],
            "seen": n_seen,
            "kept": len(rows),
            "dropped": n_seen - len(rows),
            "nested": sum(v for (_, kk), v in nested.items() if kk == k),
            "unfinished": sum(1 for r in rows if r.end_ns is None),
            "complete_until_ns": min(limits) if limits else None,
        }
    by_handle = handle_indices(context.stream_handles)
    return {
        "clock": "CLOCK_MONOTONIC ns (bpftrace nsecs), the clock of op_intervals",
        "columns": list(COLUMNS),
        "kinds": kinds,
        "streams": [{"handle": h, "stream_index": by_handle.get(int(h, 16))} for h in sorted(handles)],
        "cap_per_thread": cap,
        "meaning": (
            "the first calls of each kind per thread in the window (outermost calls, entry → "
            "return); seen is the exact in-kernel count, dropped = seen - kept"
        ),
    }

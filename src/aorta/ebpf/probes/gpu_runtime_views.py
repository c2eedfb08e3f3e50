"""gpu_runtime's DMA, collective and stream-ordering views, from the printed maps.

* copies: per stream and direction, calls, bytes (the size arguments) and host call time;
* collectives: per stream and NCCL/RCCL op, calls, elements, bytes (count x datatype size);
* stream graph: producer stream → consumer stream edges from EventRecord / StreamWaitEvent.
A view whose entry points were not probed says why (`views`); one probed that saw nothing is empty.
Rows are summed in dataclasses, labelled with the harness's stream index (`join_views`) and
written into the metrics with `to_json()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.gpu_runtime_apis import (
    API_BY_ID,
    APIS,
    MEMCPY_KINDS,
    NCCL_TYPE_NAMES,
    NCCL_TYPE_SIZES,
    AttachedProbe,
    MissedProbe,
    P,
)
from aorta.ebpf.probes.gpu_runtime_metrics import api_name, hex_handle

U64 = 2**64 - 1
LIB_FILES = {
    "hip": "libamdhip64",
    "hsa": "libhsa-runtime64",
    "cudart": "libcudart",
    "cuda": "libcuda",
    "nccl": "libnccl/librccl",
}
# --ebpf-gpu-runtime-views: view → the roles whose entry points it probes. `times` adds return
# probes to the entry points of the other views that have them (launch, copy, collective and sync
# call times; nesting caught across libraries; which stream's launch rang which doorbell).
SWITCHABLE_VIEWS: dict[str, tuple[str, ...]] = {
    "launches": ("launch", "graph_launch", "stream_create"),
    "times": (),
    "doorbells": ("queue_create", "doorbell"),
    "syncs": ("sync_stream", "sync_device", "sync_event"),
    "copies": ("copy", "memset"),
    "collectives": ("collective", "group"),
    "waits": ("event_record", "stream_wait"),
}
# on unless --ebpf-gpu-runtime-views says otherwise: every view whose probes add little to a call
# (bench/uprobe_cost_launch.py, docs/ebpf.md): times puts a return probe on every launch, copy,
# collective and sync, doorbells a second uprobe on every HIP launch, so both are opt-in
DEFAULT_VIEWS: tuple[str, ...] = ("launches", "syncs", "copies", "collectives", "waits")
ALL_VIEWS: tuple[str, ...] = tuple(SWITCHABLE_VIEWS)
SWITCHED_OFF = "not probed: switched off (--ebpf-gpu-runtime-views)"
# view in the result → the roles whose entry points feed it, the switchable view it belongs to
VIEW_ROLES = {
    "launches": (("launch",), "launches"),
    "graph_launches": (("graph_launch",), "launches"),
    "times": (("launch", "graph_launch", "copy", "memset", "collective", "sync_stream"), "times"),
    "doorbells": (("doorbell",), "doorbells"),
    "syncs": (("sync_stream", "sync_device", "sync_event"), "syncs"),
    "copies": (("copy", "memset"), "copies"),
    "collectives": (("collective", "group"), "collectives"),
    "stream_graph": (("event_record", "stream_wait"), "waits"),
}


def parse_views(text: str) -> tuple[str, ...]:
    """`--ebpf-gpu-runtime-views a,b` → the views in the table's order, each once; ValueError
    (one line naming the allowed views) for an unknown or empty list."""
    allowed = ", ".join(SWITCHABLE_VIEWS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"needs at least one of {allowed}, got {text[:40]!r}")
    for name in names:
        if name not in SWITCHABLE_VIEWS:
            raise ValueError(f"unknown view {name[:40]!r}: use {allowed}")
    return tuple(v for v in SWITCHABLE_VIEWS if v in names)


def probed_roles(views: tuple[str, ...]) -> set[str]:
    """The roles whose entry points these views probe."""
    return {role for v in views for role in SWITCHABLE_VIEWS[v]}


def keys(key: str, n: int) -> tuple[int, ...] | None:
    """An n-part printed key "a,b,c" as unsigned 64-bit ints (None when it has another shape)."""
    parts = key.split(",")
    if len(parts) != n:
        return None
    return tuple(int(p) & U64 for p in parts)


def _stats3(value: Any) -> dict[tuple[int, ...], tuple[int, int]]:
    """A map printed with three-part keys and stats() values → {(a, b, c): (count, total)}."""
    out: dict[tuple[int, ...], tuple[int, int]] = {}
    for k, v in hist.keyed(value).items():
        parts, st = keys(k, 3), hist.stats(v)
        if parts is not None and st is not None:
            out[parts] = st
    return out


def direction(api_id: int, kind: int) -> str:
    """A copy's direction: the API's own (peer, memset) or its kind argument's name."""
    api = API_BY_ID.get(api_id)
    if api is not None and api.direction:
        return api.direction
    return MEMCPY_KINDS.get(kind, f"kind {kind}")


@dataclass
class CallTimes:
    """Host time of the calls timed (entry → return; only with the times view)."""

    count: int = 0
    total_ns: int = 0

    def to_json(self) -> JsonObject:
        """`host_call_ms` and `host_call_avg_us` (null: no call timed)."""
        n, ns = self.count, self.total_ns
        return {"host_call_ms": ns / 1e6 if n else None, "host_call_avg_us": ns / n / 1e3 if n else None}


@dataclass
class CopyRow:
    """One (stream, direction)'s copies: calls, bytes, calls per API, host call time, and the
    harness's index of the stream (join_views; None: a stream it did not create)."""

    stream: str
    direction: str
    calls: int = 0
    bytes: int = 0
    by_api: dict[str, int] = field(default_factory=dict)
    times: CallTimes = field(default_factory=CallTimes)
    stream_index: int | None = None

    def to_json(self) -> JsonObject:
        """The row of the result's `copies`."""
        return {
            "stream": self.stream,
            "direction": self.direction,
            "calls": self.calls,
            "bytes": self.bytes,
            "by_api": self.by_api,
            **self.times.to_json(),
            "stream_index": self.stream_index,
        }


@dataclass
class CollectiveRow:
    """One (stream, NCCL/RCCL op)'s calls: elements, bytes (None with `bytes_reason` once a
    datatype of unknown size was seen), calls per datatype, host call time, the stream's index."""

    stream: str
    op: str
    calls: int = 0
    elements: int = 0
    bytes: int | None = 0
    datatypes: dict[str, int] = field(default_factory=dict)
    bytes_reason: str | None = None
    times: CallTimes = field(default_factory=CallTimes)
    stream_index: int | None = None

    def to_json(self) -> JsonObject:
        """The row of the result's `collectives` (`bytes_reason` only when bytes is unknown)."""
        row: JsonObject = {
            "stream": self.stream,
            "op": self.op,
            "calls": self.calls,
            "elements": self.elements,
            "bytes": self.bytes,
            "datatypes": self.datatypes,
        }
        if self.bytes_reason is not None:
            row["bytes_reason"] = self.bytes_reason
        return {**row, **self.times.to_json(), "stream_index": self.stream_index}


def copy_rows(maps: JsonObject) -> list[CopyRow]:
    """Per (stream, direction): calls, bytes, host call time, the APIs that made them."""
    rows: dict[tuple[int, str], CopyRow] = {}
    times = _stats3(maps.get(f"{P}copies_ns"))
    for (api_id, stream, kind), (calls, nbytes) in _stats3(maps.get(f"{P}copies")).items():
        way = direction(api_id, kind)
        row = rows.setdefault((stream, way), CopyRow(hex_handle(stream), way))
        name = api_name(api_id)
        row.calls += calls
        row.bytes += nbytes
        row.by_api[name] = row.by_api.get(name, 0) + calls
        n, ns = times.get((api_id, stream, kind), (0, 0))
        row.times.count += n
        row.times.total_ns += ns
    return [r for _, r in sorted(rows.items())]


def collective_rows(maps: JsonObject) -> list[CollectiveRow]:
    """Per (stream, op): calls, elements, bytes (null, with the reason, for an unknown datatype)."""
    rows: dict[tuple[int, str], CollectiveRow] = {}
    times = _stats3(maps.get(f"{P}colls_ns"))
    for (api_id, stream, dtype), (calls, elements) in _stats3(maps.get(f"{P}colls")).items():
        op = api_name(api_id)
        row = rows.setdefault((stream, op), CollectiveRow(hex_handle(stream), op))
        row.calls += calls
        row.elements += elements
        name = NCCL_TYPE_NAMES.get(dtype, f"type {dtype}")
        row.datatypes[name] = row.datatypes.get(name, 0) + calls
        if dtype not in NCCL_TYPE_SIZES:
            row.bytes = None
            row.bytes_reason = f"datatype {dtype} is not in ncclDataType_t (size unknown)"
        elif row.bytes is not None:
            row.bytes += elements * NCCL_TYPE_SIZES[dtype]
        n, ns = times.get((api_id, stream, dtype), (0, 0))
        row.times.count += n
        row.times.total_ns += ns
    return [r for _, r in sorted(rows.items())]


def group_calls(maps: JsonObject) -> dict[str, int]:
    """ncclGroupStart / ncclGroupEnd calls in the window."""
    out = {}
    for k, n in hist.keyed(maps.get(f"{P}groups")).items():
        if k and isinstance(n, int):
            ident = int(k) & U64
            out[api_name(ident)] = n
    return out


@dataclass
class StreamEdge:
    """Waits of a consumer stream on events last recorded on a producer stream, per API, with
    the harness's index of each stream (join_views)."""

    producer: str
    consumer: str
    waits: int = 0
    by_api: dict[str, int] = field(default_factory=dict)
    producer_index: int | None = None
    consumer_index: int | None = None

    def to_json(self) -> JsonObject:
        """The row of `stream_graph.edges`."""
        return asdict(self)  # the fields, in order, are the row


@dataclass
class UnknownProducerWaits:
    """Waits of a stream on events whose recording stream is not known."""

    consumer: str
    waits: int
    consumer_index: int | None = None

    def to_json(self) -> JsonObject:
        """The row of `stream_graph.waits_producer_unknown`."""
        return asdict(self)  # the fields, in order, are the row


@dataclass
class EventRecords:
    """Events recorded on a stream."""

    stream: str
    records: int
    stream_index: int | None = None

    def to_json(self) -> JsonObject:
        """The row of `stream_graph.event_records`."""
        return asdict(self)  # the fields, in order, are the row


@dataclass
class StreamGraph:
    """The stream-ordering view: producer → consumer edges, waits on an unknown producer, event
    records per stream."""

    edges: list[StreamEdge]
    waits_producer_unknown: list[UnknownProducerWaits]
    event_records: list[EventRecords]

    def to_json(self) -> JsonObject:
        """The result's `stream_graph`."""
        return {
            "edges": [e.to_json() for e in self.edges],
            "waits_producer_unknown": [w.to_json() for w in self.waits_producer_unknown],
            "event_records": [r.to_json() for r in self.event_records],
        }


def stream_graph(maps: JsonObject) -> StreamGraph:
    """Observed producer → consumer stream edges (waits on an event last recorded on the producer)."""
    edges: dict[tuple[int, int], StreamEdge] = {}
    for k, n in hist.keyed(maps.get(f"{P}edges")).items():
        parts = keys(k, 3)
        if parts is None or not isinstance(n, int):
            continue
        api_id, producer, consumer = parts
        e = edges.setdefault((producer, consumer), StreamEdge(hex_handle(producer), hex_handle(consumer)))
        e.waits += n
        name = api_name(api_id)
        e.by_api[name] = e.by_api.get(name, 0) + n
    unknown: dict[int, int] = {}
    for k, n in hist.keyed(maps.get(f"{P}wait_unknown")).items():
        parts = keys(k, 2)
        if parts is not None and isinstance(n, int):
            unknown[parts[1]] = unknown.get(parts[1], 0) + n
    records: dict[int, int] = {}
    for k, n in hist.keyed(maps.get(f"{P}records")).items():
        parts = keys(k, 2)
        if parts is not None and isinstance(n, int):
            records[parts[1]] = records.get(parts[1], 0) + n
    return StreamGraph(
        [edges[k] for k in sorted(edges)],
        [UnknownProducerWaits(hex_handle(s), n) for s, n in sorted(unknown.items())],
        [EventRecords(hex_handle(s), n) for s, n in sorted(records.items())],
    )


def view_status(
    attached: Sequence[AttachedProbe],
    not_attached: Sequence[MissedProbe],
    libs_missing: bool,
    views: tuple[str, ...] = DEFAULT_VIEWS,
) -> JsonObject:
    """Per view: the entry points probed, or why none was (never silently absent)."""
    roles = {a.name: a.role for a in APIS}
    libs = {a.name: a.lib for a in APIS}
    out: JsonObject = {}
    for view, (wanted, switch) in VIEW_ROLES.items():
        if switch not in views:
            out[view] = {"probed": [], "reason": SWITCHED_OFF}
            continue
        probed = sorted({a.api for a in attached if roles.get(a.api) in wanted})
        if probed:
            out[view] = {"probed": probed, "reason": None}
            continue
        kinds = sorted({libs[n] for n, r in roles.items() if r in wanted})
        absent = sorted({a.api for a in not_attached if roles.get(a.api) in wanted})
        if libs_missing or not absent:
            reason = f"no {' / '.join(LIB_FILES[k] for k in kinds)} mapped by the traced processes"
        else:
            reason = f"entry points not in the mapped libraries: {', '.join(absent)}"
        out[view] = {"probed": [], "reason": reason}
    return out


def probed_calls(maps: JsonObject, times: bool = True) -> dict[str, tuple[int, int]]:
    """Per kind of probe beyond launches, syncs and doorbells: (calls probed at entry + return,
    calls probed at entry only) in the window, for the probe cost (`times`: copies and
    collectives have their return probe)."""

    def calls(name: str) -> int:
        return sum(c for c, _ in _stats3(maps.get(f"{P}{name}")).values())

    def counts(*names: str) -> int:
        values = (n for name in names for n in hist.keyed(maps.get(f"{P}{name}")).values())
        return sum(n for n in values if isinstance(n, int))

    def pair(n: int) -> tuple[int, int]:
        return (n, 0) if times else (0, n)

    return {
        "copies": pair(calls("copies")),
        "collectives": pair(calls("colls")),
        "collective_groups": (0, counts("groups")),
        "event_records_and_waits": (0, counts("records", "edges", "wait_unknown")),
    }


def _index(by_handle: dict[int, int], handle: str) -> int | None:
    return by_handle.get(int(handle, 16))


def join_views(
    copies: list[CopyRow],
    collectives: list[CollectiveRow],
    graph: StreamGraph,
    by_handle: dict[int, int],
) -> JsonObject:
    """Label the copy, collective and stream-graph rows with the harness's stream index (the same
    handle → index join as the launch rows; null for a handle the harness did not create, e.g.
    torch's timing stream or a foreign job's streams, which stay named by handle). Returns, per
    view, how many rows were joined and how many were not."""
    rows: list[CopyRow | CollectiveRow | EventRecords] = [*copies, *collectives, *graph.event_records]
    for row in rows:
        row.stream_index = _index(by_handle, row.stream)
    for edge in graph.edges:
        edge.producer_index = _index(by_handle, edge.producer)
        edge.consumer_index = _index(by_handle, edge.consumer)
    for wait in graph.waits_producer_unknown:
        wait.consumer_index = _index(by_handle, wait.consumer)

    def tally(joined_rows: list[bool]) -> dict[str, int]:
        joined = sum(joined_rows)
        return {"joined": joined, "not_joined": len(joined_rows) - joined}

    return {
        "copies": tally([r.stream_index is not None for r in copies]),
        "collectives": tally([r.stream_index is not None for r in collectives]),
        "stream_edges": tally(
            [e.producer_index is not None and e.consumer_index is not None for e in graph.edges]
        ),
    }

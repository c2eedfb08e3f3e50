"""gpu_runtime's printed maps → per-stream and per-queue tables, summary, probe cost.

The printed maps and the metrics returned are JSON (`JsonObject`); the per-stream and per-queue
rows are summed in dataclasses and written out with `to_json()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import CollectContext, StreamHandle
from aorta.ebpf.probes.gpu_runtime_apis import API_BY_ID, AttachedProbe, P
from aorta.ebpf.probes.gpu_runtime_calibration import CLASS_MEANING, HitCosts

#: printed sync key "api,stream" → (calls, ns blocked; None: counted at entry only), None for a
#: value that is not a count or stats()
Syncs: TypeAlias = dict[str, tuple[int, int | None] | None]


def api_name(ident: int) -> str:
    """The entry point's name for a numeric map key (the number itself if unknown)."""
    return API_BY_ID[ident].name if ident in API_BY_ID else str(ident)


def _avg_us(total_ns: int, count: int) -> float | None:
    """Mean µs of `count` calls taking `total_ns` in all (None: no call)."""
    return total_ns / count / 1e3 if count else None


@dataclass
class StreamRow:
    """One stream handle's row of `streams`: launches (and graph launches) by API, launch-call
    latency sums, the doorbells its launches rang, stream syncs (calls, host ms blocked; None:
    not timed).

    `summed`: stream_rows summed it, so its JSON gives the graph launches' mean call time; a row
    that queue_rows adds later (a stream seen only ringing a doorbell) keeps the raw graph sums
    instead, as these rows always have. `launches_probed` / `syncs_probed` False: that view was
    off, its fields are null (syncs: only on summed rows)."""

    handle: str
    stream_index: int | None = None
    launches: int = 0
    graph_launches: int = 0
    by_api: dict[str, int] = field(default_factory=dict)
    latency_count: int = 0
    latency_total_ns: int = 0
    graph_latency_count: int = 0
    graph_latency_total_ns: int = 0
    queues: list[str] = field(default_factory=list)
    sync_calls: int = 0
    sync_blocked_ms: float | None = 0.0
    summed: bool = False
    launches_probed: bool = True
    syncs_probed: bool = True

    def to_json(self) -> JsonObject:
        """The row as the result's `streams` holds it."""
        launched = self.launches_probed
        row: JsonObject = {
            "handle": self.handle,
            "stream_index": self.stream_index,
            "launches": self.launches if launched else None,
            "graph_launches": self.graph_launches if launched else None,
            "by_api": self.by_api,
            "latency_count": self.latency_count,
            "latency_total_ns": self.latency_total_ns,
        }
        if not self.summed:
            row["graph_latency_count"] = self.graph_latency_count
            row["graph_latency_total_ns"] = self.graph_latency_total_ns
        row["launch_avg_us"] = _avg_us(self.latency_total_ns, self.latency_count)
        row["queues"] = self.queues
        row["sync_calls"] = self.sync_calls if self.syncs_probed else None
        row["sync_blocked_ms"] = self.sync_blocked_ms if self.syncs_probed else None
        if self.summed:
            row["graph_launch_avg_us"] = _avg_us(self.graph_latency_total_ns, self.graph_latency_count)
        return row


@dataclass
class QueueRow:
    """One doorbell signal's row of `queues`: its HSA queue (None: not seen created), how the
    doorbell became known, its rings and the rings per stream handle."""

    doorbell_signal: str
    queue: str | None
    queue_id: int | None
    source: str
    doorbell_rings: int = 0
    streams: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        """The row as the result's `queues` holds it."""
        return asdict(self)  # the fields, in order, are the row


def stream_rows(maps: JsonObject, syncs: Syncs, syncs_on: bool = True) -> dict[int, StreamRow]:
    """Per stream handle: launches by API, launch-call latency, stream syncs (`syncs`: key →
    (calls, ns blocked or None when not timed); `syncs_on`: the syncs view was probed, else the
    sync fields are null)."""
    per_stream: dict[int, StreamRow] = {}
    for (api_id, stream), n in pair_map(maps.get(f"{P}launches")).items():
        row = per_stream.setdefault(stream, StreamRow(hex_handle(stream)))
        if is_graph(api_id):
            row.graph_launches += n
        else:
            row.launches += n
        row.by_api[api_name(api_id)] = row.by_api.get(api_name(api_id), 0) + n
    for key, value in hist.keyed(maps.get(f"{P}launch_ns")).items():
        stats = hist.stats(value)
        if stats is not None:
            api_id, stream = split_key(key)
            row = per_stream.setdefault(stream, StreamRow(hex_handle(stream)))
            if is_graph(api_id):
                row.graph_latency_count += stats[0]
                row.graph_latency_total_ns += stats[1]
            else:
                row.latency_count += stats[0]
                row.latency_total_ns += stats[1]
    for key, sync in syncs.items():
        api_id, stream = split_key(key)
        if sync is not None and api_id in API_BY_ID and API_BY_ID[api_id].role == "sync_stream":
            row = per_stream.setdefault(stream, StreamRow(hex_handle(stream)))
            calls, blocked_ns = sync
            row.sync_calls += calls
            if blocked_ns is not None and row.sync_blocked_ms is not None:
                row.sync_blocked_ms += blocked_ns / 1e6
            else:  # a call not timed: the time blocked is unknown
                row.sync_blocked_ms = None
    for row in per_stream.values():
        row.summed = True
        row.syncs_probed = syncs_on
    return per_stream


def is_graph(ident: int) -> bool:
    """Whether the API id is a graph launch (one call = one graph, however many kernels in it)."""
    return ident in API_BY_ID and API_BY_ID[ident].role == "graph_launch"


def queue_rows(maps: JsonObject, per_stream: dict[int, StreamRow]) -> dict[int, QueueRow]:
    """Per doorbell signal: rings (all on queues seen created; in-launch ones on inferred queues),
    rings per stream; adds each stream's queues to its row."""
    queues = pair_map(maps.get(f"{P}queues"))  # (queue ptr, doorbell) → queue id
    doorbell_queue = {sig: (qptr, qid) for (qptr, sig), qid in queues.items()}
    rows: dict[int, QueueRow] = {}
    for key, n in hist.keyed(maps.get(f"{P}rings")).items():
        if key:
            sig = int(key) & (2**64 - 1)
            qptr, qid = doorbell_queue.get(sig, (None, None))
            rows[sig] = new_queue_row(sig, qptr, qid, "hsa_queue_create seen")
            rows[sig].doorbell_rings = int(n)
    for (stream, sig), n in pair_map(maps.get(f"{P}launch_rings")).items():
        if sig not in rows:
            qptr, qid = doorbell_queue.get(sig, (None, None))
            rows[sig] = new_queue_row(
                sig,
                qptr,
                qid,
                "inferred: stored during a launch call (queue created before attach)",
            )
        row = rows[sig]
        if row.source.startswith("inferred"):
            row.doorbell_rings += n  # only in-launch stores are known for these
        row.streams[hex_handle(stream)] = row.streams.get(hex_handle(stream), 0) + n
        stream_row = per_stream.setdefault(stream, StreamRow(hex_handle(stream)))
        stream_row.queues = sorted({*stream_row.queues, hex_handle(sig)})
    return rows


def other_syncs(syncs: Syncs) -> list[JsonObject]:
    """Device-wide and event syncs (no stream): calls and host time blocked."""
    out = []
    for key, stats in syncs.items():
        api_id, _ = split_key(key)
        if stats is not None and api_id in API_BY_ID and API_BY_ID[api_id].role != "sync_stream":
            blocked = stats[1] / 1e6 if stats[1] is not None else None
            out.append({"api": API_BY_ID[api_id].name, "calls": stats[0], "blocked_ms": blocked})
    return out


def family_summary(per_stream: dict[int, StreamRow], rings_used: list[str] | None) -> JsonObject:
    """The queue section's summary keys from this family (launches as submissions)."""
    lat_n = sum(r.latency_count for r in per_stream.values())
    lat_total = sum(r.latency_total_ns for r in per_stream.values())
    return {
        "source": "gpu_runtime",
        "total_submissions": sum(r.launches for r in per_stream.values()),
        "submissions_meaning": (
            "kernel launch calls into the GPU runtime (uprobes on the launch "
            "APIs, outermost calls, window only)"
        ),
        "total_dispatches": None,
        "dispatches_meaning": "not visible: the GPU's packet processor dispatches, not the host",
        "hw_rings_used": rings_used,
        "hw_rings_meaning": (
            "HSA doorbell signals rung in the window (one per hardware queue); "
            "null when no HSA runtime is probed (CUDA hides its channels)"
        ),
        "submit_to_dispatch_avg_us": None,
        "submit_to_dispatch_p99_us": None,
        "submit_to_dispatch_meaning": (
            "not measured by this family: see launch_call_avg_us (host launch cost)"
        ),
        "launch_call_avg_us": lat_total / lat_n / 1e3 if lat_n else None,
        "launch_call_total_ms": lat_total / 1e6 if lat_n else None,
        "launch_call_meaning": "uprobe entry → uretprobe return of launch calls (host time)",
    }


def split_key(key: str) -> tuple[int, int]:
    """A two-part printed key "a,b" as unsigned 64-bit ints."""
    a, b = key.split(",")
    return int(a) & (2**64 - 1), int(b) & (2**64 - 1)


def pair_map(value: Any) -> dict[tuple[int, int], int]:
    """A two-key map printed as {"a,b": n} → {(a, b): n} (unsigned)."""
    return {split_key(k): n for k, n in hist.keyed(value).items() if k.count(",") == 1 and isinstance(n, int)}


def hex_handle(value: int) -> str:
    """A stream/queue/signal handle as unsigned hex (how runtimes and debuggers print them)."""
    return f"0x{value & (2**64 - 1):x}"


def new_queue_row(sig: int, qptr: int | None, qid: int | None, source: str) -> QueueRow:
    """An empty per-doorbell row; `source` says how the doorbell became known."""
    return QueueRow(hex_handle(sig), hex_handle(qptr) if qptr else None, qid, source)


def handle_indices(handles: Sequence[StreamHandle]) -> dict[int, int]:
    """The harness's streams: runtime handle (unsigned) → stream index (GPU backend's `cuda_stream`)."""
    return {int(h.handle) & (2**64 - 1): int(h.stream) for h in handles}


def join_streams(per_stream: dict[int, StreamRow], handles: Sequence[StreamHandle]) -> JsonObject:
    """Label eBPF stream rows with the harness's stream index (GPU backend's `cuda_stream`)."""
    by_handle = handle_indices(handles)
    for handle, index in by_handle.items():
        if handle in per_stream:
            per_stream[handle].stream_index = index
    return {
        "harness_streams": len(by_handle),
        "matched": sum(1 for h in by_handle if h in per_stream and per_stream[h].launches),
        "ebpf_streams_not_in_harness": sum(
            1 for h, r in per_stream.items() if h not in by_handle and r.launches
        ),
    }


# kind of probe in probe_cost → the API roles whose calls it counts
KIND_ROLES = {
    "launches": ("launch",),
    "graph_launches": ("graph_launch",),
    "syncs": ("sync_stream", "sync_device", "sync_event"),
    "doorbell_rings": ("doorbell",),
    "copies": ("copy", "memset"),
    "collectives": ("collective",),
    "collective_groups": ("group",),
    "event_records_and_waits": ("event_record", "stream_wait"),
}


def kind_classes(attached: Sequence[AttachedProbe]) -> dict[str, list[str]]:
    """Per kind of probe, the entry-instruction classes of the functions probed for it."""
    role = {a.name: a.role for a in API_BY_ID.values()}
    out: dict[str, set[str]] = {}
    for entry in attached:
        kind = next((k for k, roles in KIND_ROLES.items() if role.get(entry.api) in roles), None)
        if kind is not None and entry.entry_instruction:
            out.setdefault(kind, set()).add(str(entry.entry_instruction))
    return {k: sorted(v) for k, v in out.items()}


def _class_costs(start: HitCosts) -> dict[str, tuple[float | None, float | None]]:
    """Per entry-instruction class: (ns per entry hit, ns per entry + return pair), None unknown."""
    ret = start.return_ns
    out: dict[str, tuple[float | None, float | None]] = {}
    for cls, ns in start.entry_ns.items():
        e = float(ns) if ns is not None else None
        pair = e + float(ret) if e is not None and ret is not None else None
        out[str(cls)] = (e, pair)
    return out


@dataclass(frozen=True)
class KindCost:
    """One kind of probe's share of the probe cost: calls, uprobe hits, the entry-instruction
    classes charged, host ms spent in its hits (None: a cost needed is unknown)."""

    calls: int
    hits: int
    entry_instruction: str | None
    probe_time_ms: float | None

    def to_json(self) -> JsonObject:
        """The row of `probe_cost.by_kind`."""
        return asdict(self)  # the fields, in order, are the row


def probe_cost(
    context: CollectContext, calls: dict[str, tuple[int, int]], classes: dict[str, list[str]]
) -> JsonObject:
    """uprobe cost per launch, per kind of probe and as a share of the window, from costs timed
    right before the window on calibration probes of each entry-instruction class
    (gpu_runtime_calibration).

    `calls`: kind → (calls probed at entry and return, calls probed at entry only) in the window;
    `classes`: kind → the entry-instruction classes of its probed functions (several: the dearer
    one is charged, an upper bound). "launches" and "doorbell_rings" give the cost per launch.
    """
    start = context.edges("gpu_runtime").get("start")  # HitCosts, or an error a snapshot raised
    costs = _class_costs(start) if isinstance(start, HitCosts) else {}
    if not costs:
        return {
            "entry_probe_us": None,
            "entry_return_pair_us": None,
            "reason": (
                "probe costs were not measured (no window start, or nothing was probed "
                "when it opened: runtimes loaded later)"
            ),
        }

    def cost(kind: str, paired: bool) -> float | None:
        known = [costs.get(c, (None, None))[1 if paired else 0] for c in classes.get(kind, [])]
        return None if not known or None in known else max(k for k in known if k is not None)

    def spent(kind: str, paired_calls: int, entry_calls: int) -> float | None:
        """ns spent in `kind`'s hits (None: a cost needed is unknown)."""
        pair, entry = cost(kind, True), cost(kind, False)
        if (paired_calls and pair is None) or (entry_calls and entry is None):
            return None
        return paired_calls * (pair or 0.0) + entry_calls * (entry or 0.0)

    by_kind: dict[str, KindCost] = {}
    for kind, (p, e) in calls.items():
        ns = spent(kind, p, e)
        by_kind[kind] = KindCost(
            calls=p + e,
            hits=2 * p + e,
            entry_instruction="+".join(classes.get(kind, [])) or None,
            probe_time_ms=ns / 1e6 if ns is not None else None,
        )
    unknown = [k for k, v in by_kind.items() if v.probe_time_ms is None]
    (lp, le), rings = calls.get("launches", (0, 0)), calls.get("doorbell_rings", (0, 0))[1]
    launch_ns, ring_ns = spent("launches", lp, le), spent("doorbell_rings", 0, rings)
    per_launch = (
        (launch_ns + ring_ns) / (lp + le)
        if lp + le and launch_ns is not None and ring_ns is not None
        else None
    )
    launch_pair, launch_entry = cost("launches", True), cost("launches", False)
    spent_ns = None if unknown else sum(v.probe_time_ms or 0.0 for v in by_kind.values()) * 1e6
    window_ms = context.window.duration_ms
    calibrated_on = start.calibrated_on if isinstance(start, HitCosts) else {}
    return {
        "entry_probe_us": launch_entry / 1e3 if launch_entry is not None else None,
        "entry_return_pair_us": launch_pair / 1e3 if launch_pair is not None else None,
        "per_launch_us": per_launch / 1e3 if per_launch is not None else None,
        "by_entry_instruction": {
            cls: {
                "entry_probe_us": e / 1e3 if e is not None else None,
                "entry_return_pair_us": pr / 1e3 if pr is not None else None,
                "calibrated_on": calibrated_on.get(cls),
                "meaning": CLASS_MEANING.get(cls),
            }
            for cls, (e, pr) in sorted(costs.items())
        },
        "hits_in_window": sum(v.hits for v in by_kind.values()),
        "probe_time_in_window_ms": spent_ns / 1e6 if spent_ns is not None else None,
        "by_kind": {kind: v.to_json() for kind, v in by_kind.items()},
        "window_share_pct": (
            100 * spent_ns / (window_ms * 1e6)
            if spent_ns is not None and window_ms is not None and window_ms > 0
            else None
        ),
        **(
            {"reason": f"no calibration probe of the entry-instruction class of: {', '.join(unknown)}"}
            if unknown
            else {}
        ),
        "meaning": (
            "host time spent in uprobe hits: right before the window, a calibration probe per "
            "class of first instruction of the probed functions (a push, executed in the trap, or "
            "another instruction, single-stepped: a second trap) runs a launch probe's body on a C "
            "library function of that class, timed against an unprobed twin (the fastest of 5 "
            "alternating batches of 100 calls each); the return probe's share is timed on "
            "ffsll's calibration uretprobe. Cost x "
            "calls counted in the window (launch, graph launch, sync, copy and collective calls: "
            "entry+return with the times view, else entry; doorbell rings, event records and "
            "waits, group calls: entry); by_kind splits it per kind of probe; share = that time / "
            "window duration, all threads together"
        ),
    }

"""gpu_runtime's printed maps → per-stream and per-queue tables, summary, probe cost."""

from __future__ import annotations

from typing import Any

from aorta.ebpf import hist
from aorta.ebpf.probes.gpu_runtime_apis import API_BY_ID, P


def api_name(ident: int) -> str:
    """The entry point's name for a numeric map key (the number itself if unknown)."""
    return API_BY_ID[ident].name if ident in API_BY_ID else str(ident)


def stream_rows(
    maps: dict[str, Any], syncs: dict[str, Any], syncs_on: bool = True
) -> dict[int, dict[str, Any]]:
    """Per stream handle: launches by API, launch-call latency, stream syncs (`syncs`: key →
    (calls, ns blocked or None when not timed); `syncs_on`: the syncs view was probed, else the
    sync fields are null)."""
    per_stream: dict[int, dict[str, Any]] = {}
    for (api_id, stream), n in pair_map(maps.get(f"{P}launches")).items():
        row = per_stream.setdefault(stream, new_stream_row(stream))
        row["graph_launches" if is_graph(api_id) else "launches"] += n
        row["by_api"][api_name(api_id)] = row["by_api"].get(api_name(api_id), 0) + n
    for key, value in hist.keyed(maps.get(f"{P}launch_ns")).items():
        stats = hist.stats(value)
        if stats is not None:
            api_id, stream = split_key(key)
            row = per_stream.setdefault(stream, new_stream_row(stream))
            prefix = "graph_" if is_graph(api_id) else ""
            row[f"{prefix}latency_count"] += stats[0]
            row[f"{prefix}latency_total_ns"] += stats[1]
    for key, stats in syncs.items():
        api_id, stream = split_key(key)
        if stats is not None and api_id in API_BY_ID and API_BY_ID[api_id].role == "sync_stream":
            row = per_stream.setdefault(stream, new_stream_row(stream))
            row["sync_calls"] += stats[0]
            timed = stats[1] is not None and row["sync_blocked_ms"] is not None
            row["sync_blocked_ms"] = row["sync_blocked_ms"] + stats[1] / 1e6 if timed else None
    for row in per_stream.values():
        row["launch_avg_us"] = (
            row["latency_total_ns"] / row["latency_count"] / 1e3 if row["latency_count"] else None
        )
        n, ns = row.pop("graph_latency_count"), row.pop("graph_latency_total_ns")
        row["graph_launch_avg_us"] = ns / n / 1e3 if n else None
        if not syncs_on:
            row["sync_calls"] = row["sync_blocked_ms"] = None
    return per_stream


def is_graph(ident: int) -> bool:
    """Whether the API id is a graph launch (one call = one graph, however many kernels in it)."""
    return ident in API_BY_ID and API_BY_ID[ident].role == "graph_launch"


def queue_rows(maps: dict[str, Any], per_stream: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per doorbell signal: rings (all on queues seen created; in-launch ones on inferred queues),
    rings per stream; adds each stream's queues to its row."""
    queues = pair_map(maps.get(f"{P}queues"))  # (queue ptr, doorbell) → queue id
    doorbell_queue = {sig: (qptr, qid) for (qptr, sig), qid in queues.items()}
    rows: dict[int, dict[str, Any]] = {}
    for key, n in hist.keyed(maps.get(f"{P}rings")).items():
        if key:
            sig = int(key) & (2**64 - 1)
            qptr, qid = doorbell_queue.get(sig, (None, None))
            rows[sig] = new_queue_row(sig, qptr, qid, "hsa_queue_create seen")
            rows[sig]["doorbell_rings"] = int(n)
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
        if row["source"].startswith("inferred"):
            row["doorbell_rings"] += n  # only in-launch stores are known for these
        row["streams"][hex_handle(stream)] = row["streams"].get(hex_handle(stream), 0) + n
        stream_row = per_stream.setdefault(stream, new_stream_row(stream))
        stream_row["queues"] = sorted({*stream_row["queues"], hex_handle(sig)})
    return rows


def other_syncs(syncs: dict[str, Any]) -> list[dict[str, Any]]:
    """Device-wide and event syncs (no stream): calls and host time blocked."""
    out = []
    for key, stats in syncs.items():
        api_id, _ = split_key(key)
        if stats is not None and api_id in API_BY_ID and API_BY_ID[api_id].role != "sync_stream":
            blocked = stats[1] / 1e6 if stats[1] is not None else None
            out.append({"api": API_BY_ID[api_id].name, "calls": stats[0], "blocked_ms": blocked})
    return out


def family_summary(per_stream: dict[int, dict[str, Any]], rings_used: list[str] | None) -> dict[str, Any]:
    """The queue section's summary keys from this family (launches as submissions)."""
    lat_n = sum(r["latency_count"] for r in per_stream.values())
    lat_total = sum(r["latency_total_ns"] for r in per_stream.values())
    return {
        "source": "gpu_runtime",
        "total_submissions": sum(r["launches"] for r in per_stream.values()),
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


def new_stream_row(stream: int) -> dict[str, Any]:
    """An empty per-stream row (counts start at 0: filled only from printed maps)."""
    return {
        "handle": hex_handle(stream),
        "stream_index": None,
        "launches": 0,
        "graph_launches": 0,
        "by_api": {},
        "latency_count": 0,
        "latency_total_ns": 0,
        "graph_latency_count": 0,
        "graph_latency_total_ns": 0,
        "launch_avg_us": None,
        "queues": [],
        "sync_calls": 0,
        "sync_blocked_ms": 0.0,
    }


def new_queue_row(sig: int, qptr: int | None, qid: int | None, source: str) -> dict[str, Any]:
    """An empty per-doorbell row; `source` says how the doorbell became known."""
    return {
        "doorbell_signal": hex_handle(sig),
        "queue": hex_handle(qptr) if qptr else None,
        "queue_id": qid,
        "source": source,
        "doorbell_rings": 0,
        "streams": {},
    }


def handle_indices(handles: list[dict[str, Any]]) -> dict[int, int]:
    """The harness's streams: runtime handle (unsigned) → stream index (GPU backend's `cuda_stream`)."""
    return {
        int(h["handle"]) & (2**64 - 1): int(h["stream"])
        for h in handles
        if isinstance(h.get("handle"), int) and isinstance(h.get("stream"), int)
    }


def join_streams(per_stream: dict[int, dict[str, Any]], handles: list[dict[str, Any]]) -> dict[str, Any]:
    """Label eBPF stream rows with the harness's stream index (GPU backend's `cuda_stream`)."""
    by_handle = handle_indices(handles)
    for handle, index in by_handle.items():
        if handle in per_stream:
            per_stream[handle]["stream_index"] = index
    return {
        "harness_streams": len(by_handle),
        "matched": sum(1 for h in by_handle if h in per_stream and per_stream[h]["launches"]),
        "ebpf_streams_not_in_harness": sum(
            1 for h, r in per_stream.items() if h not in by_handle and r["launches"]
        ),
    }


def probe_cost(context: dict[str, Any], calls: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """uprobe cost per launch, per kind of probe and as a share of the window, from costs measured
    at the window's start.

    `calls`: kind → (calls probed at entry and return, calls probed at entry only) in the window;
    "launches" and "doorbell_rings" give the cost per launch. Both costs are timed in the tracer
    right before the window (uprobes.hit_cost_ns); the probed functions' first instruction
    (emulated or single-stepped) changes the real cost a little.
    """
    start = ((context.get("snapshots") or {}).get("gpu_runtime") or {}).get("start") or {}
    entry = start.get("entry_ns") if isinstance(start, dict) else None
    pair = start.get("entry_return_ns") if isinstance(start, dict) else None
    window_ms = (context.get("window") or {}).get("duration_ms")
    if not isinstance(entry, (int, float)) or not isinstance(pair, (int, float)):
        return {
            "entry_probe_us": None,
            "entry_return_pair_us": None,
            "reason": (
                "probe costs were not measured (no window start, or nothing was probed "
                "when it opened: runtimes loaded later)"
            ),
        }
    (lp, le), rings = calls.get("launches", (0, 0)), calls.get("doorbell_rings", (0, 0))[1]
    launches = lp + le
    by_kind = {
        kind: {"calls": p + e, "hits": 2 * p + e, "probe_time_ms": (p * pair + e * entry) / 1e6}
        for kind, (p, e) in calls.items()
    }
    spent_ns = sum(v["probe_time_ms"] for v in by_kind.values()) * 1e6
    return {
        "entry_probe_us": entry / 1e3,
        "entry_return_pair_us": pair / 1e3,
        "per_launch_us": ((lp * pair + le * entry) / launches + entry * rings / launches) / 1e3
        if launches
        else None,
        "hits_in_window": sum(v["hits"] for v in by_kind.values()),
        "probe_time_in_window_ms": spent_ns / 1e6,
        "by_kind": by_kind,
        "window_share_pct": (
            100 * spent_ns / (window_ms * 1e6)
            if isinstance(window_ms, (int, float)) and window_ms > 0
            else None
        ),
        "meaning": (
            "host time spent in uprobe traps: costs timed in the tracer right before "
            "the window (llabs entry probe vs labs; ffsll entry+return vs ffs; medians "
            "of 3 x 100 calls) x calls counted in the window (launch, graph launch, sync, copy "
            "and collective calls: entry+return with the times view, else entry; doorbell rings, "
            "event records and waits, group calls: entry); by_kind splits it per kind of probe; "
            "share = that time / window duration, all threads together"
        ),
    }

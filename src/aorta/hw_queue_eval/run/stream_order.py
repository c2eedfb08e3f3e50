"""Stream order check: the observed cross-stream waits against a workload's declared dependencies.

A declared dependency (producer → consumer) with no observed wait is a missing synchronisation
(a race); an observed wait that no dependency declares is needless serialisation. Pure, no torch:
`report` reads the section back from saved results.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.results.models import StreamEdge, StreamOrder

SOURCE = "the backend's queue dependencies: stream.wait calls recorded in the measured window"
RUNTIME_NOTE = (
    "not joined: the GPU runtime's stream graph (eBPF gpu_runtime stream_edges) names streams by "
    "runtime handle, and this check reads the backend's stream indices"
)


def _pairs(pairs: Any) -> list[StreamEdge]:
    return [StreamEdge(producer=p, consumer=c) for p, c in sorted(pairs)]


def stream_order(declared: set[tuple[int, int]], observed: dict[tuple[int, int], int] | None) -> StreamOrder:
    """The `stream_order` section: observed edges with counts, declared edges, both differences."""
    section: StreamOrder = {
        "source": SOURCE if observed is not None else None,
        "declared": _pairs(declared),
        "edges": None,
        "missing_synchronisation": None,
        "needless_serialisation": None,
        "note": None if observed is not None else "this backend records no cross-stream waits",
        "runtime_edges": None,
        "runtime_edges_note": RUNTIME_NOTE,
    }
    if observed is None:
        return section
    section["edges"] = [StreamEdge(producer=p, consumer=c, waits=n) for (p, c), n in sorted(observed.items())]
    section["missing_synchronisation"] = _pairs(declared - observed.keys())
    section["needless_serialisation"] = [
        StreamEdge(producer=p, consumer=c, waits=n)
        for (p, c), n in sorted(observed.items())
        if (p, c) not in declared
    ]
    return section


def runtime_edges(section: StreamOrder | None, queue_metrics: JsonObject | None) -> StreamOrder | None:
    """`section` with `runtime_edges` filled from the eBPF gpu_runtime stream graph, by stream
    index: the runtime's EventRecord → StreamWaitEvent edges whose two handles are the harness's
    streams (gpu_runtime joins them, `stream_handles_joined`). Edges with a stream the harness did
    not create (torch's timing stream, library-internal streams) are counted in the note, not
    dropped silently. Unchanged when the family did not run or probed no event API."""
    if section is None:
        return None
    family = ((queue_metrics or {}).get("families") or {}).get("gpu_runtime") or {}
    metrics = family.get("metrics") or {}
    probed = ((metrics.get("views") or {}).get("stream_graph") or {}).get("probed")
    if not probed:
        return section
    graph = metrics.get("stream_graph") or {}
    joined: dict[tuple[int, int], int] = {}
    other = 0
    for e in graph.get("edges") or []:
        p, c = e.get("producer_index"), e.get("consumer_index")
        if isinstance(p, int) and isinstance(c, int):
            joined[(p, c)] = joined.get((p, c), 0) + int(e["waits"])
        else:
            other += int(e["waits"])
    unknown = sum(int(w["waits"]) for w in graph.get("waits_producer_unknown") or [])
    section = dict(section)  # type: ignore[assignment]
    section["runtime_edges"] = [
        StreamEdge(producer=p, consumer=c, waits=n) for (p, c), n in sorted(joined.items())
    ]
    section["runtime_edges_note"] = (
        "eBPF gpu_runtime: waits on an event recorded on the producer stream (hip/cudaEventRecord "
        "→ StreamWaitEvent), runtime handles joined to the harness's stream indices; "
        f"{other} waits involve a stream the harness did not create, {unknown} waited on an "
        "event never seen recorded (not joined)"
    )
    return section


def runtime_differences(section: JsonObject) -> tuple[list[StreamEdge], list[StreamEdge]] | None:
    """(declared but never waited on in the runtime, waited on but not declared), from
    `runtime_edges` (None when they were not observed)."""
    observed = section.get("runtime_edges")
    if observed is None:
        return None
    seen = {(e["producer"], e["consumer"]) for e in observed}
    declared = {(e["producer"], e["consumer"]) for e in section.get("declared") or []}
    missing = _pairs(declared - seen)
    needless = [e for e in observed if (e["producer"], e["consumer"]) not in declared]
    return missing, needless


def edge_names(edges: list[Any], limit: int | None = None) -> str:
    """`s0→s1 ×9, …`: each edge (with its wait count where it has one), the first `limit` only."""
    shown = edges if limit is None else edges[:limit]
    names = [
        f"s{e['producer']}→s{e['consumer']}" + (f" ×{e['waits']}" if "waits" in e else "") for e in shown
    ]
    more = len(edges) - len(shown)
    return ", ".join(names) + (f", … (+{more} more)" if more else "")


def order_sentences(result: JsonObject) -> list[str]:
    """Interpretation lines, only for a non-empty difference (none for older files)."""
    section = result.get("stream_order") or {}
    lines = []
    missing, needless = section.get("missing_synchronisation"), section.get("needless_serialisation")
    if missing:
        lines.append(
            f"Missing synchronisation (a race): the workload declares {edge_names(missing)} but no "
            "wait was observed; the consumer may read before the producer wrote."
        )
    if needless:
        lines.append(
            f"Needless serialisation: waits observed on {edge_names(needless)} that no dependency of "
            "the workload declares; they order streams that could overlap."
        )
    runtime = runtime_differences(section)
    if runtime is not None:
        r_missing, r_needless = runtime
        if r_missing:
            lines.append(
                f"Missing synchronisation in the GPU runtime (eBPF): the workload declares "
                f"{edge_names(r_missing)} but no StreamWaitEvent on an event recorded on the "
                "producer was seen; the consumer may read before the producer wrote."
            )
        if r_needless:
            lines.append(
                f"Needless serialisation in the GPU runtime (eBPF): StreamWaitEvent edges "
                f"{edge_names(r_needless)} that no dependency of the workload declares."
            )
    return lines

"""The workload's collective ops joined with the NCCL/RCCL calls the gpu_runtime family saw.

Over the same window, per harness stream index and collective kind: the ops the harness issued
whose label names a collective (`all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`; a
"reduce+all_reduce" op counts as one all_reduce) against the runtime's collective calls on that
stream (gpu_runtime `collectives` rows, joined by stream handle: `stream_index`). Runtime calls on
a stream the harness did not create form rows of their own (`stream` null: the harness issued no
op there). Each row has a verdict on the counts (`exact`, `runtime_more`, `runtime_fewer`) with
what it means for that row, and bytes where both sides know them (docs/ebpf.md, "Collectives
joined with the workload's ops"). Under torchrun each rank's tracer joins its own rank's ops
and calls. Pure: no torch, no bpftrace.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.ops.opfold import FoldedOps
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.workloads.collectives import CollectiveFacts, collective_kinds

# runtime collective API → the harness's collective kind it carries out. torch's c10d runs an
# all_to_all as one ncclAllToAll or as one ncclSend and one ncclRecv per peer inside a group,
# so all three count for all_to_all; the other NCCL ops are no kind a workload labels
RUNTIME_KIND = {
    "ncclAllReduce": "all_reduce",
    "ncclAllGather": "all_gather",
    "ncclReduceScatter": "reduce_scatter",
    "ncclAllToAll": "all_to_all",
    "ncclSend": "all_to_all",
    "ncclRecv": "all_to_all",
    "ncclBroadcast": "broadcast",
    "ncclBcast": "broadcast",
    "ncclReduce": "reduce",
    "ncclGather": "gather",
    "ncclScatter": "scatter",
}
FORMULA = (
    "per harness stream and collective kind: ops whose label names the collective (harness) vs "
    "NCCL/RCCL calls on that stream's runtime handle (gpu_runtime uprobes), same window"
)
VERDICTS = {
    "exact": "one runtime collective call per collective op of the workload",
    "runtime_more": "the runtime made more collective calls than the workload issued ops",
    "runtime_fewer": "the runtime made fewer collective calls than the workload issued ops",
}


@dataclass
class _Side:
    """One (stream, kind) cell: harness ops; runtime calls, bytes (None: a datatype of unknown
    size) and the APIs that made them."""

    ops: int = 0
    calls: int = 0
    runtime_bytes: int | None = 0
    by_api: Counter[str] = field(default_factory=Counter)


def harness_collective_ops(ops: Sequence[OpRecord], folded: FoldedOps | None) -> Counter[tuple[int, str]]:
    """(stream index, collective kind) → ops of the window naming it, from every op (the fold's
    exact per-stream label counts when the window had more ops than rows)."""
    labels: Counter[tuple[int, str]] = Counter()
    if folded is not None:
        labels.update(folded.per_stream_label_counts())
    else:
        labels.update((op.stream, op.label) for op in ops)
    out: Counter[tuple[int, str]] = Counter()
    for (stream, label), n in labels.items():
        for kind in collective_kinds(label):
            out[(stream, kind)] += n
    return out


def _not_joined(reason: str, facts: CollectiveFacts | None) -> JsonObject:
    return {
        "rows": None,
        "totals": None,
        "reason": reason,
        "mode": facts.mode if facts is not None else None,
        "formula": FORMULA,
        "verdicts": VERDICTS,
    }


def collective_join(
    metrics: JsonObject, harness: Counter[tuple[int, str]], facts: CollectiveFacts | None
) -> JsonObject:
    """The join (`ebpf_vs_cuda_comparison.collectives`) from the gpu_runtime family's metrics,
    the harness's collective ops per (stream, kind) and how the workload's collectives ran;
    rows null with the reason when the runtime's collectives were not probed."""
    view = (metrics.get("views") or {}).get("collectives") or {}
    rows = metrics.get("collectives")
    if rows is None or not view.get("probed"):
        reason = view.get("reason") or "the gpu_runtime family did not run"
        return _not_joined(f"runtime collectives not probed: {reason}", facts)
    cells: dict[tuple[int | None, str], _Side] = {}
    for key, n in harness.items():
        cells.setdefault(key, _Side()).ops += n
    for r in rows:
        kind = RUNTIME_KIND.get(r["op"], r["op"])
        cell = cells.setdefault((r.get("stream_index"), kind), _Side())
        cell.calls += r["calls"]
        cell.by_api[r["op"]] += r["calls"]
        nbytes, known = r.get("bytes"), cell.runtime_bytes
        cell.runtime_bytes = None if nbytes is None or known is None else known + nbytes
    order = sorted(cells, key=lambda k: (k[0] is None, k[0] or 0, k[1]))  # harness streams first
    out_rows = [_row(stream, kind, cells[(stream, kind)], facts) for stream, kind in order]
    totals: dict[str, list[int]] = {}
    for row in out_rows:
        both = totals.setdefault(row["op"], [0, 0])
        both[0] += row["harness_ops"]
        both[1] += row["runtime_calls"]
    return {
        "rows": out_rows,
        "totals": [
            {"op": kind, "harness_ops": ops, "runtime_calls": calls, "verdict": _verdict(ops, calls)}
            for kind, (ops, calls) in sorted(totals.items())
        ],
        "reason": None,
        "mode": facts.mode if facts is not None else None,
        "formula": FORMULA,
        "verdicts": VERDICTS,
    }


def _verdict(ops: int, calls: int) -> str:
    return "exact" if ops == calls else ("runtime_more" if calls > ops else "runtime_fewer")


def _row(stream: int | None, kind: str, cell: _Side, facts: CollectiveFacts | None) -> JsonObject:
    verdict = _verdict(cell.ops, cell.calls)
    harness_bytes, reason = _harness_bytes(kind, cell.ops, facts)
    runtime_bytes = cell.runtime_bytes
    if runtime_bytes is None:
        reason = reason or "a runtime call's datatype has no known size"
    return {
        "stream": stream,
        "op": kind,
        "harness_ops": cell.ops,
        "runtime_calls": cell.calls,
        "runtime_by_api": dict(sorted(cell.by_api.items())),
        "harness_bytes": harness_bytes,
        "runtime_bytes": runtime_bytes,
        "bytes_equal": (
            None if harness_bytes is None or runtime_bytes is None else harness_bytes == runtime_bytes
        ),
        "bytes_reason": reason,
        "verdict": verdict,
        "meaning": _meaning(verdict, stream, kind, cell, facts),
    }


def _harness_bytes(kind: str, ops: int, facts: CollectiveFacts | None) -> tuple[int | None, str | None]:
    """Bytes the harness's ops passed in NCCL's count semantics, or None with the reason."""
    if ops == 0:
        return 0, None
    if facts is None or facts.mode != "torch.distributed":
        return None, "the workload's collectives called no collective library (one-rank copies)"
    if kind == "all_to_all":
        return None, "c10d may run an all_to_all as per-peer ncclSend/ncclRecv: no per-call size to compare"
    if kind not in facts.bytes_per_call:
        return None, f"the workload made no real {kind} call the harness could size"
    size = facts.bytes_per_call[kind]
    if size is None:
        return None, f"the workload's {kind} calls passed different sizes"
    return ops * size, None


def _meaning(verdict: str, stream: int | None, kind: str, cell: _Side, facts: CollectiveFacts | None) -> str:
    """What this row's verdict means, from what is known of how the collectives ran."""
    if verdict == "exact":
        return VERDICTS["exact"]
    if stream is None:
        return (
            "calls on a stream the harness did not create (c10d's internal NCCL stream, used "
            "with async_op=True, or a library's own stream): the workload issues no op there"
        )
    if verdict == "runtime_more":
        if cell.ops == 0:
            return (
                f"{kind} calls the workload did not issue as ops on this stream (a barrier, an "
                "object collective, a library's own collective)"
            )
        if kind == "all_to_all" and (cell.by_api["ncclSend"] or cell.by_api["ncclRecv"]):
            return "c10d ran each all_to_all as one ncclSend and one ncclRecv per peer (in one group)"
        return (
            "c10d made several runtime calls for one op (a tensor split into chunks), or calls "
            "the workload did not issue as ops ran on this stream"
        )
    if facts is not None and facts.mode != "torch.distributed":
        return (
            "not under torchrun: the workload's collectives ran as one-rank copies and called no "
            "NCCL/RCCL (run under torchrun for real collectives)"
        )
    if facts is not None and facts.backend not in (None, "nccl"):
        return f"the process group's backend is {facts.backend}, which does not call NCCL/RCCL"
    return (
        "c10d coalesced several ops into one call (a coalesced bucket), ran them on its own stream "
        "(async_op=True: see the rows with stream null), or called an entry point that is not probed"
    )

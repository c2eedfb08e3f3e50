"""What the harness hands a window tracer when the window is over, typed (not a dict read back).

Built once by run/harness.py; read by tracing/window_tracer.py and distributed/node_tracer.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from aorta.hw_queue_eval.backends.base import Backend, HandoffTotals, SubmissionRecord
from aorta.hw_queue_eval.ops.opfold import FoldedOps
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.workloads.collectives import CollectiveFacts


@dataclass(frozen=True)
class WindowContext:
    """The measured window as the harness saw it, for the tracer's comparison and attribution.

    warnings: the result's warnings list; the tracer appends its problems to it (easy to miss
    otherwise). ops: the op rows the result keeps; folded: every op's figures when `ops` holds
    only the first ones. submissions / handoff_totals: the CPU backend's doorbell rings (None
    on the GPU backend). collectives: how the workload's collectives ran (None: it runs none),
    for the join with the runtime's NCCL/RCCL calls.
    """

    backend: Backend | None = None
    stream_count: int | None = None
    warnings: list[str] = field(default_factory=list)
    ops: Sequence[OpRecord] = ()
    folded: FoldedOps | None = None
    submissions: list[SubmissionRecord] | None = None
    handoff_totals: HandoffTotals | None = None
    collectives: CollectiveFacts | None = None

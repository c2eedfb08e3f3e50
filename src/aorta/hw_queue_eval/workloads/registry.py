"""Workload catalogue: names, categories and sensitivities, without importing torch."""

from __future__ import annotations

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.workloads.activation_ckpt import ActivationCheckpoint
from aorta.hw_queue_eval.workloads.async_dataload import AsyncDataload
from aorta.hw_queue_eval.workloads.base import Workload, WorkloadInfo
from aorta.hw_queue_eval.workloads.comms_compute_overlap import CommsComputeOverlap
from aorta.hw_queue_eval.workloads.continuous_batch import ContinuousBatch
from aorta.hw_queue_eval.workloads.fsdp_tp import FsdpTp
from aorta.hw_queue_eval.workloads.grad_accum import GradAccum
from aorta.hw_queue_eval.workloads.graph_subgraphs import GraphSubgraphs
from aorta.hw_queue_eval.workloads.hetero_kernels import HeteroKernels
from aorta.hw_queue_eval.workloads.large_gemm_only import LargeGemmOnly
from aorta.hw_queue_eval.workloads.moe import MixtureOfExperts
from aorta.hw_queue_eval.workloads.rag_pipeline import RagPipeline
from aorta.hw_queue_eval.workloads.speculative_decode import SpeculativeDecode
from aorta.hw_queue_eval.workloads.tiny_kernel_stress import TinyKernelStress
from aorta.hw_queue_eval.workloads.torch_compile import TorchCompile
from aorta.hw_queue_eval.workloads.zero_offload import ZeroOffload

_WORKLOADS: dict[str, type[Workload]] = {
    cls.INFO.name: cls
    for cls in (
        HeteroKernels,
        TinyKernelStress,
        LargeGemmOnly,
        GraphSubgraphs,
        CommsComputeOverlap,
        FsdpTp,
        MixtureOfExperts,
        ActivationCheckpoint,
        GradAccum,
        SpeculativeDecode,
        ContinuousBatch,
        RagPipeline,
        AsyncDataload,
        ZeroOffload,
        TorchCompile,
    )
}
CATEGORIES = ("latency_sensitive", "distributed", "inference", "pipeline")
SENSITIVITIES = ("critical", "high", "medium", "low")

#: Upstream AORTA 0.3.0's run order by importance (`run-priority`): P0 first. comms_compute_overlap
#: has no level there, so it has none here either (`run-priority all` runs P0..P3, as upstream's did).
PRIORITIES: dict[str, tuple[str, ...]] = {
    "P0": ("hetero_kernels", "tiny_kernel_stress", "large_gemm_only"),
    "P1": ("fsdp_tp", "moe", "speculative_decode", "continuous_batch"),
    "P2": ("activation_ckpt", "grad_accum", "rag_pipeline", "graph_subgraphs"),
    "P3": ("async_dataload", "zero_offload", "torch_compile"),
}
PRIORITY_LEVELS = (*PRIORITIES, "all")


def workload_names() -> list[str]:
    """All registered workload names, sorted."""
    return sorted(_WORKLOADS)


def get_workload_class(name: str) -> type[Workload]:
    """The class for `name`, or a UsageError that lists the known names."""
    try:
        return _WORKLOADS[name]
    except KeyError:
        raise UsageError(
            f"unknown workload {name!r}; known: {', '.join(workload_names())} (see `list`)"
        ) from None


def get_info(name: str) -> WorkloadInfo:
    """The catalogue entry for `name` (UsageError if unknown)."""
    return get_workload_class(name).INFO


def list_workloads(category: str | None = None, sensitivity: str | None = None) -> list[WorkloadInfo]:
    """Catalogue entries, filtered by category and/or switch sensitivity."""
    if category is not None and category not in CATEGORIES:
        raise UsageError(f"unknown category {category!r}; known: {', '.join(CATEGORIES)}")
    if sensitivity is not None and sensitivity not in SENSITIVITIES:
        raise UsageError(f"unknown sensitivity {sensitivity!r}; known: {', '.join(SENSITIVITIES)}")
    infos = [cls.INFO for cls in _WORKLOADS.values()]
    return sorted(
        (
            i
            for i in infos
            if (category is None or i.category == category)
            and (sensitivity is None or i.switch_sensitivity == sensitivity)
        ),
        key=lambda i: (CATEGORIES.index(i.category), i.name),
    )


def priority_of(name: str) -> str | None:
    """The priority level (P0..P3) of workload `name`, or None when it has none."""
    return next((level for level, names in PRIORITIES.items() if name in names), None)


def workloads_at_priority(level: str) -> list[str]:
    """Workloads of `level` (P0..P3) in run order, or of every level for "all"; UsageError otherwise."""
    if level == "all":
        return [name for names in PRIORITIES.values() for name in names]
    if level not in PRIORITIES:
        raise UsageError(f"unknown priority {level!r}: use one of {', '.join(PRIORITY_LEVELS)}")
    return list(PRIORITIES[level])

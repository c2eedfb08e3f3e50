"""Workload contract: static buffers in `setup`, ops enqueued on streams in `run_iteration`.

Buffers are allocated once (as CUDA graphs need), so an op on one stream reads a tensor another
stream wrote. Each workload can recompute its outputs serially and check them (`verify`).
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.collectives import CollectiveFacts, Collectives

UNIT_SCALE = {
    "GFLOPS": 1e9,
    "TFLOPS": 1e12,
    "tokens/sec": 1.0,
    "samples/sec": 1.0,
    "queries/sec": 1.0,
    "images/sec": 1.0,
    "GB/s": 1e9,
}


@dataclass(frozen=True)
class WorkloadInfo:
    """What `list` shows and what validation needs; no torch import."""

    name: str
    category: str
    description: str
    min_streams: int
    max_streams: int
    recommended_streams: int
    switch_sensitivity: str
    throughput_unit: str
    work_scaling: str  # "per_stream": work grows with the stream count; "fixed": it does not

    def check_streams(self, streams: int) -> None:
        """UsageError unless `streams` is within this workload's range."""
        if not self.min_streams <= streams <= self.max_streams:
            raise UsageError(
                f"{self.name} runs on {self.min_streams}..{self.max_streams} streams "
                f"(recommended {self.recommended_streams}), got {streams}"
            )


@dataclass
class VerifyResult:
    """Outcome of the once-per-run correctness check."""

    passed: bool
    max_rel_error: float  # max |actual − expected| / max |expected| (was max_abs_error in v1)
    tolerance: float
    checked: str


class Workload(ABC):
    """A multi-stream workload. Subclasses set INFO and SIZES and implement the three hooks."""

    INFO: ClassVar[WorkloadInfo]
    SIZES: ClassVar[dict[str, dict[str, int]]]
    #: What it models and how streams are used, in prose (`list -v`).
    MODELS: ClassVar[str] = ""

    def __init__(
        self, streams: int, size: str, device: Any, seed: int, options: JsonObject | None = None
    ) -> None:
        self.INFO.check_streams(streams)
        if size not in self.SIZES:
            raise UsageError(f"unknown size {size!r}: use one of {', '.join(self.SIZES)}")
        self.stream_count = streams
        self.size = size
        self.params = dict(self.SIZES[size])
        self.device = device
        self.seed = seed
        self.options = self.check_options(dict(options or {}), streams)

    @classmethod
    def check_options(cls, options: JsonObject, streams: int) -> JsonObject:
        """This workload's knobs, validated (UsageError naming the bad one); none by default."""
        if options:
            raise UsageError(f"{cls.INFO.name} takes no workload options (got {', '.join(sorted(options))})")
        return options

    def throughput_unit(self) -> str:
        """The unit of this instance's throughput (the catalogue's, unless a knob changes it)."""
        return self.INFO.throughput_unit

    def require_memory(self, nbytes: int) -> None:
        """UsageError, before anything is allocated, when `nbytes` cannot fit on the device."""
        from aorta.hw_queue_eval.workloads.memory import check_fits

        check_fits(self.INFO.name, self.size, self.device, nbytes)

    def generator(self) -> Any:
        """A seeded torch RNG on the CPU (inputs are made there, then moved to the device)."""
        import torch

        return torch.Generator().manual_seed(self.seed)

    def randn(self, gen: Any, *shape: int, scale: float = 1.0) -> Any:
        """Seeded normal tensor on the workload's device."""
        import torch

        return (torch.randn(*shape, generator=gen) * scale).to(self.device)

    @abstractmethod
    def setup(self) -> None:
        """Allocate every input and output buffer on the device."""

    @abstractmethod
    def run_iteration(self, streams: list[Any]) -> None:
        """Enqueue one iteration's ops on `streams` (one per stream index)."""

    @abstractmethod
    def work_per_iteration(self) -> float:
        """Work of one iteration in the unit's base (FLOPs, tokens, samples…)."""

    @abstractmethod
    def verify(self) -> VerifyResult:
        """Recompute the last iteration serially from the same inputs; compare with outputs."""

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        """Which stream indices play which role at `streams` streams (no torch; for `list -v`)."""
        return {"work": list(range(streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """(producer, consumer) stream pairs the design orders, from MODELS, not run_iteration.

        Pure (no torch, no setup): the run's observed waits are checked against it
        (run/stream_order.py); workloads with independent streams declare none.
        """
        return set()

    def collective_facts(self) -> CollectiveFacts | None:
        """How this workload's collectives ran, for the join with the runtime's NCCL/RCCL calls;
        None when it runs none (the distributed workloads keep their Collectives in `comm`)."""
        comm = getattr(self, "comm", None)
        return comm.facts() if isinstance(comm, Collectives) else None

    def describe(self) -> JsonObject:
        """Size parameters and how the streams are used, for the result metadata."""
        return {
            "size": self.size,
            "params": dict(self.params),
            "stream_roles": self.stream_roles(self.stream_count),
        }


def split_groups(streams: int, groups: int) -> list[list[int]]:
    """Streams 0..streams-1 cut into `groups` contiguous non-empty groups, sizes differing by ≤ 1.

    The first groups get the extra streams. Needs streams ≥ groups.
    """
    base, extra = divmod(streams, groups)
    out, start = [], 0
    for g in range(groups):
        size = base + (1 if g < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def round_robin_edges(producers: list[int], consumers: list[int], items: int) -> set[tuple[int, int]]:
    """Item i made on producers[i mod P] and used on consumers[i mod C], for i < items."""
    return {(producers[i % len(producers)], consumers[i % len(consumers)]) for i in range(items)}


def pipeline_edges(groups: list[list[int]], items: int) -> set[tuple[int, int]]:
    """Item i goes through stage groups in order, on stream i mod len(group) of each."""
    return {e for a, b in itertools.pairwise(groups) for e in round_robin_edges(a, b, items)}


def split_sizes(total: int, parts: int) -> list[int]:
    """`total` cut into `parts` integers differing by ≤ 1 (the first parts get the extra)."""
    base, extra = divmod(total, parts)
    return [base + (1 if p < extra else 0) for p in range(parts)]


def compare_tensors(pairs: list[tuple[Any, Any]], tolerance: float, checked: str) -> VerifyResult:
    """Max abs difference over (actual, expected) pairs, relative to the expected magnitude."""
    worst = 0.0
    for actual, expected in pairs:
        scale = float(expected.abs().max().item()) or 1.0
        worst = max(worst, float((actual.float() - expected.float()).abs().max().item()) / scale)
    return VerifyResult(passed=worst <= tolerance, max_rel_error=worst, tolerance=tolerance, checked=checked)

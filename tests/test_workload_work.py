"""Every workload's work per iteration, held to a count made without its own formula.

Throughput = work / time, so a wrong `work_per_iteration` is a wrong headline number that no
timing test can see. FLOP workloads are counted by watching the arithmetic one iteration really
does (aten ops under a dispatch mode, an eager stream); sample/token workloads by a hand count
from their documented sizes (the numbers below are worked out from the SIZES tables by hand).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from aorta.hw_queue_eval.workloads.registry import get_workload_class, workload_names  # noqa: E402

FLOP_WORKLOADS = ("hetero_kernels", "tiny_kernel_stress", "large_gemm_only", "comms_compute_overlap")

# small size, by hand: the unit's base (samples, tokens, queries, images) per iteration
HAND_COUNTS = {
    "activation_ckpt": 16,  # batch 16
    "async_dataload": 48,  # 6 batches x 8 images
    "continuous_batch": 288,  # 8 requests x (32 prompt + 4 decode steps)
    "fsdp_tp": 16,  # batch 16
    "grad_accum": 240,  # 15 micro-batches x 16
    "graph_subgraphs": 32,  # batch 32
    "moe": 256,  # 256 tokens
    "rag_pipeline": 48,  # 6 micro-batches x 8 queries
    "speculative_decode": 40,  # batch 4 x lookahead 10
    "torch_compile": 16,  # batch 16
    "zero_offload": 16,  # batch 16
}


class FlopTally(TorchDispatchMode):
    """FLOPs of the aten ops run under it: mm 2·M·N·K, mul 1 and add 1 (+1 with alpha) per element."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.unknown: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name == "mm":
            (m, k), n = args[0].shape, args[1].shape[1]
            self.flops += 2 * m * n * k
        elif name == "mul":
            self.flops += out.numel()
        elif name == "add":
            alpha = kwargs.get("alpha", 1)
            self.flops += out.numel() * (1 if alpha == 1 else 2)
        elif name not in {"copy_", "empty", "detach", "alias"}:
            self.unknown.add(name)
        return out


class EagerStream:
    """A stream that runs each op at once, in launch order (dependencies hold trivially)."""

    def __init__(self) -> None:
        self.launched = 0

    def launch(self, fn: Any, label: str = "") -> None:
        self.launched += 1
        fn()

    def wait(self, other: Any) -> None:
        pass


def one_iteration(name: str, streams: int) -> tuple[Any, list[EagerStream]]:
    workload = get_workload_class(name)(streams, "small", torch.device("cpu"), 1)
    workload.setup()
    eager = [EagerStream() for _ in range(streams)]
    return workload, eager


def test_every_workload_has_an_independent_count():
    assert sorted((*FLOP_WORKLOADS, *HAND_COUNTS)) == workload_names()


@pytest.mark.parametrize("name", FLOP_WORKLOADS)
@pytest.mark.parametrize("streams", [1, 2, 3, 4])
def test_flop_workloads_count_the_arithmetic_they_do(name, streams):
    workload, eager = one_iteration(name, streams)
    with torch.no_grad(), FlopTally() as tally:
        workload.run_iteration(eager)
    assert not tally.unknown, f"ops the tally does not count: {tally.unknown}"
    assert sum(s.launched for s in eager) > 0
    assert workload.work_per_iteration() == tally.flops, (name, streams)


@pytest.mark.parametrize("name", sorted(HAND_COUNTS))
def test_sample_workloads_count_the_samples_of_one_iteration(name):
    info = get_workload_class(name).INFO
    for streams in sorted({info.min_streams, info.recommended_streams}):
        workload = get_workload_class(name)(streams, "small", "cpu", 1)
        assert math.isclose(workload.work_per_iteration(), HAND_COUNTS[name]), (name, streams)

"""Collectives for the distributed workloads: real torch.distributed ops, or a one-rank stand-in.

Every call is out-of-place into a static buffer, so it is one op on the workload's comms stream.
Under torchrun (torch.distributed initialised) the ops are real all-reduce / all-gather /
reduce-scatter / all-to-all on the default group (gloo on CPU, nccl/rccl on GPU). Outside it the
run is a world of one rank: each collective is then exactly what it computes over one rank, a copy
into the output buffer, and the result says so (`describe`).
"""

from __future__ import annotations

from typing import Any


class Collectives:
    """Collectives over the default process group, or over one rank when there is none."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.real = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.real else 0
        self.world_size = dist.get_world_size() if self.real else 1
        self.backend = dist.get_backend() if self.real else None

    def all_reduce(self, out: Any, inp: Any) -> None:
        """out = sum over ranks of inp."""
        out.copy_(inp)
        if self.real:
            import torch.distributed as dist

            dist.all_reduce(out)

    def all_gather(self, out: Any, shard: Any) -> None:
        """out = concatenation over ranks of shard (out has world_size × shard elements)."""
        if self.real:
            import torch.distributed as dist

            dist.all_gather_into_tensor(out, shard)
        else:
            out.copy_(shard)

    def reduce_scatter(self, out: Any, inp: Any) -> None:
        """out = this rank's chunk of the sum over ranks of inp."""
        if self.real:
            import torch.distributed as dist

            dist.reduce_scatter_tensor(out, inp)
        else:
            out.copy_(inp)

    def all_to_all(self, out: Any, inp: Any) -> None:
        """out's chunk r = rank r's chunk of inp for this rank (equal chunks along dim 0)."""
        if self.real:
            import torch.distributed as dist

            dist.all_to_all_single(out, inp)
        else:
            out.copy_(inp)

    def describe(self) -> dict[str, Any]:
        """What the collectives were, for the result metadata."""
        if self.real:
            return {
                "mode": "torch.distributed",
                "backend": self.backend,
                "rank": self.rank,
                "world_size": self.world_size,
            }
        return {
            "mode": "single_process",
            "rank": 0,
            "world_size": 1,
            "note": "not under torchrun: each collective runs over one rank (a copy into its "
            "output buffer); run under torchrun for real collectives",
        }

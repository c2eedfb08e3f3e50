"""Collectives for the distributed workloads: real torch.distributed ops, or a one-rank stand-in.

Every call is out-of-place into a static buffer, so it is one op on the workload's comms stream.
Under torchrun (torch.distributed initialised) the ops are real all-reduce / all-gather /
reduce-scatter / all-to-all on the default group (gloo on CPU, nccl/rccl on GPU). Outside it the
run is a world of one rank: each collective is then exactly what it computes over one rank, a copy
into the output buffer, and the result says so (`describe`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject

#: the collectives Collectives runs; an op label naming one (alone or in "a+b") is a collective op
COLLECTIVE_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"})


def is_collective_label(label: Any) -> bool:
    """True for an op label the workloads give an op that runs a collective."""
    return isinstance(label, str) and any(part in COLLECTIVE_OPS for part in label.split("+"))


def collective_kinds(label: str) -> list[str]:
    """The collectives an op label names, in order ("reduce+all_reduce" → ["all_reduce"])."""
    return [part for part in label.split("+") if part in COLLECTIVE_OPS]


@dataclass(frozen=True)
class CollectiveFacts:
    """What the harness knows of a workload's collectives, for the join with the NCCL/RCCL calls
    the gpu_runtime family saw (tracing/collective_join.py).

    mode: "torch.distributed" (real collectives) or "single_process" (one-rank copies, no
    collective library called); backend: the process group's (nccl covers RCCL), None outside
    torchrun. bytes_per_call: per collective kind the bytes each real call passed in NCCL's count
    semantics (count x element size: the tensor for all_reduce, the send buffer for all_gather,
    the receive buffer for reduce_scatter, the per-peer chunk for all_to_all); None for a kind
    whose calls passed different sizes; a kind never called for real is absent."""

    mode: str
    backend: str | None
    world_size: int
    bytes_per_call: dict[str, int | None]


class Collectives:
    """Collectives over the default process group, or over one rank when there is none.

    `process_groups` (upstream's `--process-groups`, lists of global ranks covering every rank):
    every rank creates every group in the same order and runs its collectives on the first group
    that holds it. `async_op`: all_reduce returns before the collective ends; `complete()` waits
    for every pending one (an op of its own on the comms stream)."""

    def __init__(self, process_groups: list[list[int]] | None = None, async_op: bool = False) -> None:
        import torch.distributed as dist

        self.real = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.real else 0
        self.world_size = dist.get_world_size() if self.real else 1
        self.backend = dist.get_backend() if self.real else None
        self.group: Any = None
        self.group_ranks: list[int] | None = None
        self.async_op = async_op and self.real
        self.pending: list[Any] = []
        self._sizes: dict[str, set[int]] = {}  # kind → bytes per real call (NCCL count x element size)
        if self.real and process_groups:
            made = [(ranks, dist.new_group(ranks)) for ranks in process_groups]  # same order on all ranks
            mine = next(((r, g) for r, g in made if self.rank in r), None)
            if mine is None:
                raise UsageError(f"--process-groups: rank {self.rank} is in no group: every rank needs one")
            self.group_ranks, self.group = mine
            self.world_size = len(self.group_ranks)

    def all_reduce(self, out: Any, inp: Any) -> None:
        """out = sum over the group's ranks of inp (pending until complete() with async_op)."""
        out.copy_(inp)
        if self.real:
            import torch.distributed as dist

            self._note("all_reduce", out.numel() * out.element_size())
            work = dist.all_reduce(out, group=self.group, async_op=self.async_op)
            if self.async_op:
                self.pending.append(work)

    def complete(self) -> None:
        """Wait for every pending async collective."""
        pending, self.pending = self.pending, []
        for work in pending:
            work.wait()

    def all_gather(self, out: Any, shard: Any) -> None:
        """out = concatenation over ranks of shard (out has world_size × shard elements)."""
        if self.real:
            import torch.distributed as dist

            self._note("all_gather", shard.numel() * shard.element_size())
            dist.all_gather_into_tensor(out, shard)
        else:
            out.copy_(shard)

    def reduce_scatter(self, out: Any, inp: Any) -> None:
        """out = this rank's chunk of the sum over ranks of inp."""
        if self.real:
            import torch.distributed as dist

            self._note("reduce_scatter", out.numel() * out.element_size())
            dist.reduce_scatter_tensor(out, inp)
        else:
            out.copy_(inp)

    def all_to_all(self, out: Any, inp: Any) -> None:
        """out's chunk r = rank r's chunk of inp for this rank (equal chunks along dim 0)."""
        if self.real:
            import torch.distributed as dist

            self._note("all_to_all", inp.numel() // self.world_size * inp.element_size())
            dist.all_to_all_single(out, inp)
        else:
            out.copy_(inp)

    def _note(self, kind: str, nbytes: int) -> None:
        self._sizes.setdefault(kind, set()).add(int(nbytes))

    def facts(self) -> CollectiveFacts:
        """How the collectives ran and the bytes per call of each kind called for real."""
        return CollectiveFacts(
            mode="torch.distributed" if self.real else "single_process",
            backend=self.backend,
            world_size=self.world_size,
            bytes_per_call={k: min(v) if len(v) == 1 else None for k, v in sorted(self._sizes.items())},
        )

    def describe(self) -> JsonObject:
        """What the collectives were, for the result metadata."""
        if self.real:
            described: JsonObject = {
                "mode": "torch.distributed",
                "backend": self.backend,
                "rank": self.rank,
                "world_size": self.world_size,
            }
            if self.group_ranks is not None:
                described["group_ranks"] = self.group_ranks
            if self.async_op:
                described["async_op"] = True
            return described
        return {
            "mode": "single_process",
            "rank": 0,
            "world_size": 1,
            "note": "not under torchrun: each collective runs over one rank (a copy into its "
            "output buffer); run under torchrun for real collectives",
        }

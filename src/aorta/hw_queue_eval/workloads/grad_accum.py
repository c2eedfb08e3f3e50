"""grad_accum: gradient accumulation over micro-batches with an early, per-bucket all-reduce.

Streams 1..S-1 each accumulate the gradients of their share of the micro-batches (round-robin)
of a linear least-squares layer, bucket by bucket (column slices of the weight). Stream 0 is the
comms stream: for the last round of micro-batches it waits for each bucket on every compute
stream, sums the partial gradients and all-reduces that bucket while the compute streams still
work on the next bucket (the early all-reduce of DDP's no_sync + last-step overlap).
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    split_sizes,
)
from aorta.hw_queue_eval.workloads.collectives import Collectives


class GradAccum(Workload):
    INFO = WorkloadInfo(
        name="grad_accum",
        category="distributed",
        description="Micro-batch gradient accumulation with an early per-bucket all-reduce",
        min_streams=2,
        max_streams=16,
        recommended_streams=6,
        switch_sensitivity="medium",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"micro_batches": 15, "micro_batch": 16, "in": 64, "out": 64, "buckets": 4},
        "medium": {"micro_batches": 15, "micro_batch": 128, "in": 1024, "out": 1024, "buckets": 4},
        "large": {"micro_batches": 30, "micro_batch": 512, "in": 4096, "out": 4096, "buckets": 8},
    }
    MODELS = (
        "Gradient accumulation: each compute stream (1..) accumulates the gradients of its "
        "micro-batches (round-robin) bucket by bucket; stream 0 waits for each bucket on "
        "every compute stream, sums the partials and all-reduces the bucket while later "
        "buckets are still computed (early all-reduce; real collective under torchrun)."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"comms (reduce + all-reduce)": [0], "micro-batch compute": list(range(1, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """The comms stream reduces each bucket once every micro-batch stream produced it."""
        return {(s, 0) for s in range(1, self.stream_count)}

    def setup(self) -> None:
        import torch

        self.comm = Collectives()
        p = self.params
        m, mb, n_in, n_out = p["micro_batches"], p["micro_batch"], p["in"], p["out"]
        gen, dev = self.generator(), self.device
        self.w = self.randn(gen, n_in, n_out, scale=n_in**-0.5)
        self.x = [self.randn(gen, mb, n_in) for _ in range(m)]
        self.t = [self.randn(gen, mb, n_out) for _ in range(m)]
        widths = split_sizes(n_out, p["buckets"])
        self.cols = [(sum(widths[:i]), sum(widths[: i + 1])) for i in range(len(widths))]
        compute = self.stream_count - 1
        self.assigned = [list(range(s, m, compute)) for s in range(compute)]
        self.err = [torch.empty(mb, n_out, device=dev) for _ in range(compute)]
        self.partial = [
            [torch.empty(n_in, hi - lo, device=dev) for lo, hi in self.cols] for _ in range(compute)
        ]
        self.summed = [torch.empty(n_in, hi - lo, device=dev) for lo, hi in self.cols]
        self.grad = [torch.empty(n_in, hi - lo, device=dev) for lo, hi in self.cols]

    def _grad_op(self, s: int, mb: int, b: int, first: bool) -> Any:

        lo, hi = self.cols[b]

        def op() -> None:
            contribution = self.x[mb].t() @ self.err[s][:, lo:hi]
            if first:
                self.partial[s][b].copy_(contribution)
            else:
                self.partial[s][b].add_(contribution)

        return op

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        comms, compute = streams[0], streams[1:]
        rounds = max(len(a) for a in self.assigned)
        for r in range(rounds):  # every micro-batch's forward; all but each stream's last: grads
            for s, stream in enumerate(compute):
                if r >= len(self.assigned[s]):
                    continue
                mb = self.assigned[s][r]
                stream.launch(
                    lambda s=s, mb=mb: torch.sub(self.x[mb] @ self.w, self.t[mb], out=self.err[s]), "forward"
                )
                if r != len(self.assigned[s]) - 1:
                    for b in range(len(self.cols)):
                        stream.launch(self._grad_op(s, mb, b, r == 0), "grad_bucket")
        for b in range(len(self.cols)):  # last micro-batch of every stream, bucket by bucket
            for s, stream in enumerate(compute):
                mb = self.assigned[s][-1]
                stream.launch(self._grad_op(s, mb, b, len(self.assigned[s]) == 1), "grad_bucket")
                comms.wait(stream)

            def reduce(b: int = b) -> None:
                self.summed[b].copy_(self.partial[0][b])
                for part in self.partial[1:]:
                    self.summed[b].add_(part[b])
                self.comm.all_reduce(self.grad[b], self.summed[b])

            comms.launch(reduce, "reduce+all_reduce")

    def work_per_iteration(self) -> float:
        return float(self.params["micro_batches"] * self.params["micro_batch"])

    def verify(self) -> VerifyResult:
        import torch

        grad = torch.zeros_like(self.w)
        for x, t in zip(self.x, self.t, strict=True):
            grad += x.t() @ (x @ self.w - t)
        grad *= self.comm.world_size
        pairs = [(self.grad[b], grad[:, lo:hi]) for b, (lo, hi) in enumerate(self.cols)]
        return compare_tensors(
            pairs, 1e-3, f"{len(pairs)} all-reduced gradient buckets vs serial accumulation"
        )

    def describe(self) -> JsonObject:
        return {
            **super().describe(),
            "collectives": self.comm.describe(),
            "micro_batches_per_stream": [len(a) for a in self.assigned],
        }

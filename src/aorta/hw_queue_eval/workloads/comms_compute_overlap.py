"""comms_compute_overlap: gradient all-reduce on a comms stream overlapping backward GEMMs.

Streams 1..S-1 each compute the gradient bucket of one layer slice (a GEMM chain); stream 0 waits
for each bucket's GEMMs and all-reduces it (a real collective under torchrun, a one-rank copy
otherwise), overlapping with the GEMMs of later buckets. On 1 stream everything runs on stream 0:
the serial baseline. Throughput counts GEMM FLOPs only; the bytes all-reduced are in `describe`.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors
from aorta.hw_queue_eval.workloads.collectives import Collectives


class CommsComputeOverlap(Workload):
    INFO = WorkloadInfo(
        name="comms_compute_overlap",
        category="distributed",
        description="All-reduce of gradient buckets on a comms stream overlapping GEMMs",
        min_streams=1,
        max_streams=32,
        recommended_streams=4,
        switch_sensitivity="high",
        throughput_unit="TFLOPS",
        work_scaling="per_stream",
    )
    SIZES = {
        "small": {"n": 128, "gemms": 2},
        "medium": {"n": 1024, "gemms": 2},
        "large": {"n": 8192, "gemms": 2},
    }
    MODELS = (
        "Backward pass with overlapped gradient all-reduce: every compute stream runs a GEMM "
        "chain producing one gradient bucket; the comms stream waits for each bucket and "
        "all-reduces it (real collective under torchrun). At 1 stream the GEMMs and the "
        "all-reduce share stream 0. TFLOPS counts GEMM work only."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        if streams == 1:
            return {"compute+comms": [0]}
        return {"comms": [0], "compute": list(range(1, streams))}

    @property
    def buckets(self) -> int:
        return max(1, self.stream_count - 1)

    def setup(self) -> None:
        import torch

        self.comm = Collectives()
        n = self.params["n"]
        gen, dev = self.generator(), self.device
        self.a = [self.randn(gen, n, n, scale=n**-0.5) for _ in range(self.buckets)]
        self.b = [self.randn(gen, n, n, scale=n**-0.5) for _ in range(self.buckets)]
        self.c = [[torch.empty(n, n, device=dev) for _ in range(2)] for _ in range(self.buckets)]
        self.reduced = [torch.empty(n, n, device=dev) for _ in range(self.buckets)]

    def _last(self, k: int) -> Any:
        return self.c[k][(self.params["gemms"] - 1) % 2]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        comms = streams[0]
        for k in range(self.buckets):
            stream = streams[k + 1] if self.stream_count > 1 else comms
            src = self.a[k]
            for g in range(self.params["gemms"]):
                dst = self.c[k][g % 2]
                stream.launch(lambda src=src, dst=dst, k=k: torch.mm(src, self.b[k], out=dst), "gemm")
                src = dst
            comms.wait(stream)
            comms.launch(lambda k=k: self.comm.all_reduce(self.reduced[k], self._last(k)), "all_reduce")

    def work_per_iteration(self) -> float:
        return 2.0 * self.params["n"] ** 3 * self.params["gemms"] * self.buckets

    def verify(self) -> VerifyResult:
        pairs = []
        for k in range(self.buckets):
            expected = self.a[k]
            for _ in range(self.params["gemms"]):
                expected = expected @ self.b[k]
            pairs.append((self._last(k), expected))
            pairs.append((self.reduced[k], expected * self.comm.world_size))
        return compare_tensors(
            pairs,
            1e-3,
            f"{self.buckets} buckets (GEMM and all-reduce) vs "
            "serial recomputation (all ranks hold the same inputs)",
        )

    def describe(self) -> dict[str, Any]:
        n = self.params["n"]
        return {
            **super().describe(),
            "collectives": self.comm.describe(),
            "allreduce_bytes_per_iteration": 4 * n * n * self.buckets,
        }

"""large_gemm_only: one large GEMM per stream; the compute-bound baseline."""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors


class LargeGemmOnly(Workload):
    INFO = WorkloadInfo(
        name="large_gemm_only",
        category="latency_sensitive",
        description="One large GEMM per stream: compute-bound baseline",
        min_streams=1,
        max_streams=16,
        recommended_streams=4,
        switch_sensitivity="low",
        throughput_unit="TFLOPS",
        work_scaling="per_stream",
    )
    SIZES = {"small": {"n": 384}, "medium": {"n": 1024}, "large": {"n": 8192}}

    MODELS = "One GEMM per stream, independent streams, no waits: the compute-bound baseline."

    def setup(self) -> None:
        import torch

        n = self.params["n"]
        gen = self.generator()
        self.a = [self.randn(gen, n, n, scale=n**-0.5) for _ in range(self.stream_count)]
        self.b = [self.randn(gen, n, n, scale=n**-0.5) for _ in range(self.stream_count)]
        self.c = [torch.empty(n, n, device=self.device) for _ in range(self.stream_count)]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        for s in range(self.stream_count):
            streams[s].launch(lambda s=s: torch.mm(self.a[s], self.b[s], out=self.c[s]), "gemm")

    def work_per_iteration(self) -> float:
        return 2.0 * self.params["n"] ** 3 * self.stream_count

    def verify(self) -> VerifyResult:
        pairs = [(self.c[s], self.a[s] @ self.b[s]) for s in range(self.stream_count)]
        return compare_tensors(pairs, 1e-3, f"{len(pairs)} GEMM outputs vs serial recomputation")

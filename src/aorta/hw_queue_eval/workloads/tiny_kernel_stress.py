"""tiny_kernel_stress: a chain of tiny element-wise kernels on every stream.

Each op does almost nothing, so the run measures launch, dispatch and stream-switch overhead.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors


class TinyKernelStress(Workload):
    INFO = WorkloadInfo(
        name="tiny_kernel_stress",
        category="latency_sensitive",
        description="Chains of tiny kernels on every stream: pure launch/switch overhead",
        min_streams=1,
        max_streams=64,
        recommended_streams=16,
        switch_sensitivity="critical",
        throughput_unit="GFLOPS",
        work_scaling="per_stream",
    )
    SIZES = {
        "small": {"numel": 256, "ops": 16},
        "medium": {"numel": 1024, "ops": 32},
        "large": {"numel": 4096, "ops": 128},
    }

    MODELS = (
        "A chain of tiny element-wise kernels on every stream, independent streams, no waits: "
        "launch, dispatch and switch overhead only."
    )

    def setup(self) -> None:
        import torch

        gen = self.generator()
        n = self.params["numel"]
        self.x = [self.randn(gen, n) for _ in range(self.stream_count)]
        self.buf = [[torch.empty(n, device=self.device) for _ in range(2)] for _ in range(self.stream_count)]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        for s in range(self.stream_count):
            src = self.x[s]
            for k in range(self.params["ops"]):
                dst = self.buf[s][k % 2]
                streams[s].launch(lambda src=src, dst=dst: torch.mul(src, 0.999, out=dst), "tiny_mul")
                src = dst

    def work_per_iteration(self) -> float:
        return float(self.params["numel"] * self.params["ops"] * self.stream_count)

    def verify(self) -> VerifyResult:
        ops = self.params["ops"]
        pairs = []
        for s in range(self.stream_count):
            expected = self.x[s]
            for _ in range(ops):
                expected = expected * 0.999
            pairs.append((self.buf[s][(ops - 1) % 2], expected))
        return compare_tensors(pairs, 1e-4, f"{len(pairs)} stream outputs vs serial recomputation")

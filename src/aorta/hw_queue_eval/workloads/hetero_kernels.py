"""hetero_kernels: large GEMMs interleaved with tiny element-wise kernels (the convoy effect).

Half the streams (rounded up) are "large": a GEMM chain; the others are "small": a chain of tiny
element-wise kernels. On one stream, that stream carries both: the serial baseline.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors


class HeteroKernels(Workload):
    INFO = WorkloadInfo(
        name="hetero_kernels",
        category="latency_sensitive",
        description="Large GEMMs interleaved with tiny element-wise kernels (convoy effect)",
        min_streams=1,
        max_streams=64,
        recommended_streams=8,
        switch_sensitivity="critical",
        throughput_unit="GFLOPS",
        work_scaling="per_stream",
    )
    SIZES = {
        "small": {"gemm": 384, "gemms": 2, "tiny": 1024, "tiny_ops": 8},
        "medium": {"gemm": 512, "gemms": 2, "tiny": 4096, "tiny_ops": 16},
        "large": {"gemm": 4096, "gemms": 2, "tiny": 65536, "tiny_ops": 32},
    }

    MODELS = (
        "Large GEMM chains on the first half of the streams (rounded up) and chains of tiny "
        "element-wise kernels on the rest; independent streams, no waits. On 1 stream that "
        "stream carries both (the serial baseline)."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        if streams == 1:
            return {"gemm+tiny": [0]}
        large = (streams + 1) // 2
        return {"gemm": list(range(large)), "tiny": list(range(large, streams))}

    def roles(self) -> list[tuple[bool, bool]]:
        """Per stream: (carries GEMMs, carries tiny kernels)."""
        if self.stream_count == 1:
            return [(True, True)]
        large = (self.stream_count + 1) // 2
        return [(i < large, i >= large) for i in range(self.stream_count)]

    def setup(self) -> None:
        import torch

        n, t = self.params["gemm"], self.params["tiny"]
        gen = self.generator()
        self.a, self.b, self.c, self.x, self.y = [], [], [], [], []
        for _ in range(self.stream_count):
            self.a.append(self.randn(gen, n, n, scale=n**-0.5))
            self.b.append(self.randn(gen, n, n, scale=n**-0.5))
            self.c.append([torch.empty(n, n, device=self.device) for _ in range(2)])
            self.x.append(self.randn(gen, t))
            self.y.append([torch.empty(t, device=self.device) for _ in range(2)])

    def _gemm_chain(self, s: int) -> list[tuple[Any, str]]:
        import torch

        ops = []
        src = self.a[s]
        for k in range(self.params["gemms"]):
            dst = self.c[s][k % 2]
            ops.append((lambda src=src, dst=dst, b=self.b[s]: torch.mm(src, b, out=dst), "gemm"))
            src = dst
        return ops

    def _tiny_chain(self, s: int) -> list[tuple[Any, str]]:
        import torch

        ops = []
        src = self.x[s]
        for k in range(self.params["tiny_ops"]):
            dst = self.y[s][k % 2]
            ops.append((lambda src=src, dst=dst: torch.add(src, 1.0, alpha=0.5, out=dst), "tiny_add"))
            src = dst
        return ops

    def run_iteration(self, streams: list[Any]) -> None:
        for s, (big, tiny) in enumerate(self.roles()):
            chain = (self._gemm_chain(s) if big else []) + (self._tiny_chain(s) if tiny else [])
            for fn, label in chain:
                streams[s].launch(fn, label)

    def work_per_iteration(self) -> float:
        n, t = self.params["gemm"], self.params["tiny"]
        flops = 0.0
        for big, tiny in self.roles():
            flops += (2.0 * n**3 * self.params["gemms"]) if big else 0.0
            flops += (2.0 * t * self.params["tiny_ops"]) if tiny else 0.0
        return flops

    def verify(self) -> VerifyResult:
        pairs = []
        gemms, tiny_ops = self.params["gemms"], self.params["tiny_ops"]
        for s, (big, tiny) in enumerate(self.roles()):
            if big:
                expected = self.a[s]
                for _ in range(gemms):
                    expected = expected @ self.b[s]
                pairs.append((self.c[s][(gemms - 1) % 2], expected))
            if tiny:
                expected = self.x[s]
                for _ in range(tiny_ops):
                    expected = expected + 0.5
                pairs.append((self.y[s][(tiny_ops - 1) % 2], expected))
        return compare_tensors(pairs, 1e-3, f"{len(pairs)} stream outputs vs serial recomputation")

    def describe(self) -> JsonObject:
        roles = self.roles()
        return {
            **super().describe(),
            "large_streams": [i for i, r in enumerate(roles) if r[0]],
            "small_streams": [i for i, r in enumerate(roles) if r[1]],
        }

"""async_dataload: batches copied host→device on loader streams, consumed by compute streams.

Loader streams (the first half, rounded down) copy each batch from host memory to the device
(pinned memory + non_blocking on GPU; a memcpy-bound op on the CPU backend, see transfer.py) and
normalise it; compute streams (the rest) run the model on a batch once its loader is done with it
(prefetch before use). Loading of later batches overlaps compute on earlier ones.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    round_robin_edges,
)
from aorta.hw_queue_eval.workloads.transfer import copy, host_buffer


class AsyncDataload(Workload):
    INFO = WorkloadInfo(
        name="async_dataload",
        category="pipeline",
        description="Pinned host→device batch copies on loader streams feeding compute streams",
        min_streams=4,
        max_streams=12,
        recommended_streams=6,
        switch_sensitivity="medium",
        throughput_unit="images/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"batches": 6, "images": 8, "pixels": 3 * 32 * 32, "hidden": 64, "classes": 10},
        "medium": {"batches": 12, "images": 64, "pixels": 3 * 64 * 64, "hidden": 512, "classes": 100},
        "large": {"batches": 12, "images": 256, "pixels": 3 * 224 * 224, "hidden": 1024, "classes": 1000},
    }
    MODELS = (
        "Asynchronous data loading: loader streams (first half, rounded down) copy batches "
        "host→device (pinned + non_blocking on GPU; a memcpy op on the CPU backend) and "
        "normalise them; compute streams wait for a batch's loader and run the model on it."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        loaders = streams // 2
        return {
            "loader (H2D copy + normalise)": list(range(loaders)),
            "compute": list(range(loaders, streams)),
        }

    def declared_edges(self) -> set[tuple[int, int]]:
        """Batch b is loaded on loader b mod L and read by compute stream b mod C."""
        loaders, compute = self.stream_roles(self.stream_count).values()
        return round_robin_edges(loaders, compute, self.params["batches"])

    def setup(self) -> None:
        import torch

        p = self.params
        nb, n, px, h, c = p["batches"], p["images"], p["pixels"], p["hidden"], p["classes"]
        self.require_memory(4 * (2 * nb * n * px + px * h + h * c + nb * n * c))
        gen, dev = self.generator(), self.device
        self.host = [host_buffer(dev, n, px, source=torch.rand(n, px, generator=gen)) for _ in range(nb)]
        self.w1 = self.randn(gen, px, h, scale=px**-0.5)
        self.w2 = self.randn(gen, h, c, scale=h**-0.5)
        self.staged = [torch.empty(n, px, device=dev) for _ in range(nb)]
        self.logits = [torch.empty(n, c, device=dev) for _ in range(nb)]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        roles = list(self.stream_roles(self.stream_count).values())
        loaders, compute = [streams[i] for i in roles[0]], [streams[i] for i in roles[1]]
        for b in range(self.params["batches"]):
            loader, worker = loaders[b % len(loaders)], compute[b % len(compute)]
            loader.launch(lambda b=b: copy(self.staged[b], self.host[b]), "h2d_copy")
            loader.launch(lambda b=b: self.staged[b].sub_(0.5).mul_(4.0), "normalise")
            worker.wait(loader)  # the batch is on the device before the model reads it
            worker.launch(
                lambda b=b: torch.mm(torch.relu(self.staged[b] @ self.w1), self.w2, out=self.logits[b]),
                "model",
            )

    def work_per_iteration(self) -> float:
        return float(self.params["batches"] * self.params["images"])

    def verify(self) -> VerifyResult:
        import torch

        pairs = []
        for b, host in enumerate(self.host):
            x = (host.to(self.device) - 0.5) * 4.0
            pairs.append((self.logits[b], torch.relu(x @ self.w1) @ self.w2))
        return compare_tensors(pairs, 1e-3, "model outputs of every batch vs serial recomputation")

    def describe(self) -> JsonObject:
        p = self.params
        return {
            **super().describe(),
            "copied_bytes_per_iteration": 4 * p["batches"] * p["images"] * p["pixels"],
        }

"""graph_subgraphs: fork/join of independent MLP branches (a graph split into parallel subgraphs).

Stream 0 forks (input projection) and joins (sum of the branches + residual); streams 1..S-1 each
run one branch MLP, after waiting for the fork; stream 0 waits for every branch before the join.
The branches split one fixed hidden width, so the work per sample does not grow with streams.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    split_sizes,
)


class GraphSubgraphs(Workload):
    INFO = WorkloadInfo(
        name="graph_subgraphs",
        category="latency_sensitive",
        description="Fork/join of independent MLP branches, one branch per stream",
        min_streams=4,
        max_streams=32,
        recommended_streams=8,
        switch_sensitivity="high",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"batch": 32, "hidden": 64, "branch_width": 256},
        "medium": {"batch": 256, "hidden": 512, "branch_width": 2048},
        "large": {"batch": 2048, "hidden": 4096, "branch_width": 16384},
    }
    MODELS = (
        "Fork/join: stream 0 runs the fork (input projection), every other stream one "
        "branch MLP that waits for the fork; stream 0 waits for all branches and joins "
        "(sum + residual). The branches split one fixed width: work per sample is fixed."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"fork+join": [0], "branch": list(range(1, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Fork: every branch waits for stream 0; join: stream 0 waits for every branch."""
        branches = range(1, self.stream_count)
        return {(0, b) for b in branches} | {(b, 0) for b in branches}

    def setup(self) -> None:
        import torch

        p = self.params
        b, h = p["batch"], p["hidden"]
        self.widths = split_sizes(p["branch_width"], self.stream_count - 1)
        gen, dev = self.generator(), self.device
        self.x = self.randn(gen, b, h)
        self.w_in = self.randn(gen, h, h, scale=h**-0.5)
        self.w1 = [self.randn(gen, h, w, scale=h**-0.5) for w in self.widths]
        self.w2 = [self.randn(gen, w, h, scale=w**-0.5) for w in self.widths]
        self.xp = torch.empty(b, h, device=dev)
        self.hid = [torch.empty(b, w, device=dev) for w in self.widths]
        self.out = [torch.empty(b, h, device=dev) for _ in self.widths]
        self.y = torch.empty(b, h, device=dev)

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        main = streams[0]

        def fork() -> None:
            torch.mm(self.x, self.w_in, out=self.xp)
            self.xp.relu_()

        main.launch(fork, "fork")
        for i in range(len(self.widths)):
            stream = streams[i + 1]
            stream.wait(main)

            def up(i: int = i) -> None:
                torch.mm(self.xp, self.w1[i], out=self.hid[i])
                self.hid[i].relu_()

            stream.launch(up, "branch_up")
            stream.launch(lambda i=i: torch.mm(self.hid[i], self.w2[i], out=self.out[i]), "branch_down")
        for i in range(len(self.widths)):
            main.wait(streams[i + 1])

        def join() -> None:
            self.y.copy_(self.xp)
            for out in self.out:
                self.y.add_(out)

        main.launch(join, "join")

    def work_per_iteration(self) -> float:
        return float(self.params["batch"])

    def verify(self) -> VerifyResult:
        import torch

        xp = torch.relu(self.x @ self.w_in)
        y = xp.clone()
        for w1, w2 in zip(self.w1, self.w2, strict=True):
            y += torch.relu(xp @ w1) @ w2
        return compare_tensors([(self.y, y)], 1e-3, "joined output vs serial recomputation")

"""moe: a gating stream, one stream per expert, a combine (mixture-of-experts layer).

Stream 0 computes the router and, at the end, the combine; streams 1..S-1 each hold one expert.
Routing is expert-choice with a fixed capacity (each expert takes its top tokens by gate score),
so every buffer has a static shape. The token count is fixed: more streams mean more, smaller
experts, not more work. Under torchrun stream 0 then sends the combined tokens back to their
owner ranks with a real all-to-all (token exchange); alone, there is nothing to exchange.
"""

from __future__ import annotations

from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors
from aorta.hw_queue_eval.workloads.collectives import Collectives


class MixtureOfExperts(Workload):
    INFO = WorkloadInfo(
        name="moe",
        category="distributed",
        description="Gating stream, one stream per expert (top-k routing), a combine",
        min_streams=4,
        max_streams=32,
        recommended_streams=16,
        switch_sensitivity="critical",
        throughput_unit="tokens/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"tokens": 256, "hidden": 128, "ffn": 256, "top_k": 2},
        "medium": {"tokens": 1024, "hidden": 512, "ffn": 1024, "top_k": 2},
        "large": {"tokens": 8192, "hidden": 4096, "ffn": 8192, "top_k": 2},
    }

    MODELS = (
        "A mixture-of-experts layer: stream 0 computes the router (gate GEMM + softmax); "
        "each other stream is one expert that waits for the router, picks its top tokens "
        "(expert-choice, fixed capacity) and runs its FFN; stream 0 waits for every expert "
        "and combines. Tokens are fixed: more streams mean more, smaller experts."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"gate+combine": [0], "expert": list(range(1, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Every expert waits for the router; the combine waits for every expert."""
        experts = range(1, self.stream_count)
        return {(0, e) for e in experts} | {(e, 0) for e in experts}

    @property
    def experts(self) -> int:
        return self.stream_count - 1

    @property
    def capacity(self) -> int:
        p = self.params
        return min(p["tokens"], max(1, p["tokens"] * p["top_k"] // self.experts))

    def setup(self) -> None:
        import torch

        p, e, c = self.params, self.experts, self.capacity
        t, h, f = p["tokens"], p["hidden"], p["ffn"]
        gen = self.generator()
        dev = self.device
        self.x = self.randn(gen, t, h)
        self.w_gate = self.randn(gen, h, e, scale=h**-0.5)
        self.w1 = [self.randn(gen, h, f, scale=h**-0.5) for _ in range(e)]
        self.w2 = [self.randn(gen, f, h, scale=f**-0.5) for _ in range(e)]
        self.logits = torch.empty(t, e, device=dev)
        self.probs = torch.empty(t, e, device=dev)
        self.gate_vals = [torch.empty(c, device=dev) for _ in range(e)]
        self.gate_idx = [torch.empty(c, dtype=torch.long, device=dev) for _ in range(e)]
        self.x_in = [torch.empty(c, h, device=dev) for _ in range(e)]
        self.hid = [torch.empty(c, f, device=dev) for _ in range(e)]
        self.out = [torch.empty(c, h, device=dev) for _ in range(e)]
        self.contrib = [torch.empty(t, h, device=dev) for _ in range(e)]
        self.y = torch.empty(t, h, device=dev)
        self.comm = Collectives()
        if self.comm.real and t % self.comm.world_size:
            raise UsageError(
                f"moe: {t} tokens do not split over {self.comm.world_size} ranks: "
                "use a world size that divides the token count"
            )
        self.exchanged = torch.empty(t, h, device=dev) if self.comm.real else None

    def _expert_ops(self, e: int) -> list[tuple[Any, str]]:
        import torch

        c = self.capacity

        def route() -> None:
            torch.topk(self.probs[:, e], c, out=(self.gate_vals[e], self.gate_idx[e]))
            torch.index_select(self.x, 0, self.gate_idx[e], out=self.x_in[e])

        def ffn() -> None:
            torch.mm(self.x_in[e], self.w1[e], out=self.hid[e])
            self.hid[e].relu_()
            torch.mm(self.hid[e], self.w2[e], out=self.out[e])
            self.out[e].mul_(self.gate_vals[e].unsqueeze(1))

        def scatter() -> None:
            self.contrib[e].zero_()
            self.contrib[e].index_add_(0, self.gate_idx[e], self.out[e])

        return [(route, "route"), (ffn, "expert_ffn"), (scatter, "scatter")]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        gate = streams[0]
        gate.launch(lambda: torch.mm(self.x, self.w_gate, out=self.logits), "gate_mm")
        gate.launch(lambda: self.probs.copy_(torch.softmax(self.logits, dim=-1)), "gate_softmax")
        for e in range(self.experts):
            stream = streams[e + 1]
            stream.wait(gate)
            for fn, label in self._expert_ops(e):
                stream.launch(fn, label)
        for e in range(self.experts):
            gate.wait(streams[e + 1])

        def combine() -> None:
            self.y.copy_(self.contrib[0])
            for e in range(1, self.experts):
                self.y.add_(self.contrib[e])

        gate.launch(combine, "combine")
        if self.exchanged is not None:  # under torchrun: tokens go back to their owner ranks
            gate.launch(lambda: self.comm.all_to_all(self.exchanged, self.y), "all_to_all")

    def work_per_iteration(self) -> float:
        return float(self.params["tokens"])

    def verify(self) -> VerifyResult:
        import torch

        probs = torch.softmax(self.x @ self.w_gate, dim=-1)
        y = torch.zeros_like(self.y)
        for e in range(self.experts):
            vals, idx = torch.topk(probs[:, e], self.capacity)
            out = torch.relu(self.x[idx] @ self.w1[e]) @ self.w2[e] * vals.unsqueeze(1)
            y.index_add_(0, idx, out)
        pairs = [(self.y, y)]
        if self.exchanged is not None:  # every rank holds the same tokens: chunk r = my chunk
            world, rank = self.comm.world_size, self.comm.rank
            mine = y.chunk(world)[rank]
            pairs += [(chunk, mine) for chunk in self.exchanged.chunk(world)]
        return compare_tensors(
            pairs, 1e-3, "combined output (and exchanged tokens under torchrun) vs serial recomputation"
        )

    def describe(self) -> JsonObject:
        return {
            **super().describe(),
            "collectives": self.comm.describe(),
            "experts": self.experts,
            "capacity": self.capacity,
            "gate_stream": 0,
            "expert_streams": list(range(1, self.stream_count)),
        }

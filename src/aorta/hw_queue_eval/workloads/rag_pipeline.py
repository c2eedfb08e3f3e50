"""rag_pipeline: a 4-stage retrieval-augmented generation pipeline over query micro-batches.

The streams are cut into four stage groups (embed, retrieve, rerank, generate; sizes differ by at
most one). Each query micro-batch flows through the stages; micro-batch m runs stage g on stream
m mod |group g| of that group, after waiting for its previous stage. Different micro-batches
occupy different stages at the same time: a pipeline.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    pipeline_edges,
    split_groups,
)

STAGES = ("embed", "retrieve", "rerank", "generate")


class RagPipeline(Workload):
    INFO = WorkloadInfo(
        name="rag_pipeline",
        category="inference",
        description="4-stage RAG pipeline (embed, retrieve, rerank, generate) over micro-batches",
        min_streams=4,
        max_streams=12,
        recommended_streams=8,
        switch_sensitivity="high",
        throughput_unit="queries/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"micro_batches": 6, "queries": 8, "hidden": 64, "docs": 512, "top_k": 4},
        "medium": {"micro_batches": 6, "queries": 32, "hidden": 512, "docs": 16384, "top_k": 8},
        "large": {"micro_batches": 12, "queries": 128, "hidden": 1024, "docs": 262144, "top_k": 16},
    }
    MODELS = (
        "Retrieval-augmented generation as a pipeline: the streams form four stage groups "
        "(embed, retrieve = similarity + top-k over a document matrix, rerank, generate); "
        "each query micro-batch waits for its previous stage, so micro-batches overlap "
        "across stages."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return dict(zip(STAGES, split_groups(streams, len(STAGES)), strict=True))

    def declared_edges(self) -> set[tuple[int, int]]:
        """Micro-batch m goes embed → retrieve → rerank → generate, on stream m mod n of each."""
        groups = list(self.stream_roles(self.stream_count).values())
        return pipeline_edges(groups, self.params["micro_batches"])

    def setup(self) -> None:
        import torch

        p = self.params
        m, q, h, d, k = p["micro_batches"], p["queries"], p["hidden"], p["docs"], p["top_k"]
        self.require_memory(4 * (d * h + m * q * (3 * h + k * h + 2 * k)))
        gen, dev = self.generator(), self.device
        self.raw = [self.randn(gen, q, h) for _ in range(m)]
        self.w_embed = self.randn(gen, h, h, scale=h**-0.5)
        self.docs = self.randn(gen, d, h, scale=h**-0.5)
        self.w_rerank = self.randn(gen, h, h, scale=h**-0.5)
        self.w_gen = self.randn(gen, 2 * h, h, scale=(2 * h) ** -0.5)
        self.emb = [torch.empty(q, h, device=dev) for _ in range(m)]
        self.scores = [torch.empty(q, k, device=dev) for _ in range(m)]
        self.idx = [torch.empty(q, k, dtype=torch.long, device=dev) for _ in range(m)]
        self.context = [torch.empty(q, h, device=dev) for _ in range(m)]
        self.answer = [torch.empty(q, h, device=dev) for _ in range(m)]

    def _stage(self, stage: str, m: int) -> None:
        import torch

        if stage == "embed":
            torch.tanh(self.raw[m] @ self.w_embed, out=self.emb[m])
        elif stage == "retrieve":
            torch.topk(
                self.emb[m] @ self.docs.t(), self.params["top_k"], dim=1, out=(self.scores[m], self.idx[m])
            )
        elif stage == "rerank":
            self.context[m].copy_(self._rerank(self.emb[m], self.idx[m]))
        else:
            torch.tanh(torch.cat([self.emb[m], self.context[m]], dim=1) @ self.w_gen, out=self.answer[m])

    def _rerank(self, emb: Any, idx: Any) -> Any:
        """Cross-score the retrieved documents and mix them by their softmax weights."""
        import torch

        cand = self.docs[idx]  # (q, k, h)
        weights = torch.softmax(torch.einsum("qh,qkh->qk", emb @ self.w_rerank, cand), dim=1)
        return torch.einsum("qk,qkh->qh", weights, cand)

    def run_iteration(self, streams: list[Any]) -> None:
        groups = [[streams[i] for i in g] for g in self.stream_roles(self.stream_count).values()]
        for m in range(self.params["micro_batches"]):
            previous = None
            for stage, group in zip(STAGES, groups, strict=True):
                stream = group[m % len(group)]
                if previous is not None:
                    stream.wait(previous)
                stream.launch(lambda stage=stage, m=m: self._stage(stage, m), stage)
                previous = stream

    def work_per_iteration(self) -> float:
        return float(self.params["micro_batches"] * self.params["queries"])

    def verify(self) -> VerifyResult:
        import torch

        pairs = []
        for m in range(self.params["micro_batches"]):
            emb = torch.tanh(self.raw[m] @ self.w_embed)
            scores, idx = torch.topk(emb @ self.docs.t(), self.params["top_k"], dim=1)
            context = self._rerank(emb, idx)
            answer = torch.tanh(torch.cat([emb, context], dim=1) @ self.w_gen)
            pairs += [(self.scores[m], scores), (self.answer[m], answer)]
        return compare_tensors(pairs, 1e-3, "retrieval scores and answers vs serial pipeline")

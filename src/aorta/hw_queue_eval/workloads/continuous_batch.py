"""continuous_batch: prefill of new requests on some streams while others decode running ones.

Requests arrive in a fixed order. Prefill streams (the first half, rounded down) each compute the
KV cache of their requests' prompts; decode streams (the rest) each run the decode steps of their
requests, starting a request only once its prefill is done (prefill before decode). Decoding of
early requests overlaps the prefill of later ones, as in a continuous-batching server.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    round_robin_edges,
)


class ContinuousBatch(Workload):
    INFO = WorkloadInfo(
        name="continuous_batch",
        category="inference",
        description="Prefill of new requests overlapping decode of running ones",
        min_streams=4,
        max_streams=16,
        recommended_streams=8,
        switch_sensitivity="high",
        throughput_unit="tokens/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"requests": 8, "prompt": 32, "hidden": 64, "decode_steps": 4},
        "medium": {"requests": 16, "prompt": 256, "hidden": 1024, "decode_steps": 16},
        "large": {"requests": 32, "prompt": 2048, "hidden": 4096, "decode_steps": 32},
    }
    MODELS = (
        "Continuous batching: the first half of the streams (rounded down) prefill requests' "
        "prompts into their KV caches; the others decode (attention over the request's KV "
        "cache, one token per step) and start a request only after waiting for its "
        "prefill. Throughput counts prompt + generated tokens."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        prefill = streams // 2
        return {"prefill": list(range(prefill)), "decode": list(range(prefill, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Request r is prefilled on prefill r mod P and decoded (after it) on decode r mod D."""
        roles = self.stream_roles(self.stream_count)
        return round_robin_edges(roles["prefill"], roles["decode"], self.params["requests"])

    def setup(self) -> None:
        import torch

        p = self.params
        r, t, h = p["requests"], p["prompt"], p["hidden"]
        gen, dev = self.generator(), self.device
        self.prompts = [self.randn(gen, t, h) for _ in range(r)]
        self.w_k = self.randn(gen, h, h, scale=h**-0.5)
        self.w_v = self.randn(gen, h, h, scale=h**-0.5)
        self.w_q = self.randn(gen, h, h, scale=h**-0.5)
        self.w_o = self.randn(gen, h, h, scale=h**-0.5)
        self.keys = [torch.empty(t, h, device=dev) for _ in range(r)]
        self.values = [torch.empty(t, h, device=dev) for _ in range(r)]
        self.tokens = [torch.empty(p["decode_steps"], h, device=dev) for _ in range(r)]

    def _prefill(self, r: int) -> None:
        import torch

        torch.mm(self.prompts[r], self.w_k, out=self.keys[r])
        torch.mm(self.prompts[r], self.w_v, out=self.values[r])

    def _decode_step(self, prev: Any, keys: Any, values: Any) -> Any:
        """One generated token: attention of the previous token over the request's KV cache."""
        import torch

        q = prev @ self.w_q
        attn = torch.softmax(keys @ q * q.numel() ** -0.5, dim=0)
        return torch.tanh((attn @ values) @ self.w_o)

    def _decode_op(self, r: int, step: int) -> None:
        prev = self.prompts[r][-1] if step == 0 else self.tokens[r][step - 1]
        self.tokens[r][step].copy_(self._decode_step(prev, self.keys[r], self.values[r]))

    def run_iteration(self, streams: list[Any]) -> None:
        roles = self.stream_roles(self.stream_count)
        prefill = [streams[i] for i in roles["prefill"]]
        decode = [streams[i] for i in roles["decode"]]
        for r in range(self.params["requests"]):
            pstream, dstream = prefill[r % len(prefill)], decode[r % len(decode)]
            pstream.launch(lambda r=r: self._prefill(r), "prefill")
            dstream.wait(pstream)  # decode starts once this request's KV cache exists
            for step in range(self.params["decode_steps"]):
                dstream.launch(lambda r=r, step=step: self._decode_op(r, step), "decode_step")

    def work_per_iteration(self) -> float:
        p = self.params
        return float(p["requests"] * (p["prompt"] + p["decode_steps"]))

    def verify(self) -> VerifyResult:
        import torch

        pairs = []
        for r in range(self.params["requests"]):
            k, v = self.prompts[r] @ self.w_k, self.prompts[r] @ self.w_v
            pairs += [(self.keys[r], k), (self.values[r], v)]
            prev, out = self.prompts[r][-1], []
            for _ in range(self.params["decode_steps"]):
                prev = self._decode_step(prev, k, v)
                out.append(prev)
            pairs.append((self.tokens[r], torch.stack(out)))
        return compare_tensors(pairs, 1e-3, "KV caches and decoded tokens vs serial recomputation")

"""speculative_decode: a draft model proposes tokens, the target model verifies them in parallel.

Stream 0 runs the small draft model autoregressively, one proposed token per step. Streams
2..S-1 run the large target model on the proposed positions (position i on verifier i mod
(S-2)), each starting as soon as the draft has produced its position. Stream 1 waits for every
verifier and accepts the longest prefix where target and draft agree, then writes the next state.
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


class SpeculativeDecode(Workload):
    INFO = WorkloadInfo(
        name="speculative_decode",
        category="inference",
        description="Draft model proposes tokens; target model verifies them on parallel streams",
        min_streams=4,
        max_streams=12,
        recommended_streams=6,
        switch_sensitivity="high",
        throughput_unit="tokens/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {
            "batch": 4,
            "draft_hidden": 32,
            "hidden": 128,
            "vocab": 256,
            "lookahead": 10,
            "target_layers": 2,
        },
        "medium": {
            "batch": 8,
            "draft_hidden": 256,
            "hidden": 1024,
            "vocab": 4096,
            "lookahead": 10,
            "target_layers": 4,
        },
        "large": {
            "batch": 32,
            "draft_hidden": 1024,
            "hidden": 4096,
            "vocab": 32000,
            "lookahead": 10,
            "target_layers": 8,
        },
    }
    MODELS = (
        "Speculative decoding: stream 0 runs the draft model one proposed token per step; "
        "streams 2.. each verify proposed positions with the target model (position i on "
        "verifier i mod (S-2)), each waiting for the draft step that produced it; stream 1 "
        "waits for every verifier and accepts the agreeing prefix. Throughput counts "
        "verified positions (batch × lookahead)."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"draft": [0], "accept": [1], "verify": list(range(2, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Position i is verified (after its draft step) on verifier i mod V; acceptance waits
        for the draft and every verifier."""
        verifiers = list(range(2, self.stream_count))
        used = round_robin_edges([0], verifiers, self.params["lookahead"])
        return used | {(v, 1) for _, v in used} | {(0, 1)}

    def setup(self) -> None:
        import torch

        p = self.params
        b, hd, h, v, k = p["batch"], p["draft_hidden"], p["hidden"], p["vocab"], p["lookahead"]
        gen, dev = self.generator(), self.device
        self.state = self.randn(gen, b, hd)
        self.w_draft = self.randn(gen, hd, hd, scale=hd**-0.5)
        self.w_draft_head = self.randn(gen, hd, v, scale=hd**-0.5)
        self.w_up = self.randn(gen, hd, h, scale=hd**-0.5)
        self.w_target = [self.randn(gen, h, h, scale=h**-0.5) for _ in range(p["target_layers"])]
        self.w_head = self.randn(gen, h, v, scale=h**-0.5)
        self.draft_states = [torch.empty(b, hd, device=dev) for _ in range(k)]
        self.draft_tokens = [torch.empty(b, dtype=torch.long, device=dev) for _ in range(k)]
        self.target_tokens = [torch.empty(b, dtype=torch.long, device=dev) for _ in range(k)]
        self.accepted = torch.empty(b, dtype=torch.long, device=dev)

    def _draft_step(self, i: int) -> None:
        import torch

        prev = self.state if i == 0 else self.draft_states[i - 1]
        torch.tanh(prev @ self.w_draft, out=self.draft_states[i])
        torch.argmax(self.draft_states[i] @ self.w_draft_head, dim=-1, out=self.draft_tokens[i])

    def _target(self, draft_state: Any) -> Any:
        import torch

        hid = torch.tanh(draft_state @ self.w_up)
        for w in self.w_target:
            hid = torch.tanh(hid @ w)
        return torch.argmax(hid @ self.w_head, dim=-1)

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        draft, accept, verifiers = streams[0], streams[1], streams[2:]
        for i in range(self.params["lookahead"]):
            draft.launch(lambda i=i: self._draft_step(i), "draft_step")
            verifier = verifiers[i % len(verifiers)]
            verifier.wait(draft)  # position i exists once its draft step ran
            verifier.launch(
                lambda i=i: self.target_tokens[i].copy_(self._target(self.draft_states[i])), "target_verify"
            )
        for verifier in verifiers:
            accept.wait(verifier)
        accept.wait(draft)

        def accept_prefix() -> None:
            agree = torch.stack(
                [t == d for t, d in zip(self.target_tokens, self.draft_tokens, strict=True)], dim=1
            )
            self.accepted.copy_(agree.long().cumprod(dim=1).sum(dim=1))

        accept.launch(accept_prefix, "accept")

    def work_per_iteration(self) -> float:
        return float(self.params["batch"] * self.params["lookahead"])

    def verify(self) -> VerifyResult:
        import torch

        state = self.state
        agree, pairs = [], []
        for i in range(self.params["lookahead"]):
            state = torch.tanh(state @ self.w_draft)
            draft_token = torch.argmax(state @ self.w_draft_head, dim=-1)
            target_token = self._target(state)
            pairs.append((self.draft_tokens[i], draft_token))
            pairs.append((self.target_tokens[i], target_token))
            agree.append(target_token == draft_token)
        accepted = torch.stack(agree, dim=1).long().cumprod(dim=1).sum(dim=1)
        pairs.append((self.accepted, accepted))
        return compare_tensors(
            pairs, 0.0, "draft tokens, target tokens and accepted lengths vs serial decoding (exact)"
        )

"""activation_ckpt: activation checkpointing with recompute on side streams and grad all-reduce.

Stream 0 runs the forward pass (keeping only each segment's input: the checkpoints) and then the
backward pass, last segment first. Stream 1 is the comms stream: it all-reduces each segment's
weight gradients as soon as that segment's backward is done. Streams 2..S-1 recompute segments'
activations from their checkpoints (segment k on recompute stream k mod (S-2)); the backward of a
segment waits for its recompute, and recomputes of earlier segments overlap later backward work.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    split_sizes,
)
from aorta.hw_queue_eval.workloads.collectives import Collectives


class ActivationCheckpoint(Workload):
    INFO = WorkloadInfo(
        name="activation_ckpt",
        category="distributed",
        description="Checkpointed forward, recompute on side streams, backward + grad all-reduce",
        min_streams=4,
        max_streams=12,
        recommended_streams=6,
        switch_sensitivity="high",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"batch": 16, "hidden": 64, "layers": 10},
        "medium": {"batch": 128, "hidden": 1024, "layers": 10},
        "large": {"batch": 1024, "hidden": 4096, "layers": 20},
    }
    MODELS = (
        "Activation checkpointing: stream 0 runs forward (keeping only segment inputs) then "
        "backward, last segment first; streams 2.. recompute segment activations from "
        "their checkpoints (the backward of a segment waits for its recompute); stream 1 "
        "all-reduces each segment's weight gradients once its backward is done."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"forward+backward": [0], "comms (grad all-reduce)": [1], "recompute": list(range(2, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Recomputes wait for the forward, each segment's backward for its recompute stream,
        the gradient all-reduce for the backward."""
        recompute = range(2, self.stream_count)
        return {(0, r) for r in recompute} | {(r, 0) for r in recompute} | {(0, 1)}

    def setup(self) -> None:
        import torch

        self.comm = Collectives()
        p = self.params
        b, h, layers = p["batch"], p["hidden"], p["layers"]
        self.require_memory(4 * (layers * h * h * 3 + (2 * layers + 16) * b * h))
        self.segments: list[list[int]] = []
        start = 0
        for size in split_sizes(layers, self.stream_count - 2):
            self.segments.append(list(range(start, start + size)))
            start += size
        gen, dev = self.generator(), self.device
        self.x = self.randn(gen, b, h)
        self.w = [self.randn(gen, h, h, scale=h**-0.5) for _ in range(layers)]
        self.grad_out = self.randn(gen, b, h)
        self.fwd = [torch.empty(b, h, device=dev) for _ in range(2)]
        self.ckpt = [torch.empty(b, h, device=dev) for _ in self.segments]
        # one buffer set per segment: two segments must never write one boundary activation
        # (a recompute writes pre-ReLU values first, and the next segment would read them)
        self.recomputed = [
            [torch.empty(b, h, device=dev) for _ in range(len(seg) + 1)] for seg in self.segments
        ]
        self.gy = [torch.empty(b, h, device=dev) for _ in range(2)]
        self.gw = [torch.empty(h, h, device=dev) for _ in range(layers)]
        self.gw_reduced = [torch.empty(h, h, device=dev) for _ in range(layers)]
        self.y = torch.empty(b, h, device=dev)

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        main, comms, recompute = streams[0], streams[1], streams[2:]
        src = self.x
        step = 0
        for k, seg in enumerate(self.segments):  # forward: keep each segment's input only
            main.launch(lambda k=k, src=src: self.ckpt[k].copy_(src), "checkpoint")
            for layer in seg:
                dst = self.y if layer == seg[-1] and k == len(self.segments) - 1 else self.fwd[step % 2]
                main.launch(
                    lambda src=src, dst=dst, layer=layer: torch.mm(src, self.w[layer], out=dst).relu_(),
                    "forward",
                )
                src, step = dst, step + 1
        for stream in recompute:
            stream.wait(main)  # checkpoints exist once the forward pass is done
        for k, seg in enumerate(self.segments):

            def redo(k: int = k, seg: list[int] = seg) -> None:
                acts = self.recomputed[k]
                acts[0].copy_(self.ckpt[k])
                for i, layer in enumerate(seg):
                    torch.mm(acts[i], self.w[layer], out=acts[i + 1]).relu_()

            recompute[k % len(recompute)].launch(redo, "recompute")
        gy = self.grad_out
        step = 0
        for k in reversed(range(len(self.segments))):
            seg = self.segments[k]
            main.wait(recompute[k % len(recompute)])
            for i, layer in reversed(list(enumerate(seg))):
                dst = self.gy[step % 2]
                acts = self.recomputed[k]

                def backward(
                    layer: int = layer,
                    gy: Any = gy,
                    dst: Any = dst,
                    a_in: Any = acts[i],
                    a_out: Any = acts[i + 1],
                ) -> None:
                    gz = gy * (a_out > 0)
                    torch.mm(a_in.t(), gz, out=self.gw[layer])
                    torch.mm(gz, self.w[layer].t(), out=dst)

                main.launch(backward, "backward")
                gy, step = dst, step + 1
            comms.wait(main)
            for layer in seg:
                comms.launch(
                    lambda layer=layer: self.comm.all_reduce(self.gw_reduced[layer], self.gw[layer]),
                    "all_reduce",
                )
        self.last_grad_input = gy

    def work_per_iteration(self) -> float:
        return float(self.params["batch"])

    def verify(self) -> VerifyResult:
        import torch

        acts = [self.x]
        for w in self.w:
            acts.append(torch.relu(acts[-1] @ w))
        gy = self.grad_out
        pairs = [(self.y, acts[-1])]
        for layer in reversed(range(len(self.w))):
            gz = gy * (acts[layer + 1] > 0)
            pairs.append((self.gw_reduced[layer], (acts[layer].t() @ gz) * self.comm.world_size))
            gy = gz @ self.w[layer].t()
        pairs.append((self.last_grad_input, gy))
        return compare_tensors(
            pairs, 1e-3, "output, all-reduced weight gradients and input gradient vs serial recomputation"
        )

    def describe(self) -> JsonObject:
        return {
            **super().describe(),
            "collectives": self.comm.describe(),
            "segments": [[seg[0], seg[-1]] for seg in self.segments],
        }

"""zero_offload: ZeRO-Offload: gradients to the host, optimizer step on the host, params back.

Per layer: a compute stream computes the layer's weight gradient on the device; an offload stream
copies it device→host; a host-optimizer stream runs the Adam step on host memory; an upload stream
copies the new parameters host→device. Each stage waits for the previous one of its layer, so the
layers form a 4-stage pipeline. The streams are cut into those four groups (sizes differ by ≤ 1);
layer l uses stream l mod |group| of each. Copies are pinned + non_blocking on GPU and memcpy ops
on the CPU backend (transfer.py). On GPU the optimizer op first synchronises its own stream (the
CPU Adam step needs the gradient on the host), so its host time shows in the iteration time.
The step is computed from fixed initial optimizer state into separate buffers, so every
iteration does the same work and can be recomputed.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    pipeline_edges,
    split_groups,
)
from aorta.hw_queue_eval.workloads.transfer import copy, host_buffer, on_gpu

STAGES = ("compute", "offload_d2h", "host_optimizer", "upload_h2d")
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


def adam_step(p: Any, m: Any, v: Any, g: Any) -> tuple[Any, Any, Any]:
    """One Adam step from (p, m, v) with gradient g: the new (p, m, v)."""
    m_new = m * BETA1 + g * (1 - BETA1)
    v_new = v * BETA2 + g * g * (1 - BETA2)
    return p - LR * m_new / (v_new.sqrt() + EPS), m_new, v_new


class ZeroOffload(Workload):
    INFO = WorkloadInfo(
        name="zero_offload",
        category="pipeline",
        description="Grads offloaded to host, CPU Adam step, params uploaded back (ZeRO-Offload)",
        min_streams=4,
        max_streams=12,
        recommended_streams=6,
        switch_sensitivity="medium",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"layers": 6, "batch": 16, "hidden": 64},
        "medium": {"layers": 6, "batch": 128, "hidden": 1024},
        "large": {"layers": 12, "batch": 512, "hidden": 8192},
    }
    MODELS = (
        "ZeRO-Offload: four stage groups: compute (weight gradient on the device), offload "
        "(device→host copy), host optimizer (Adam on host memory), upload (host→device "
        "copy); each stage of a layer waits for the previous one, layers pipeline. Pinned + "
        "non_blocking copies on GPU, memcpy ops on the CPU backend."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return dict(zip(STAGES, split_groups(streams, len(STAGES)), strict=True))

    def declared_edges(self) -> set[tuple[int, int]]:
        """Each layer's four stages run in order, layer l on stream l mod n of each stage group."""
        return pipeline_edges(list(self.stream_roles(self.stream_count).values()), self.params["layers"])

    def setup(self) -> None:
        import torch

        p = self.params
        layers, b, h = p["layers"], p["batch"], p["hidden"]
        host_bytes = 4 * layers * h * h * 7
        device_bytes = 4 * (layers * (3 * h * h + 2 * b * h))
        if on_gpu(self.device):
            self.require_memory(device_bytes)
            from aorta.hw_queue_eval.workloads.memory import check_fits

            check_fits(self.INFO.name, self.size, "cpu", host_bytes)
        else:
            self.require_memory(host_bytes + device_bytes)
        gen, dev = self.generator(), self.device
        self.x = [self.randn(gen, b, h) for _ in range(layers)]
        self.t = [self.randn(gen, b, h) for _ in range(layers)]
        self.w = [self.randn(gen, h, h, scale=h**-0.5) for _ in range(layers)]
        self.grad = [torch.empty(h, h, device=dev) for _ in range(layers)]
        self.p0 = [host_buffer(dev, h, h, source=w) for w in self.w]
        self.m0 = [
            host_buffer(dev, h, h, source=torch.rand(h, h, generator=gen) * 1e-2) for _ in range(layers)
        ]
        self.v0 = [
            host_buffer(dev, h, h, source=torch.rand(h, h, generator=gen) * 1e-4) for _ in range(layers)
        ]
        self.g_host = [host_buffer(dev, h, h) for _ in range(layers)]
        self.p_new = [host_buffer(dev, h, h) for _ in range(layers)]
        self.m_new = [host_buffer(dev, h, h) for _ in range(layers)]
        self.v_new = [host_buffer(dev, h, h) for _ in range(layers)]
        self.w_new = [torch.empty(h, h, device=dev) for _ in range(layers)]

    def _optimizer(self, layer: int) -> None:
        import torch

        if on_gpu(self.device):
            torch.cuda.current_stream().synchronize()  # the gradient has reached the host
        p, m, v = adam_step(self.p0[layer], self.m0[layer], self.v0[layer], self.g_host[layer])
        self.p_new[layer].copy_(p)
        self.m_new[layer].copy_(m)
        self.v_new[layer].copy_(v)

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        groups = [[streams[i] for i in g] for g in self.stream_roles(self.stream_count).values()]
        ops = [
            (
                lambda i: torch.mm(self.x[i].t(), self.x[i] @ self.w[i] - self.t[i], out=self.grad[i]),
                "weight_grad",
            ),
            (lambda i: copy(self.g_host[i], self.grad[i]), "d2h_copy"),
            (self._optimizer, "cpu_adam"),
            (lambda i: copy(self.w_new[i], self.p_new[i]), "h2d_copy"),
        ]
        for layer in range(self.params["layers"]):
            previous = None
            for (fn, label), group in zip(ops, groups, strict=True):
                stream = group[layer % len(group)]
                if previous is not None:
                    stream.wait(previous)
                stream.launch(lambda fn=fn, layer=layer: fn(layer), label)
                previous = stream

    def work_per_iteration(self) -> float:
        return float(self.params["batch"])

    def verify(self) -> VerifyResult:
        pairs = []
        for i in range(self.params["layers"]):
            g = self.x[i].t() @ (self.x[i] @ self.w[i] - self.t[i])
            p, m, v = adam_step(self.p0[i], self.m0[i], self.v0[i], g.cpu())
            pairs += [
                (self.g_host[i], g.cpu()),
                (self.m_new[i], m),
                (self.v_new[i], v),
                (self.w_new[i].cpu(), p),
            ]
        return compare_tensors(
            pairs,
            1e-3,
            "offloaded gradients, host Adam state and uploaded parameters vs serial recomputation",
        )

    def describe(self) -> JsonObject:
        h = self.params["hidden"]
        return {**super().describe(), "copied_bytes_per_iteration": 2 * 4 * h * h * self.params["layers"]}

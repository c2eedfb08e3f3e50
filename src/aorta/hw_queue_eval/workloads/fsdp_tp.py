"""fsdp_tp: FSDP parameter all-gather prefetch + tensor-parallel compute + gradient reduce-scatter.

Stream 0 is the comms stream: it all-gathers layer l+1's parameters while layer l computes
(prefetch), and reduce-scatters each layer's gradient stand-in after the layer. Streams 1..S-1 are
tensor-parallel shards: each computes a column slice of every layer's output; before a layer
they wait for its parameters (prefetch before use) and for every shard of the previous layer
(the activation exchange of tensor parallelism).
"""

from __future__ import annotations

from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import (
    VerifyResult,
    Workload,
    WorkloadInfo,
    compare_tensors,
    split_sizes,
)
from aorta.hw_queue_eval.workloads.collectives import Collectives


class FsdpTp(Workload):
    INFO = WorkloadInfo(
        name="fsdp_tp",
        category="distributed",
        description="FSDP all-gather prefetch + tensor-parallel shards + reduce-scatter",
        min_streams=4,
        max_streams=16,
        recommended_streams=10,
        switch_sensitivity="high",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"batch": 16, "hidden": 64, "layers": 3},
        "medium": {"batch": 128, "hidden": 1024, "layers": 4},
        "large": {"batch": 1024, "hidden": 8192, "layers": 4},
    }
    MODELS = (
        "FSDP + tensor parallelism over a stack of layers: the comms stream all-gathers each "
        "layer's sharded parameters one layer ahead (prefetch) and reduce-scatters each "
        "layer's gradient stand-in; every other stream is a tensor-parallel shard computing "
        "a column slice of each layer after waiting for the gathered parameters and for "
        "all shards of the previous layer. Real collectives under torchrun."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"comms (all-gather, reduce-scatter)": [0], "tp_shard": list(range(1, streams))}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Shards wait for the all-gather (prefetch before use) and, from layer 2 on, for every
        other shard of the previous layer; the reduce-scatter waits for every shard."""
        shards = range(1, self.stream_count)
        edges = {(0, s) for s in shards} | {(s, 0) for s in shards}
        if self.params["layers"] > 1:
            edges |= {(a, b) for a in shards for b in shards if a != b}
        return edges

    def setup(self) -> None:
        import torch

        self.comm = Collectives()
        p = self.params
        b, h, layers = p["batch"], p["hidden"], p["layers"]
        world = self.comm.world_size
        if h * h % world or h % world:
            raise UsageError(
                f"fsdp_tp: hidden size {h} is not divisible by the world size "
                f"{world}: use a world size that divides {h}"
            )
        self.require_memory(4 * (layers * h * h * 2 + layers * b * h * 2 + b * h))
        gen, dev = self.generator(), self.device
        self.x = self.randn(gen, b, h)
        self.full = [self.randn(gen, h, h, scale=h**-0.5) for _ in range(layers)]
        chunk = h * h // world
        rank = self.comm.rank
        self.shard = [w.flatten()[rank * chunk : (rank + 1) * chunk].clone() for w in self.full]
        self.gathered = [torch.empty(h, h, device=dev) for _ in range(layers)]
        self.act = [torch.empty(b, h, device=dev) for _ in range(layers)]
        self.grad_shard = [torch.empty(b * h // world, device=dev) for _ in range(layers)]
        widths = split_sizes(h, self.stream_count - 1)
        self.cols = [(sum(widths[:i]), sum(widths[: i + 1])) for i in range(len(widths))]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        comms, shards = streams[0], streams[1:]
        layers = self.params["layers"]

        def gather(layer: int) -> None:
            comms.launch(
                lambda: self.comm.all_gather(self.gathered[layer].view(-1), self.shard[layer]), "all_gather"
            )
            for stream in shards:
                stream.wait(comms)  # the layer's parameters are gathered before it is used

        gather(0)
        for layer in range(layers):
            src = self.x if layer == 0 else self.act[layer - 1]
            if layer > 0:
                for stream in shards:
                    for other in shards:
                        stream.wait(other)  # every shard of the previous layer is done
            for k, stream in enumerate(shards):
                lo, hi = self.cols[k]

                def shard_mm(src: Any = src, layer: int = layer, lo: int = lo, hi: int = hi) -> None:
                    self.act[layer][:, lo:hi].copy_(torch.relu(src @ self.gathered[layer][:, lo:hi]))

                stream.launch(shard_mm, "tp_matmul")
            if layer + 1 < layers:
                gather(layer + 1)  # prefetch: overlaps this layer's compute
            for stream in shards:
                comms.wait(stream)
            comms.launch(
                lambda layer=layer: self.comm.reduce_scatter(
                    self.grad_shard[layer], self.act[layer].view(-1)
                ),
                "reduce_scatter",
            )

    def work_per_iteration(self) -> float:
        return float(self.params["batch"])

    def verify(self) -> VerifyResult:
        import torch

        pairs = []
        a = self.x
        world, rank = self.comm.world_size, self.comm.rank
        for layer, w in enumerate(self.full):
            a = torch.relu(a @ w)
            pairs.append((self.act[layer], a))
            chunk = a.numel() // world
            pairs.append((self.grad_shard[layer], a.flatten()[rank * chunk : (rank + 1) * chunk] * world))
        return compare_tensors(
            pairs,
            1e-3,
            f"{len(self.full)} layers' activations and reduce-scattered gradients vs serial recomputation",
        )

    def describe(self) -> JsonObject:
        return {**super().describe(), "collectives": self.comm.describe()}

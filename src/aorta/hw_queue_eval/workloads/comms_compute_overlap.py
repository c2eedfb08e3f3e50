"""comms_compute_overlap: gradient all-reduce on a comms stream overlapping backward GEMMs.

Streams 1..S-1 each compute the gradient bucket of one layer slice (GEMMs); stream 0 waits for
each bucket's GEMMs and all-reduces it (a real collective under torchrun, a one-rank copy
otherwise), overlapping with the GEMMs of later buckets. On 1 stream everything runs on stream 0:
the serial baseline. Throughput counts GEMM FLOPs only; the bytes all-reduced are in `describe`.

Upstream AORTA 0.3.0's knobs (`run --mode --mm-dim --num-compute --num-coll --comm-size
--compute-streams --comp-dtype --comm-dtype`) are this class's options (docs/running.md):
`compute_only` runs GEMM sets on every stream; `comms_only` runs the collectives alone on the
comms stream (throughput in GB/s of bytes all-reduced); `--comm-size` or a `--comm-dtype` other
than the GEMMs' replaces the gradient buckets by one separate tensor of that size, all-reduced
without waiting for any GEMM (pure overlap, as upstream models it).
"""

from __future__ import annotations

from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors
from aorta.hw_queue_eval.workloads.collectives import Collectives

MODES = ("comms_compute", "compute_only", "comms_only")
DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}
#: the relative error a GEMM in each dtype may show against its float32 recomputation
TOLERANCE = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 5e-2}
MAX_DIM = 1 << 16  # beyond this a GEMM side is a typo (64 Ki × 64 Ki floats = 16 GiB)
MAX_COUNT = 1 << 12  # GEMMs or collectives per iteration
MAX_COMM_BYTES = 1 << 36  # 64 GiB
OPTION_NAMES = (
    "mode",
    "mm_dim",
    "num_compute",
    "num_coll",
    "comm_bytes",
    "compute_streams",
    "comp_dtype",
    "comm_dtype",
    "process_groups",  # torchrun only: lists of global ranks (commands/upstream_knobs.py checks them)
    "async_op",  # torchrun only: collectives return at once, one wait op ends the iteration
)


def _count(options: JsonObject, name: str, flag: str, high: int) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise UsageError(f"{flag} must be a whole number in 1..{high}, got {value!r}")
    return value


class CommsComputeOverlap(Workload):
    INFO = WorkloadInfo(
        name="comms_compute_overlap",
        category="distributed",
        description="All-reduce of gradient buckets on a comms stream overlapping GEMMs",
        min_streams=1,
        max_streams=32,
        recommended_streams=4,
        switch_sensitivity="high",
        throughput_unit="TFLOPS",
        work_scaling="per_stream",
    )
    SIZES = {
        "small": {"n": 128, "gemms": 2},
        "medium": {"n": 1024, "gemms": 2},
        "large": {"n": 8192, "gemms": 2},
    }
    MODELS = (
        "Backward pass with overlapped gradient all-reduce: every compute stream runs GEMMs "
        "producing one gradient bucket; the comms stream waits for each bucket and "
        "all-reduces it (real collective under torchrun). At 1 stream the GEMMs and the "
        "all-reduce share stream 0. TFLOPS counts GEMM work only. Knobs: --mode, --mm-dim, "
        "--num-compute, --num-coll, --comm-size, --compute-streams, --comp-dtype, --comm-dtype."
    )

    @classmethod
    def check_options(cls, options: JsonObject, streams: int) -> JsonObject:
        """Validate upstream's knobs against `streams`; the flag named in each error."""
        unknown = sorted(set(options) - set(OPTION_NAMES))
        if unknown:
            raise UsageError(f"comms_compute_overlap has no option {unknown[0]!r}")
        mode = options.get("mode") or "comms_compute"
        if mode not in MODES:
            raise UsageError(f"unknown --mode {mode!r}: use one of {', '.join(MODES)}")
        dims = options.get("mm_dim")
        if dims is not None and (
            len(dims) != 3
            or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIM for d in dims)
        ):
            raise UsageError(f"--mm-dim needs M,N,K (or one value) in 1..{MAX_DIM}, got {dims!r}")
        for name, flag in (("comp_dtype", "--comp-dtype"), ("comm_dtype", "--comm-dtype")):
            if options.get(name) is not None and options[name] not in DTYPES:
                raise UsageError(f"unknown {flag} {options[name]!r}: use one of {', '.join(DTYPES)}")
        _count(options, "num_compute", "--num-compute", MAX_COUNT)
        _count(options, "num_coll", "--num-coll", MAX_COUNT)
        _count(options, "compute_streams", "--compute-streams", 32)
        _count(options, "comm_bytes", "--comm-size", MAX_COMM_BYTES)
        if mode == "comms_only" and streams != 1:
            raise UsageError(
                "--mode comms_only runs the collectives on the comms stream alone: use --streams 1"
            )
        if mode == "comms_only" and options.get("compute_streams") is not None:
            raise UsageError("--compute-streams has no effect with --mode comms_only: drop it")
        if mode == "comms_compute" and streams == 1 and options.get("compute_streams", 1) != 1:
            raise UsageError("--compute-streams needs --streams ≥ 2 (stream 0 is the comms stream)")
        return {**options, "mode": mode}

    @property
    def mode(self) -> str:
        return str(self.options.get("mode", "comms_compute"))

    @property
    def dims(self) -> tuple[int, int, int]:
        n = self.params["n"]
        return tuple(self.options.get("mm_dim") or (n, n, n))

    @property
    def gemms(self) -> int:
        return int(self.options.get("num_compute") or self.params["gemms"])

    @property
    def buckets(self) -> int:
        """GEMM sets (one gradient bucket each): --compute-streams, else one per compute stream."""
        if self.mode == "comms_only":
            return 0
        if self.options.get("compute_streams"):
            return int(self.options["compute_streams"])
        return self.stream_count if self.mode == "compute_only" else max(1, self.stream_count - 1)

    @property
    def collectives(self) -> int:
        if self.mode == "compute_only":
            return 0
        return int(self.options.get("num_coll") or max(1, self.buckets))

    @property
    def separate_comm(self) -> bool:
        """All-reduce one separate tensor instead of the gradient buckets (upstream's comm tensor)."""
        comp = self.options.get("comp_dtype") or "float32"
        comm = self.options.get("comm_dtype") or "float32"
        return self.mode == "comms_only" or self.options.get("comm_bytes") is not None or comp != comm

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        if streams == 1:
            return {"compute+comms": [0]}
        return {"comms": [0], "compute": list(range(1, streams))}

    def compute_stream(self, k: int) -> int:
        """The stream of GEMM set k (sets beyond the compute streams share them round-robin)."""
        if self.mode == "compute_only":
            return k % self.stream_count
        return 1 + k % (self.stream_count - 1) if self.stream_count > 1 else 0

    def declared_edges(self) -> set[tuple[int, int]]:
        """The comms stream all-reduces each gradient bucket after the stream that computed it
        (none when it all-reduces a separate tensor, or shares stream 0 with the GEMMs)."""
        if self.separate_comm:
            return set()
        edges = {(self.compute_stream(c % self.buckets), 0) for c in range(self.collectives)}
        return {(p, c) for p, c in edges if p != c}

    def setup(self) -> None:
        import torch

        self.comm = Collectives(self.options.get("process_groups"), bool(self.options.get("async_op")))
        m, n, k = self.dims
        comp = getattr(torch, self.options.get("comp_dtype") or "float32")
        comm_name = self.options.get("comm_dtype") or "float32"
        gen, dev = self.generator(), self.device
        self.a = [self.randn(gen, m, k, scale=k**-0.5).to(comp) for _ in range(self.buckets)]
        self.b = [self.randn(gen, k, n, scale=k**-0.5).to(comp) for _ in range(self.buckets)]
        self.c = [[torch.empty(m, n, device=dev, dtype=comp) for _ in range(2)] for _ in range(self.buckets)]
        if self.separate_comm:
            size = self.options.get("comm_bytes")
            elements = max(1, size // DTYPES[comm_name]) if size else m * n  # default: a bucket's size
            self.comm_in = self.randn(gen, elements).to(getattr(torch, comm_name))
            self.reduced = [torch.empty_like(self.comm_in) for _ in range(min(2, self.collectives))]
        else:
            self.reduced = [
                torch.empty(m, n, device=dev, dtype=comp) for _ in range(min(self.buckets, self.collectives))
            ]

    def _last(self, k: int) -> Any:
        return self.c[k][(self.gemms - 1) % 2]

    def run_iteration(self, streams: list[Any]) -> None:
        import torch

        comms = streams[0]
        for k in range(self.buckets):
            stream = streams[self.compute_stream(k)]
            for g in range(self.gemms):
                dst = self.c[k][g % 2]
                stream.launch(lambda k=k, dst=dst: torch.mm(self.a[k], self.b[k], out=dst), "gemm")
        for c in range(self.collectives):
            out = self.reduced[c % len(self.reduced)]
            if self.separate_comm:
                comms.launch(lambda out=out: self.comm.all_reduce(out, self.comm_in), "all_reduce")
                continue
            k = c % self.buckets
            comms.wait(streams[self.compute_stream(k)])
            comms.launch(lambda out=out, k=k: self.comm.all_reduce(out, self._last(k)), "all_reduce")
        if self.comm.async_op and self.collectives:
            comms.launch(self.comm.complete, "collective_wait")

    def work_per_iteration(self) -> float:
        if self.mode == "comms_only":  # bytes all-reduced (size × count, not bus bandwidth)
            return float(self.comm_bytes() * self.collectives)
        m, n, k = self.dims
        return 2.0 * m * n * k * self.gemms * self.buckets

    def throughput_unit(self) -> str:
        return "GB/s" if self.mode == "comms_only" else self.INFO.throughput_unit

    def comm_bytes(self) -> int:
        """Bytes one collective all-reduces."""
        if self.collectives == 0:
            return 0
        return int(self.reduced[0].numel() * self.reduced[0].element_size())

    def verify(self) -> VerifyResult:
        dtype = self.options.get("comp_dtype") or "float32"
        pairs = []
        for k in range(self.buckets):
            pairs.append((self._last(k), self.a[k].float() @ self.b[k].float()))
        for c in range(min(len(self.reduced), self.collectives)):
            source = self.comm_in if self.separate_comm else self._last(c % self.buckets)
            pairs.append((self.reduced[c], source.float() * self.comm.world_size))
        comm = self.options.get("comm_dtype") or "float32"
        return compare_tensors(
            pairs,
            max(TOLERANCE[dtype], TOLERANCE[comm]),
            f"{self.buckets} GEMM sets and {len(self.reduced)} all-reduce outputs vs "
            "serial recomputation in float32 (all ranks hold the same inputs)",
        )

    def describe(self) -> JsonObject:
        return {
            **super().describe(),
            "options": {**self.options, "mm_dim": list(self.dims)},
            "gemm_sets": self.buckets,
            "gemms_per_set": self.gemms,
            "collectives_per_iteration": self.collectives,
            "comm_tensor": "separate" if self.separate_comm else "gradient buckets",
            "collectives": self.comm.describe(),
            "allreduce_bytes_per_iteration": self.comm_bytes() * self.collectives,
        }

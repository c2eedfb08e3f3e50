"""RunConfig: everything one measured run needs, validated once at the edge (CLI or child spec)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from aorta.common import environment
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject

SIZES = ("small", "medium", "large")
SYNC_MODES = ("per_iteration", "end_only")
#: upstream AORTA's names for our sync modes: its `none` waits once, at the end, as end_only does
SYNC_MODE_ALIASES = {"none": "end_only"}
DEFAULT_ITERATIONS = 20
DEFAULT_WARMUP = 3
DEFAULT_SEED = 1234
DEFAULT_HW_QUEUES = 4  # HIP's GPU_MAX_HW_QUEUES default; also the CPU backend's pool size
MAX_HW_QUEUES = 64
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1  # what torch.manual_seed accepts
MAX_TIMEOUT_S = 30 * 24 * 3600.0  # a month: beyond it a "timeout" is a typo (or inf)


@dataclass(frozen=True)
class RunConfig:
    """One run: a workload at one stream count on one device. Immutable after validation."""

    workload: str
    streams: int
    iterations: int = DEFAULT_ITERATIONS
    warmup: int = DEFAULT_WARMUP
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    size: str | None = None  # None: chosen by backend (cpu→small, gpu→large)
    sync_mode: str = "per_iteration"
    seed: int = DEFAULT_SEED
    threads_per_queue: int = 1  # CPU backend: intra-op threads of each worker
    cpus: tuple[int, ...] | None = None  # --cpus: host and queue workers pinned (run/cpupin.py)
    # --stream-priority: the spec (backends/priority.py, e.g. "0=high,rest=low"); None: default priorities
    stream_priority: str | None = None
    record_ops: bool = True
    op_timing: bool = True  # GPU: a start/end event pair per op (--op-timing/--no-op-timing)
    # run a second, uninstrumented window to measure what the instrumentation costs;
    # None: on GPU only (the CPU backend's per-op clock reads are not switchable)
    instrumentation_cost: bool | None = None
    extra: JsonObject = field(default_factory=dict)
    # --profile: torch.profiler over an extra window after the measured one, trace written here
    profile_dir: str | None = None
    rank: int | None = None  # under torchrun: this rank (names its profiler trace apart)
    # workload-specific knobs (e.g. comms_compute_overlap's --mode), checked by the workload class
    workload_options: JsonObject = field(default_factory=dict)
    dist_backend: str | None = None  # under torchrun: --backend (None: gloo on CPU, nccl on GPU)

    def to_dict(self) -> JsonObject:
        """Plain dict for the result JSON."""
        return asdict(self)


def parse_positive_int(value: Any, name: str, zero_ok: bool = False) -> int:
    """An integer ≥ 1 (≥ 0 with `zero_ok`, e.g. -w 0), or a UsageError naming the option."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip())
    except ValueError:
        if zero_ok:
            raise UsageError(f"{name} must be a whole number ≥ 0, got {value!r}") from None
        raise UsageError(f"{name} must be a positive integer, got {value!r}") from None
    if number < 0 and zero_ok:
        raise UsageError(f"{name} must be ≥ 0, got {number}")
    if number < 1 and not zero_ok:
        raise UsageError(f"{name} must be ≥ 1, got {number}")
    return number


def check_device(device: str | None) -> str:
    """The --device spelling, normalised: auto, cpu, cuda or cuda:N (no torch: whether the GPU
    exists is resolve_device's question, on the run path)."""
    dev = (device or "auto").strip().lower()
    if dev in ("auto", "cpu", "cuda"):
        return dev
    if dev.startswith("cuda:"):
        if not dev[len("cuda:") :].isdigit():
            raise UsageError(f"--device {device}: expected cuda:N with N a number")
        return dev
    raise UsageError(f"--device {device!r} is not known: use auto, cpu, cuda or cuda:N")


def check_seed(seed: int) -> int:
    """The seed must fit in 64 bits (torch.manual_seed's range)."""
    if not SEED_MIN <= seed <= SEED_MAX:
        raise UsageError(f"--seed {seed} does not fit in 64 bits: use {SEED_MIN}..{SEED_MAX}")
    return seed


def check_threads_per_queue(count: int) -> int:
    """Intra-op threads per worker: at most this machine's CPU count (more cannot run at once)."""
    cpus = os.cpu_count() or 1
    if count > cpus:
        raise UsageError(f"--threads-per-queue {count} exceeds this machine's {cpus} CPUs: use 1..{cpus}")
    return count


def parse_timeout(value: str | None) -> float | None:
    """Seconds one point may run: a finite number > 0 and at most a month; None when not given."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise UsageError(f"--timeout must be seconds, got {value!r}") from None
    if not 0 < seconds <= MAX_TIMEOUT_S:  # also refuses nan, inf and 1e400 (= inf)
        raise UsageError(f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:g} seconds, got {value!r}")
    return seconds


def parse_stream_list(text: str) -> list[int]:
    """Parse '1,2,4,8' into distinct positive ints in the given order; reject junk with the reason."""
    if text is None or not str(text).strip():
        raise UsageError("--streams is empty: give counts such as 1,2,4,8")
    counts: list[int] = []
    for position, part in enumerate(str(text).split(","), start=1):
        item = part.strip()
        if not item:
            raise UsageError(f"--streams {text!r}: item {position} is empty (stray comma?)")
        if not item.isdigit():
            raise UsageError(f"--streams {text!r}: {item!r} is not a whole number")
        value = int(item)
        if value < 1:
            raise UsageError(f"--streams {text!r}: stream counts start at 1, got {value}")
        if value in counts:
            raise UsageError(f"--streams {text!r}: {value} is listed twice")
        counts.append(value)
    return counts


def hw_queue_pool_size(environ: dict[str, str] | None = None) -> int:
    """The hardware-queue pool size from GPU_MAX_HW_QUEUES (HIP's knob), default 4."""
    env = environment.snapshot() if environ is None else environ
    raw = env.get("GPU_MAX_HW_QUEUES")
    if raw is None or raw.strip() == "":
        return DEFAULT_HW_QUEUES
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"GPU_MAX_HW_QUEUES={raw!r} is not a number: unset it or give 1..64") from None
    if not 1 <= value <= MAX_HW_QUEUES:
        raise UsageError(f"GPU_MAX_HW_QUEUES={value} is outside 1..{MAX_HW_QUEUES}")
    return value


ENV_KNOBS = (
    "GPU_MAX_HW_QUEUES",
    "HSA_XNACK",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "DEBUG_HIP_IGNORE_STREAM_PRIORITY",
)

#: Prefixes of the GPU-runtime variables a policy may set (gpu/policies.py); a result records every
#: set variable with one of them (`runtime_env`), so a policy's variables can be read back.
RUNTIME_ENV_PREFIXES = (
    "GPU_",
    "HSA_",
    "HIP_",
    "ROCR_",
    "AMD_",
    "HCC_",
    "DEBUG_HIP_",
    "CUDA_",
    "NCCL_",
    "RCCL_",
    "PYTORCH_",
    "TORCH_",
    "OMP_",
    "MKL_",
)


def env_knobs(environ: dict[str, str] | None = None) -> dict[str, str | None]:
    """The environment variables that change queue behaviour, as seen by this process."""
    env = environment.snapshot() if environ is None else environ
    return {name: env.get(name) for name in ENV_KNOBS}


def runtime_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Every set GPU-runtime variable (RUNTIME_ENV_PREFIXES), as seen by this process."""
    env = environment.snapshot() if environ is None else environ
    return {name: env[name] for name in sorted(env) if name.startswith(RUNTIME_ENV_PREFIXES)}

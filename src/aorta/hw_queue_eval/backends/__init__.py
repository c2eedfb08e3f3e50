"""Where streams execute: `cpu` (threaded hardware-queue model) or `gpu` (torch.cuda streams)."""

from __future__ import annotations

from aorta.hw_queue_eval.backends.base import Backend, Stream, WorkerInfo

__all__ = [
    "Backend",
    "Stream",
    "WorkerInfo",
    "create_backend",
    "resolve_device",
]


def resolve_device(device: str) -> str:
    """Map 'auto' to 'cuda:0' when torch sees a GPU, else 'cpu'; validate explicit devices.

    Imports torch (only called on the run path; the spelling is checked before, by check_device).
    """
    import torch

    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.config.run_config import check_device

    dev = check_device(device)
    if dev == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise UsageError(
            f"--device {device}: torch sees no GPU on this machine "
            "(use --device cpu, or install a ROCm/CUDA build of torch)"
        )
    index = 0 if dev == "cuda" else int(dev.split(":", 1)[1])
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise UsageError(f"--device {device}: only {count} GPU(s) visible (cuda:0..cuda:{count - 1})")
    return f"cuda:{index}"


def create_backend(
    device: str,
    streams: int,
    threads_per_queue: int = 1,
    hw_queues: int | None = None,
    priorities: list[int] | None = None,
) -> Backend:
    """Build the backend for a resolved device string; `priorities`: each stream's rank
    (backends/priority.py, from `run --stream-priority`), None for default priorities."""
    if device == "cpu":
        from aorta.hw_queue_eval.backends.cpu import CpuBackend

        return CpuBackend(
            streams, pool_size=hw_queues, threads_per_queue=threads_per_queue, priorities=priorities
        )
    from aorta.hw_queue_eval.backends.gpu import GpuBackend

    return GpuBackend(streams, device=device, priorities=priorities)

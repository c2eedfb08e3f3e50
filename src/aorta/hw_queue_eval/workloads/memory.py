"""Does a workload's footprint fit the device? Checked before anything is allocated."""

from __future__ import annotations

from typing import Any

from aorta.common.errors import UsageError

GIB = 1024**3


def available_bytes(device: Any) -> int | None:
    """Free memory on `device` (GPU: the driver's free bytes; CPU: MemAvailable); None if unknown."""
    kind = getattr(device, "type", str(device).split(":", 1)[0])
    if kind == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_fits(workload: str, size: str, device: Any, nbytes: int, available: int | None = None) -> None:
    """UsageError naming the size needed when `nbytes` exceed what `device` has free."""
    free = available_bytes(device) if available is None else available
    if free is not None and nbytes > free:
        raise UsageError(
            f"{workload} --size {size} needs {nbytes / GIB:.2f} GiB on {device}, only "
            f"{free / GIB:.2f} GiB free: use a smaller --size or free memory"
        )

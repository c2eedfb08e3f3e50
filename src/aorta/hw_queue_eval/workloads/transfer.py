"""Host↔device copies for the pipeline workloads: pinned + non_blocking on GPU, memcpy on CPU.

On a GPU the host side is page-locked (pinned) memory and the copy is asynchronous on the stream
that launches it (a DMA transfer). On the CPU backend there is no device: the "host" and "device"
buffers are two distinct CPU tensors and the copy is a real memcpy-bound op, run by the worker of
the stream that launches it, so it occupies that stream exactly as a transfer would.
"""

from __future__ import annotations

from typing import Any

#: op labels of host↔device copies end with this (h2d_copy, d2h_copy): the diagnosis's copy view
COPY_LABEL_SUFFIX = "_copy"


def is_copy_label(label: Any) -> bool:
    """True for an op label the workloads give a host↔device copy."""
    return isinstance(label, str) and label.endswith(COPY_LABEL_SUFFIX)


def on_gpu(device: Any) -> bool:
    """True for a CUDA/ROCm device."""
    return getattr(device, "type", str(device).split(":", 1)[0]) == "cuda"


def host_buffer(device: Any, *shape: int, source: Any = None) -> Any:
    """A host tensor (pinned when `device` is a GPU), zero-filled or a copy of `source`."""
    import torch

    buf = torch.empty(*shape) if source is None else source.detach().to("cpu").clone()
    return buf.pin_memory() if on_gpu(device) else buf


def copy(dst: Any, src: Any) -> None:
    """dst ← src across host and device: non_blocking on GPU (pinned), a memcpy on CPU."""
    dst.copy_(src, non_blocking=on_gpu(dst.device) or on_gpu(src.device))

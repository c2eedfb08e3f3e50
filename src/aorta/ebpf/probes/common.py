"""Small rendering helpers shared by the GPU probe families (typed field access, join keys)."""

from __future__ import annotations

from aorta.ebpf.probes.base import RenderContext
from aorta.ebpf.tracefs import EventFormat

NO_TEXT = '"n/a"'
KERNEL_BYPASS = (
    "HIP and CUDA kernel launches write packets to user-mode queues and ring a doorbell: "
    "no system call or tracepoint per launch, so per-kernel submissions are not "
    "visible to eBPF"
)


def text(ctx: RenderContext, fmt: EventFormat, *names: str) -> str:
    """bpftrace expression for the first existing string field via str(); pointers are not text."""
    field = fmt.first_of(*names)
    if field is not None and field.is_string:
        return f"str({ctx.dialect.arg(field.name)})"
    return NO_TEXT


def int_key(ctx: RenderContext, fmt: EventFormat, *names: str, mask32: bool = True) -> str | None:
    """`(uint64)args->a, (uint64)args->b` when every named field is an integer, else None.

    Widths differ between kernels and events (u32 copies in dma_fence, u64 in newer amdgpu),
    so keys are cast to one type; u64 values are truncated to 32 bits where a u32 copy joins.
    """
    parts = []
    for name in names:
        field = fmt.fields.get(name)
        if field is None or not field.is_integer:
            return None
        value = ctx.dialect.arg(name)
        parts.append(f"(uint64)({value} & 0xffffffff)" if mask32 else f"(uint64){value}")
    return ", ".join(parts)


def ptr_key(ctx: RenderContext, fmt: EventFormat, name: str) -> str | None:
    """A pointer field as an integer key (identity only; never dereferenced, never str())."""
    field = fmt.fields.get(name)
    if field is None or not field.is_pointer:
        return None
    return f"(uint64){ctx.dialect.arg(name)}"


def both(cond_a: str, cond_b: str) -> str:
    """Join two predicates, dropping trivially true ones."""
    parts = [c for c in (cond_a, cond_b) if c and c != "1"]
    return " && ".join(parts) if parts else "1"

"""`ebpf-attach --tracers`: upstream AORTA's tracer names mapped onto our tracing families.

Upstream's race, DMA and RCCL tracers keyed on amdgpu_cs_ioctl, which ROCm compute never calls;
the views their users want are real only through uprobes on the GPU runtimes, so all three map
onto the gpu_runtime family, each naming the view it stands for and whether this build has it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aorta.common.errors import UsageError


@dataclass(frozen=True)
class Tracer:
    """One upstream tracer name: our family, the view it stands for, API roles/names that show it."""

    family: str  # queue | memory | gpu_runtime
    view: str
    markers: tuple[str, ...] = ()  # a probed API whose role or name contains one has the view
    runtime_view: str | None = None  # the --ebpf-gpu-runtime-views view it needs


TRACERS = {
    "queue": Tracer("queue", "driver queue section (ebpf_queue_metrics)"),
    "memory": Tracer("memory", "memory section (ebpf_memory_metrics)"),
    "race": Tracer(
        "gpu_runtime", "event-wait view (cross-stream event waits and syncs)", ("event",), "waits"
    ),
    "dma": Tracer("gpu_runtime", "copies view (host/device copies per stream)", ("copy", "memcpy"), "copies"),
    "rccl": Tracer(
        "gpu_runtime", "collectives view (RCCL/NCCL calls per stream)", ("nccl", "collective"), "collectives"
    ),
}


def parse_tracers(text: str) -> list[str]:
    """The names of `--tracers a,b` in order, each once; UsageError (one line) for unknown ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--tracers needs at least one of {', '.join(TRACERS)}, got {text!r}")
    for name in names:
        if name not in TRACERS:
            raise UsageError(f"unknown tracer {name[:40]!r} in --tracers: use {', '.join(TRACERS)}")
    return list(dict.fromkeys(names))


def check_views(names: list[str], views: tuple[str, ...] | None) -> None:
    """UsageError (one line) when --ebpf-gpu-runtime-views switches off a requested tracer's view."""
    for name in names:
        need = TRACERS[name].runtime_view
        if views is not None and need is not None and need not in views:
            raise UsageError(f"--tracers {name} needs the {need} view: add it to --ebpf-gpu-runtime-views")


def view_present(tracer: Tracer) -> bool:
    """Whether this build's gpu_runtime family probes an API that gives the tracer's view."""
    if not tracer.markers:
        return True
    from aorta.ebpf.probes.gpu_runtime_apis import APIS

    return any(m in a.role.lower() or m in a.name.lower() for a in APIS for m in tracer.markers)


def tracer_report(names: list[str]) -> dict[str, dict[str, object]]:
    """Per requested name: the family it maps onto, its view, and whether the view is in this build."""
    return {
        name: {
            "family": TRACERS[name].family,
            "view": TRACERS[name].view,
            "in_this_build": view_present(TRACERS[name]),
        }
        for name in names
    }

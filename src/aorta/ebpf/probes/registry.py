"""Which probe families exist, by section. To add one, append its "module:Class" path here.

Queue families serve `--ebpf-trace`, memory families `--ebpf-memory-trace`. Classes are imported
lazily, so `ebpf-info` and `--help` stay fast.
"""

from __future__ import annotations

import importlib

from aorta.ebpf.probes.base import ProbeFamily

QUEUE_FAMILIES: list[str] = [
    "aorta.ebpf.probes.amdgpu:AmdgpuFamily",
    "aorta.ebpf.probes.gpu_scheduler:GpuSchedulerFamily",
    "aorta.ebpf.probes.kfd:KfdFamily",
    "aorta.ebpf.probes.cpu_sched:CpuSchedFamily",
]
# uprobes on the GPU runtime libraries: opt-in (--ebpf-gpu-runtime), a trap per call costs µs
GPU_RUNTIME_FAMILY = "aorta.ebpf.probes.gpu_runtime:GpuRuntimeFamily"
#: Whose summary heads the queue section, by the traced backend: the first family of this list
#: that saw submissions of the traced processes (its `source` names it); no other family's figure
#: ever stands in, whatever the registry order. The CPU backend's submissions are its doorbell
#: writes, which only cpu_sched sees; a GPU process's launches are seen by gpu_runtime (opt-in),
#: else its driver jobs by amdgpu, else by the generic DRM scheduler.
QUEUE_SUMMARY_FAMILIES: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu_sched",),
    "gpu": ("gpu_runtime", "amdgpu", "gpu_scheduler"),
}
MEMORY_FAMILIES: list[str] = [
    "aorta.ebpf.probes.amd_memory:AmdMemoryFamily",
    "aorta.ebpf.probes.host_memory:HostMemoryFamily",
]


def queue_summary_families(backend: str | None) -> tuple[str, ...]:
    """The families that may head the queue section for `backend` ("cpu", "gpu"), in order; a
    process traced from outside (`ebpf-attach`, no backend) is treated as a GPU process."""
    return QUEUE_SUMMARY_FAMILIES["cpu" if backend == "cpu" else "gpu"]


def _load(path: str, **kwargs: object) -> ProbeFamily:
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    family: ProbeFamily = cls(**kwargs)
    return family


def families_for(
    queue: bool, memory: bool, gpu_runtime: bool = False, gpu_runtime_views: tuple[str, ...] | None = None
) -> list[ProbeFamily]:
    """Fresh family instances for the requested tracing modes, queue families first (the order of
    `families` in the sections; which summary heads them is QUEUE_SUMMARY_FAMILIES' rule);
    `gpu_runtime_views`: the gpu_runtime views to probe (None: its default set)."""
    paths = (QUEUE_FAMILIES if queue else []) + (MEMORY_FAMILIES if memory else [])
    runtime = [_load(GPU_RUNTIME_FAMILY, views=gpu_runtime_views)] if gpu_runtime else []
    return runtime + [_load(p) for p in paths]

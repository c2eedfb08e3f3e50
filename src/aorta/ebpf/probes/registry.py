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
MEMORY_FAMILIES: list[str] = [
    "aorta.ebpf.probes.amd_memory:AmdMemoryFamily",
    "aorta.ebpf.probes.host_memory:HostMemoryFamily",
]


def _load(path: str) -> ProbeFamily:
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()


def families_for(queue: bool, memory: bool, gpu_runtime: bool = False) -> list[ProbeFamily]:
    """Fresh family instances for the requested tracing modes, queue families first.

    gpu_runtime comes first: where it saw launches, its summary is the queue section's summary.
    """
    paths = (
        ([GPU_RUNTIME_FAMILY] if gpu_runtime else [])
        + (QUEUE_FAMILIES if queue else [])
        + (MEMORY_FAMILIES if memory else [])
    )
    return [_load(p) for p in paths]

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
MEMORY_FAMILIES: list[str] = [
    "aorta.ebpf.probes.amd_memory:AmdMemoryFamily",
    "aorta.ebpf.probes.host_memory:HostMemoryFamily",
]


def _load(path: str) -> ProbeFamily:
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()


def families_for(queue: bool, memory: bool) -> list[ProbeFamily]:
    """Fresh family instances for the requested tracing modes, queue families first."""
    paths = (QUEUE_FAMILIES if queue else []) + (MEMORY_FAMILIES if memory else [])
    return [_load(p) for p in paths]

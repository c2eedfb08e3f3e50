"""GPUs the kernel exposes (/dev and sysfs), read without torch: for `info` and early refusals."""

from __future__ import annotations

import os
from pathlib import Path

from aorta.common.jsontypes import JsonObject

KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")


def gpu_devices_seen_by_kernel() -> JsonObject:
    """GPUs visible through /dev and sysfs, found without importing torch."""
    kfd_nodes = []
    if KFD_TOPOLOGY.is_dir():
        for node in sorted(KFD_TOPOLOGY.iterdir()):
            try:
                name = (node / "name").read_text().strip()
            except OSError:
                continue
            if name:
                kfd_nodes.append(name)
    nvidia = sorted(p.name for p in Path("/dev").glob("nvidia[0-9]*"))
    return {"amd_kfd": os.path.exists("/dev/kfd"), "amd_gpu_nodes": kfd_nodes, "nvidia_devices": nvidia}


def any_gpu_node() -> bool:
    """Whether any device node a GPU runtime opens exists: without one torch sees no GPU.

    ROCm opens /dev/kfd, CUDA /dev/nvidiaN (WSL2's CUDA: /dev/dxg)."""
    gpus = gpu_devices_seen_by_kernel()
    return gpus["amd_kfd"] or bool(gpus["nvidia_devices"]) or os.path.exists("/dev/dxg")

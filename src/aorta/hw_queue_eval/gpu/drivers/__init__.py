"""Vendor drivers for one GPU's clocks and power cap, one module per tool; `make_driver` picks one.

Each driver touches only its own device index: the library (pynvml / amdsmi) when importable,
else the command-line tool (nvidia-smi / rocm-smi).
"""

from __future__ import annotations

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.gpu.drivers.amd_smi import AmdSmi
from aorta.hw_queue_eval.gpu.drivers.base import GpuDriver
from aorta.hw_queue_eval.gpu.drivers.nvidia_smi import NvidiaSmi
from aorta.hw_queue_eval.gpu.drivers.nvml import Pynvml
from aorta.hw_queue_eval.gpu.drivers.rocm_smi import RocmSmi


def make_driver(vendor: str, index: int, allow_library: bool = True) -> GpuDriver:
    """The driver for one device: the vendor library when importable, else the CLI tool."""
    if vendor == "nvidia":
        if allow_library:
            try:
                import pynvml  # noqa: F401
            except ImportError:
                pass
            else:
                return Pynvml(index)
        return NvidiaSmi(index)
    if vendor == "amd":
        if allow_library:
            try:
                import amdsmi  # noqa: F401
            except (ImportError, OSError):  # OSError: the package is there, libamd_smi.so is not
                pass
            else:
                return AmdSmi(index)
        return RocmSmi(index)
    raise UsageError(f"unknown GPU vendor {vendor!r}: expected nvidia or amd")

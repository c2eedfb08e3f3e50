"""NVIDIA through the nvidia-ml-py library (pynvml), when it is importable."""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError
from aorta.hw_queue_eval.gpu.drivers.nvidia_smi import nvidia_clock_target, nvidia_in_effect


class Pynvml:
    """NVIDIA through the nvidia-ml-py library (pynvml): same state as NvidiaSmi."""

    vendor = "nvidia"
    tool = "pynvml"

    def __init__(self, index: int) -> None:
        import pynvml

        self.nvml = pynvml
        self.index = index
        try:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            raise GpuControlError(f"NVML cannot open GPU {index}: {exc}") from None

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, name)(self.handle, *args)
        except self.nvml.NVMLError as exc:
            raise GpuControlError(f"NVML {name} on GPU {self.index} failed: {exc}") from None

    def snapshot(self) -> JsonObject:
        nv = self.nvml
        low, high = self._call("nvmlDeviceGetPowerManagementLimitConstraints")
        supported: set[int] = set()
        for mem in self._call("nvmlDeviceGetSupportedMemoryClocks"):
            supported.update(self._call("nvmlDeviceGetSupportedGraphicsClocks", mem))
        return {
            "power_limit_w": self._call("nvmlDeviceGetPowerManagementLimit") / 1000,
            "power_default_w": self._call("nvmlDeviceGetPowerManagementDefaultLimit") / 1000,
            "power_min_w": low / 1000,
            "power_max_w": high / 1000,
            "clock": {
                "sm_mhz": self._call("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
                "max_sm_mhz": self._call("nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_SM),
                "supported_mhz": sorted(supported),
                "locked_mhz": None,
                "locked_note": "NVML cannot read whether clocks were locked before; restore resets the lock",
            },
        }

    def set_clock_level(self, level: int, snap: JsonObject) -> JsonObject:
        target = nvidia_clock_target(level, snap)
        self._call("nvmlDeviceSetGpuLockedClocks", target["mhz"], target["mhz"])
        return target

    def set_power_limit(self, watts: float) -> None:
        self._call("nvmlDeviceSetPowerManagementLimit", round(watts * 1000))

    def restore_clock(self, prior: JsonObject) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks")

    def in_effect(self, snap: JsonObject) -> JsonObject:
        return nvidia_in_effect(snap)

"""NVIDIA through the `nvidia-smi` command-line tool (and the clock rules NVML shares)."""

from __future__ import annotations

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError, SmiTool, level_index, tool_number


def nvidia_clock_target(level: int, snap: JsonObject) -> JsonObject:
    """The supported graphics clock for `level`, as the NVIDIA drivers (CLI and NVML) lock it."""
    supported = snap["clock"]["supported_mhz"]
    step = level_index(level, len(supported))
    return {"level": level, "device_step": step, "steps": len(supported), "mhz": supported[step]}


def nvidia_in_effect(snap: JsonObject) -> JsonObject:
    """Clock and power cap read back from an NVIDIA snapshot (CLI and NVML alike)."""
    return {"clock_mhz": snap["clock"]["sm_mhz"], "power_limit_w": snap["power_limit_w"]}


class NvidiaSmi(SmiTool):
    """NVIDIA through `nvidia-smi -i INDEX` (-pl for the power cap, -lgc/-rgc for clocks)."""

    vendor = "nvidia"
    tool = "nvidia-smi"
    index_flag = "-i"
    _FIELDS = (
        "power.limit",
        "power.default_limit",
        "power.min_limit",
        "power.max_limit",
        "clocks.sm",
        "clocks.max.sm",
    )

    def snapshot(self) -> JsonObject:
        out = self._smi(f"--query-gpu={','.join(self._FIELDS)}", "--format=csv,noheader,nounits")
        if not out.strip():
            raise GpuControlError(f"nvidia-smi -i {self.index} printed nothing for the query")
        values = [tool_number(v) for v in out.strip().splitlines()[0].split(",")]
        if len(values) != len(self._FIELDS):
            raise GpuControlError(f"nvidia-smi returned {out.strip()!r} for {self._FIELDS}")
        fields = dict(zip(self._FIELDS, values, strict=True))
        clocks = self._smi("--query-supported-clocks=graphics", "--format=csv,noheader,nounits")
        supported = sorted({int(v) for v in (tool_number(x) for x in clocks.split()) if v})
        return {
            "power_limit_w": fields["power.limit"],
            "power_default_w": fields["power.default_limit"],
            "power_min_w": fields["power.min_limit"],
            "power_max_w": fields["power.max_limit"],
            "clock": {
                "sm_mhz": fields["clocks.sm"],
                "max_sm_mhz": fields["clocks.max.sm"],
                "supported_mhz": supported,
                "locked_mhz": None,
                "locked_note": "nvidia-smi cannot read whether clocks were locked "
                "before; restore resets the lock (-rgc)",
            },
        }

    def set_clock_level(self, level: int, snap: JsonObject) -> JsonObject:
        target = nvidia_clock_target(level, snap)
        self._smi("-lgc", f"{target['mhz']},{target['mhz']}")
        return target

    def set_power_limit(self, watts: float) -> None:
        self._smi("-pl", f"{watts:.2f}")

    def restore_clock(self, prior: JsonObject) -> None:
        self._smi("-rgc")

    def in_effect(self, snap: JsonObject) -> JsonObject:
        return nvidia_in_effect(snap)

"""AMD through the `rocm-smi` command-line tool (and the read-back amdsmi shares)."""

from __future__ import annotations

import re

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError, SmiTool, level_index, tool_number


def amd_in_effect(snap: JsonObject) -> JsonObject:
    """Clock level/MHz, perf level and power cap read back from an AMD snapshot (CLI and amdsmi)."""
    clock = snap["clock"]
    step = clock.get("sclk_level")
    mhz = clock["levels_mhz"][step] if step is not None else None
    return {
        "clock_mhz": mhz,
        "device_step": step,
        "perf_level": clock["perf_level"],
        "power_limit_w": snap["power_limit_w"],
    }


_GPU_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.*)$")
_LEVEL_LINE = re.compile(r"^(\d+):\s*([\d.]+)\s*Mhz\s*(\*)?", re.IGNORECASE)


class RocmSmi(SmiTool):
    """AMD through `rocm-smi -d INDEX` (--setperflevel, --setsclk, --setpoweroverdrive)."""

    vendor = "amd"
    tool = "rocm-smi"
    index_flag = "-d"

    def snapshot(self) -> JsonObject:
        out = self._smi("--showperflevel", "--showmaxpower", "--showclkfrq")
        perf, cap, levels, current, in_sclk = None, None, [], None, False
        for raw in out.splitlines():
            match = _GPU_LINE.match(raw.strip())
            if not match or int(match.group(1)) != self.index:
                continue
            body = match.group(2).strip()
            if body.startswith("Performance Level:"):
                perf = body.split(":", 1)[1].strip()
            elif body.startswith("Max Graphics Package Power (W):"):
                cap = tool_number(body.split(":", 1)[1])
            elif body.startswith("Supported "):
                in_sclk = body.startswith("Supported sclk")
            elif in_sclk:
                level = _LEVEL_LINE.match(body)
                if level is None:  # a blank entry ends the section
                    in_sclk = False
                    continue
                levels.append(int(float(level.group(2))))
                if level.group(3):
                    current = int(level.group(1))
        if perf is None or not levels:
            raise GpuControlError(
                f"rocm-smi -d {self.index} showed no performance level or sclk levels: is the index right?"
            )
        return {
            "power_limit_w": cap,
            "power_default_w": None,
            "power_min_w": None,
            "power_max_w": None,
            "clock": {"perf_level": perf, "sclk_level": current, "levels_mhz": levels},
        }

    def set_clock_level(self, level: int, snap: JsonObject) -> JsonObject:
        levels = snap["clock"]["levels_mhz"]
        step = level_index(level, len(levels))
        self._smi("--setperflevel", "manual")
        self._smi("--setsclk", str(step))
        return {"level": level, "device_step": step, "steps": len(levels), "mhz": levels[step]}

    def set_power_limit(self, watts: float) -> None:
        self._smi("--setpoweroverdrive", str(round(watts)), "--autorespond", "YES")

    def restore_clock(self, prior: JsonObject) -> None:
        clock = prior["clock"]
        if clock["perf_level"] == "manual" and clock.get("sclk_level") is not None:
            self._smi("--setsclk", str(clock["sclk_level"]))
        self._smi("--setperflevel", clock["perf_level"])

    def in_effect(self, snap: JsonObject) -> JsonObject:
        return amd_in_effect(snap)

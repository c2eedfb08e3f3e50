"""AMD through the amdsmi Python library, when it is importable."""

from __future__ import annotations

import contextlib
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError, level_index
from aorta.hw_queue_eval.gpu.drivers.rocm_smi import amd_in_effect

_HZ_FLOOR = 100_000  # an sclk value at or above this is in Hz: real MHz values are < 10 000
_MICROWATT_FLOOR = 100_000  # a power cap below 0.1 W read as µW is really in watts (host driver)


def _one_line(exc: BaseException) -> str:
    """An amdsmi exception's text on one line (AmdSmiLibraryException spans several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def amdsmi_sclk(freq: Any, index: int) -> tuple[list[int], int | None]:
    """sclk DPM levels (MHz, ascending as listed) and the current level from amdsmi_get_clk_freq.

    The dict is {"num_supported", "current" (an index), "frequency" (list)}. Versions differ: some
    list values in Hz, others in MHz (told apart by size); some Python wrappers return only
    `num_supported - 1` values, which would shift the 0..7 mapping, so that is an error.
    """
    if (
        not isinstance(freq, dict)
        or not isinstance(freq.get("frequency"), list | tuple)
        or not isinstance(freq.get("current"), int)
    ):
        shape = sorted(freq) if isinstance(freq, dict) else type(freq).__name__
        raise GpuControlError(
            f"amdsmi_get_clk_freq(SYS) on GPU {index} returned an unknown shape "
            f"{shape}: expected num_supported/current/frequency; nothing changed"
        )
    values = list(freq["frequency"])
    count = freq.get("num_supported", len(values))
    if count != len(values):
        raise GpuControlError(
            f"amdsmi_get_clk_freq(SYS) on GPU {index} lists {len(values)} sclk "
            f"frequencies for num_supported={count} (this amdsmi version drops "
            "levels): the level mapping would be wrong; nothing changed"
        )
    if not values or not all(isinstance(v, int | float) and v > 0 for v in values):
        raise GpuControlError(
            f"amdsmi_get_clk_freq(SYS) on GPU {index} returned no usable sclk "
            f"frequencies ({values!r}); nothing changed"
        )
    scale = 1e6 if max(values) >= _HZ_FLOOR else 1.0
    levels = [round(v / scale) for v in values]
    current = freq["current"]
    return levels, current if 0 <= current < len(levels) else None


def amdsmi_power(info: Any, index: int) -> dict[str, float | None]:
    """Power cap, default, min and max in watts from amdsmi_get_power_cap_info (microwatts).

    The default cap is `default_power_cap` (amdsmi 6.x and later) or `power_cap_default` (some
    earlier wrappers); the earliest ones return only power_cap and dpm_cap. A cap too small to be
    microwatts (amdsmi on a virtualization host reports watts) is an error, not a guess.
    """
    if not isinstance(info, dict) or not isinstance(info.get("power_cap"), int | float):
        shape = sorted(info) if isinstance(info, dict) else type(info).__name__
        raise GpuControlError(
            f"amdsmi_get_power_cap_info on GPU {index} returned an unknown shape "
            f"{shape}: expected power_cap (µW); nothing changed"
        )
    if info["power_cap"] < _MICROWATT_FLOOR:
        raise GpuControlError(
            f"amdsmi_get_power_cap_info on GPU {index} reports power_cap="
            f"{info['power_cap']}, not a microwatt value: unknown unit (a host "
            "driver reporting watts?); nothing changed"
        )

    def watts(*keys: str) -> float | None:
        for key in keys:
            value = info.get(key)
            if isinstance(value, int | float) and value > 0:
                return value / 1e6
        return None

    low, high = watts("min_power_cap"), watts("max_power_cap")
    if low is None or high is None or low > high:  # both or neither: the range check needs both
        low = high = None
    return {
        "power_limit_w": info["power_cap"] / 1e6,
        "power_default_w": watts("default_power_cap", "power_cap_default"),
        "power_min_w": low,
        "power_max_w": high,
    }


class AmdSmi:
    """AMD through the amdsmi Python library: same state and keys as RocmSmi.

    Only `amdsmi_get_processor_handles()[index]` is touched. amdsmi_init() runs once, on first
    use; close() calls amdsmi_shut_down() (GpuControl closes after the restore), and a later call
    opens the library again.
    """

    vendor = "amd"
    tool = "amdsmi"

    def __init__(self, index: int) -> None:
        import amdsmi

        self.lib = amdsmi
        self.index = index
        self.handle: Any = None
        error = getattr(amdsmi, "AmdSmiException", None)
        if not (isinstance(error, type) and issubclass(error, BaseException)):
            raise GpuControlError(
                "the amdsmi module has no AmdSmiException: unknown amdsmi version, not used"
            )
        self.error: type[BaseException] = error
        self._open()

    def _open(self) -> None:
        if self.handle is not None:
            return
        try:
            self.lib.amdsmi_init()
        except self.error as exc:
            raise GpuControlError(f"amdsmi cannot start: {_one_line(exc)}") from None
        try:
            handles = list(self.lib.amdsmi_get_processor_handles())
        except self.error as exc:
            self._shut_down()
            raise GpuControlError(f"amdsmi cannot list GPUs: {_one_line(exc)}") from None
        if not 0 <= self.index < len(handles):
            self._shut_down()
            raise GpuControlError(f"amdsmi sees {len(handles)} GPU(s): there is no GPU {self.index}")
        self.handle = handles[self.index]

    def _shut_down(self) -> None:
        with contextlib.suppress(self.error):
            self.lib.amdsmi_shut_down()

    def close(self) -> None:
        """amdsmi_shut_down() if the library is open; safe to call twice."""
        if self.handle is not None:
            self.handle = None
            self._shut_down()

    def _call(self, name: str, *args: Any) -> Any:
        """One amdsmi call on this GPU's handle; its errors become one-line GpuControlErrors."""
        self._open()
        func = getattr(self.lib, name, None)
        if func is None:
            raise GpuControlError(
                f"this amdsmi has no {name} (an older version?): nothing changed through it"
            )
        try:
            return func(self.handle, *args)
        except self.error as exc:
            raise GpuControlError(f"amdsmi {name} on GPU {self.index} failed: {_one_line(exc)}") from None

    def _enum(self, enum_name: str, member: str) -> Any:
        value = getattr(getattr(self.lib, enum_name, None), member, None)
        if value is None:
            raise GpuControlError(f"this amdsmi has no {enum_name}.{member}: unknown version")
        return value

    def _perf_name(self, value: Any) -> str:
        """amdsmi's perf level (a name string such as 'AMDSMI_DEV_PERF_LEVEL_AUTO', or the enum)
        as rocm-smi prints it: 'auto', 'manual', …"""
        if isinstance(value, str):
            name = value
        elif isinstance(getattr(value, "name", None), str):
            name = value.name
        elif isinstance(value, int):
            enum = getattr(self.lib, "AmdSmiDevPerfLevel", None)
            try:
                name = enum(value).name  # type: ignore[misc]
            except (TypeError, ValueError):
                name = ""
        else:
            name = ""
        name = name.removeprefix("AMDSMI_DEV_PERF_LEVEL_").lower()
        if not name:
            raise GpuControlError(
                f"amdsmi_get_gpu_perf_level on GPU {self.index} returned "
                f"{value!r}: unknown shape; nothing changed"
            )
        return name

    def _set_perf(self, name: str) -> None:
        self._call("amdsmi_set_gpu_perf_level", self._enum("AmdSmiDevPerfLevel", name.upper()))

    def _set_sclk(self, step: int) -> None:
        self._call("amdsmi_set_clk_freq", self._enum("AmdSmiClkType", "SYS"), 1 << step)

    def snapshot(self) -> JsonObject:
        perf = self._perf_name(self._call("amdsmi_get_gpu_perf_level"))
        levels, current = amdsmi_sclk(
            self._call("amdsmi_get_clk_freq", self._enum("AmdSmiClkType", "SYS")), self.index
        )
        power = amdsmi_power(self._call("amdsmi_get_power_cap_info"), self.index)
        return {**power, "clock": {"perf_level": perf, "sclk_level": current, "levels_mhz": levels}}

    def set_clock_level(self, level: int, snap: JsonObject) -> JsonObject:
        levels = snap["clock"]["levels_mhz"]
        step = level_index(level, len(levels))
        self._set_perf("manual")
        self._set_sclk(step)
        return {"level": level, "device_step": step, "steps": len(levels), "mhz": levels[step]}

    def set_power_limit(self, watts: float) -> None:
        self._call("amdsmi_set_power_cap", 0, round(watts * 1_000_000))  # sensor 0, microwatts

    def restore_clock(self, prior: JsonObject) -> None:
        clock = prior["clock"]
        if clock["perf_level"] == "manual" and clock.get("sclk_level") is not None:
            self._set_sclk(int(clock["sclk_level"]))
        self._set_perf(clock["perf_level"])

    def in_effect(self, snap: JsonObject) -> JsonObject:
        return amd_in_effect(snap)

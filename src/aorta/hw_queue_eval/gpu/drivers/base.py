"""Vendor drivers for one GPU's clocks and power cap: read, set, and put back.

Each driver touches only its own device index. The command-line drivers run `nvidia-smi` /
`rocm-smi` with argv lists (no shell); the library drivers use `pynvml` / `amdsmi` when
importable. A snapshot is a plain JSON-able dict, so it can live in a state file and a later
process (`restore`) can put the device back from it.

Clock levels 0..7 map evenly onto the device's own steps: 0 the lowest, 7 the highest
(AMD: sclk DPM levels; NVIDIA: supported graphics clocks, locked with -lgc).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from typing import Any, Protocol

from aorta.common.errors import UsageError

TOOL_TIMEOUT_S = 30.0
POWER_TOLERANCE_W = 1.0


class GpuControlError(UsageError):
    """A vendor tool refused or failed: the message says which call and why."""


def level_index(level: int, steps: int) -> int:
    """Map a level 0..7 onto `steps` device steps (0 → lowest, 7 → highest)."""
    if steps <= 0:
        raise GpuControlError("the device reports no clock steps to lock to")
    return round(level * (steps - 1) / 7)


class GpuDriver(Protocol):
    """What the controller needs from a vendor driver."""

    vendor: str
    index: int
    tool: str

    def snapshot(self) -> dict[str, Any]:
        """The device's current clock and power state (JSON-able)."""
        ...

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        """Lock clocks at `level`; return the target (device step, MHz) for verification."""
        ...

    def set_power_limit(self, watts: float) -> None:
        """Set the power cap in watts."""
        ...

    def restore_clock(self, prior: dict[str, Any]) -> None:
        """Put the clock state of `prior` back."""
        ...

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Clock level/MHz and power cap as read back from a fresh snapshot."""
        ...


def _run(argv: list[str]) -> str:
    """Run a vendor tool; GpuControlError with its last output line if it fails."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise GpuControlError(f"`{' '.join(argv)}` did not answer in {TOOL_TIMEOUT_S:g} s") \
            from None
    except OSError as exc:
        raise GpuControlError(f"cannot run {argv[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines()
                 if line.strip()]
        last = lines[-1] if lines else "no output"
        raise GpuControlError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {last}")
    return proc.stdout


def _number(text: str) -> float | None:
    """A float from a tool's field, or None for N/A / Not Supported."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def _which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise UsageError(f"{tool} not found on PATH: install the vendor tools (or the "
                         "pynvml/amdsmi Python package) to control clocks and power")
    return path


class _SmiTool:
    """A vendor command-line tool run on one device index; shared by NvidiaSmi and RocmSmi."""

    tool: str
    index_flag: str  # the tool's option that selects the device

    def __init__(self, index: int) -> None:
        self.index = index
        self.exe = _which(self.tool)

    def _smi(self, *args: str) -> str:
        """Run the tool on this device only (argv list, no shell)."""
        return _run([self.exe, self.index_flag, str(self.index), *args])


def _nvidia_clock_target(level: int, snap: dict[str, Any]) -> dict[str, Any]:
    """The supported graphics clock for `level`, as the NVIDIA drivers (CLI and NVML) lock it."""
    supported = snap["clock"]["supported_mhz"]
    step = level_index(level, len(supported))
    return {"level": level, "device_step": step, "steps": len(supported), "mhz": supported[step]}


def _nvidia_in_effect(snap: dict[str, Any]) -> dict[str, Any]:
    """Clock and power cap read back from an NVIDIA snapshot (CLI and NVML alike)."""
    return {"clock_mhz": snap["clock"]["sm_mhz"], "power_limit_w": snap["power_limit_w"]}


class NvidiaSmi(_SmiTool):
    """NVIDIA through `nvidia-smi -i INDEX` (-pl for the power cap, -lgc/-rgc for clocks)."""

    vendor = "nvidia"
    tool = "nvidia-smi"
    index_flag = "-i"
    _FIELDS = ("power.limit", "power.default_limit", "power.min_limit", "power.max_limit",
               "clocks.sm", "clocks.max.sm")

    def snapshot(self) -> dict[str, Any]:
        out = self._smi(f"--query-gpu={','.join(self._FIELDS)}", "--format=csv,noheader,nounits")
        if not out.strip():
            raise GpuControlError(f"nvidia-smi -i {self.index} printed nothing for the query")
        values = [_number(v) for v in out.strip().splitlines()[0].split(",")]
        if len(values) != len(self._FIELDS):
            raise GpuControlError(f"nvidia-smi returned {out.strip()!r} for {self._FIELDS}")
        fields = dict(zip(self._FIELDS, values, strict=True))
        clocks = self._smi("--query-supported-clocks=graphics", "--format=csv,noheader,nounits")
        supported = sorted({int(v) for v in (_number(x) for x in clocks.split()) if v})
        return {"power_limit_w": fields["power.limit"],
                "power_default_w": fields["power.default_limit"],
                "power_min_w": fields["power.min_limit"], "power_max_w": fields["power.max_limit"],
                "clock": {"sm_mhz": fields["clocks.sm"], "max_sm_mhz": fields["clocks.max.sm"],
                          "supported_mhz": supported, "locked_mhz": None,
                          "locked_note": "nvidia-smi cannot read whether clocks were locked "
                                         "before; restore resets the lock (-rgc)"}}

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        target = _nvidia_clock_target(level, snap)
        self._smi("-lgc", f"{target['mhz']},{target['mhz']}")
        return target

    def set_power_limit(self, watts: float) -> None:
        self._smi("-pl", f"{watts:.2f}")

    def restore_clock(self, prior: dict[str, Any]) -> None:
        self._smi("-rgc")

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        return _nvidia_in_effect(snap)


def _amd_in_effect(snap: dict[str, Any]) -> dict[str, Any]:
    """Clock level/MHz, perf level and power cap read back from an AMD snapshot (CLI and amdsmi)."""
    clock = snap["clock"]
    step = clock.get("sclk_level")
    mhz = clock["levels_mhz"][step] if step is not None else None
    return {"clock_mhz": mhz, "device_step": step, "perf_level": clock["perf_level"],
            "power_limit_w": snap["power_limit_w"]}


_GPU_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.*)$")
_LEVEL_LINE = re.compile(r"^(\d+):\s*([\d.]+)\s*Mhz\s*(\*)?", re.IGNORECASE)


class RocmSmi(_SmiTool):
    """AMD through `rocm-smi -d INDEX` (--setperflevel, --setsclk, --setpoweroverdrive)."""

    vendor = "amd"
    tool = "rocm-smi"
    index_flag = "-d"

    def snapshot(self) -> dict[str, Any]:
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
                cap = _number(body.split(":", 1)[1])
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
            raise GpuControlError(f"rocm-smi -d {self.index} showed no performance level or "
                                  "sclk levels: is the index right?")
        return {"power_limit_w": cap, "power_default_w": None, "power_min_w": None,
                "power_max_w": None,
                "clock": {"perf_level": perf, "sclk_level": current, "levels_mhz": levels}}

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        levels = snap["clock"]["levels_mhz"]
        step = level_index(level, len(levels))
        self._smi("--setperflevel", "manual")
        self._smi("--setsclk", str(step))
        return {"level": level, "device_step": step, "steps": len(levels), "mhz": levels[step]}

    def set_power_limit(self, watts: float) -> None:
        self._smi("--setpoweroverdrive", str(round(watts)), "--autorespond", "YES")

    def restore_clock(self, prior: dict[str, Any]) -> None:
        clock = prior["clock"]
        if clock["perf_level"] == "manual" and clock.get("sclk_level") is not None:
            self._smi("--setsclk", str(clock["sclk_level"]))
        self._smi("--setperflevel", clock["perf_level"])

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        return _amd_in_effect(snap)


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

    def snapshot(self) -> dict[str, Any]:
        nv = self.nvml
        low, high = self._call("nvmlDeviceGetPowerManagementLimitConstraints")
        supported: set[int] = set()
        for mem in self._call("nvmlDeviceGetSupportedMemoryClocks"):
            supported.update(self._call("nvmlDeviceGetSupportedGraphicsClocks", mem))
        return {"power_limit_w": self._call("nvmlDeviceGetPowerManagementLimit") / 1000,
                "power_default_w": self._call("nvmlDeviceGetPowerManagementDefaultLimit") / 1000,
                "power_min_w": low / 1000, "power_max_w": high / 1000,
                "clock": {"sm_mhz": self._call("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM),
                          "max_sm_mhz": self._call("nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_SM),
                          "supported_mhz": sorted(supported), "locked_mhz": None,
                          "locked_note": "NVML cannot read whether clocks were locked before; "
                                         "restore resets the lock"}}

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        target = _nvidia_clock_target(level, snap)
        self._call("nvmlDeviceSetGpuLockedClocks", target["mhz"], target["mhz"])
        return target

    def set_power_limit(self, watts: float) -> None:
        self._call("nvmlDeviceSetPowerManagementLimit", round(watts * 1000))

    def restore_clock(self, prior: dict[str, Any]) -> None:
        self._call("nvmlDeviceResetGpuLockedClocks")

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        return _nvidia_in_effect(snap)


_HZ_FLOOR = 100_000  # an sclk value at or above this is in Hz: real MHz values are < 10 000
_MICROWATT_FLOOR = 100_000  # a power cap below 0.1 W read as µW is really in watts (host driver)


def _one_line(exc: BaseException) -> str:
    """An amdsmi exception's text on one line (AmdSmiLibraryException spans several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _amdsmi_sclk(freq: Any, index: int) -> tuple[list[int], int | None]:
    """sclk DPM levels (MHz, ascending as listed) and the current level from amdsmi_get_clk_freq.

    The dict is {"num_supported", "current" (an index), "frequency" (list)}. Versions differ: some
    list values in Hz, others in MHz (told apart by size); some Python wrappers return only
    `num_supported - 1` values, which would shift the 0..7 mapping, so that is an error.
    """
    if not isinstance(freq, dict) or not isinstance(freq.get("frequency"), list | tuple) \
            or not isinstance(freq.get("current"), int):
        shape = sorted(freq) if isinstance(freq, dict) else type(freq).__name__
        raise GpuControlError(f"amdsmi_get_clk_freq(SYS) on GPU {index} returned an unknown shape "
                              f"{shape}: expected num_supported/current/frequency; nothing changed")
    values = list(freq["frequency"])
    count = freq.get("num_supported", len(values))
    if count != len(values):
        raise GpuControlError(f"amdsmi_get_clk_freq(SYS) on GPU {index} lists {len(values)} sclk "
                              f"frequencies for num_supported={count} (this amdsmi version drops "
                              "levels): the level mapping would be wrong; nothing changed")
    if not values or not all(isinstance(v, int | float) and v > 0 for v in values):
        raise GpuControlError(f"amdsmi_get_clk_freq(SYS) on GPU {index} returned no usable sclk "
                              f"frequencies ({values!r}); nothing changed")
    scale = 1e6 if max(values) >= _HZ_FLOOR else 1.0
    levels = [round(v / scale) for v in values]
    current = freq["current"]
    return levels, current if 0 <= current < len(levels) else None


def _amdsmi_power(info: Any, index: int) -> dict[str, float | None]:
    """Power cap, default, min and max in watts from amdsmi_get_power_cap_info (microwatts).

    The default cap is `default_power_cap` (amdsmi 6.x and later) or `power_cap_default` (some
    earlier wrappers); the earliest ones return only power_cap and dpm_cap. A cap too small to be
    microwatts (amdsmi on a virtualization host reports watts) is an error, not a guess.
    """
    if not isinstance(info, dict) or not isinstance(info.get("power_cap"), int | float):
        shape = sorted(info) if isinstance(info, dict) else type(info).__name__
        raise GpuControlError(f"amdsmi_get_power_cap_info on GPU {index} returned an unknown shape "
                              f"{shape}: expected power_cap (µW); nothing changed")
    if info["power_cap"] < _MICROWATT_FLOOR:
        raise GpuControlError(f"amdsmi_get_power_cap_info on GPU {index} reports power_cap="
                              f"{info['power_cap']}, not a microwatt value: unknown unit (a host "
                              "driver reporting watts?); nothing changed")

    def watts(*keys: str) -> float | None:
        for key in keys:
            value = info.get(key)
            if isinstance(value, int | float) and value > 0:
                return value / 1e6
        return None

    low, high = watts("min_power_cap"), watts("max_power_cap")
    if low is None or high is None or low > high:  # both or neither: the range check needs both
        low = high = None
    return {"power_limit_w": info["power_cap"] / 1e6,
            "power_default_w": watts("default_power_cap", "power_cap_default"),
            "power_min_w": low, "power_max_w": high}


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
            raise GpuControlError("the amdsmi module has no AmdSmiException: unknown amdsmi "
                                  "version, not used")
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
            raise GpuControlError(f"amdsmi sees {len(handles)} GPU(s): there is no GPU "
                                  f"{self.index}")
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
            raise GpuControlError(f"this amdsmi has no {name} (an older version?): nothing changed "
                                  "through it")
        try:
            return func(self.handle, *args)
        except self.error as exc:
            raise GpuControlError(f"amdsmi {name} on GPU {self.index} failed: "
                                  f"{_one_line(exc)}") from None

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
            raise GpuControlError(f"amdsmi_get_gpu_perf_level on GPU {self.index} returned "
                                  f"{value!r}: unknown shape; nothing changed")
        return name

    def _set_perf(self, name: str) -> None:
        self._call("amdsmi_set_gpu_perf_level", self._enum("AmdSmiDevPerfLevel", name.upper()))

    def _set_sclk(self, step: int) -> None:
        self._call("amdsmi_set_clk_freq", self._enum("AmdSmiClkType", "SYS"), 1 << step)

    def snapshot(self) -> dict[str, Any]:
        perf = self._perf_name(self._call("amdsmi_get_gpu_perf_level"))
        levels, current = _amdsmi_sclk(
            self._call("amdsmi_get_clk_freq", self._enum("AmdSmiClkType", "SYS")), self.index)
        power = _amdsmi_power(self._call("amdsmi_get_power_cap_info"), self.index)
        return {**power, "clock": {"perf_level": perf, "sclk_level": current,
                                   "levels_mhz": levels}}

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        levels = snap["clock"]["levels_mhz"]
        step = level_index(level, len(levels))
        self._set_perf("manual")
        self._set_sclk(step)
        return {"level": level, "device_step": step, "steps": len(levels), "mhz": levels[step]}

    def set_power_limit(self, watts: float) -> None:
        self._call("amdsmi_set_power_cap", 0, round(watts * 1_000_000))  # sensor 0, microwatts

    def restore_clock(self, prior: dict[str, Any]) -> None:
        clock = prior["clock"]
        if clock["perf_level"] == "manual" and clock.get("sclk_level") is not None:
            self._set_sclk(int(clock["sclk_level"]))
        self._set_perf(clock["perf_level"])

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        return _amd_in_effect(snap)


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

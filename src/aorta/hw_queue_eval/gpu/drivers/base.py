"""What every vendor driver shares: the GpuDriver contract, its error, running a vendor tool.

Each driver touches only its own device index. The command-line drivers run `nvidia-smi` /
`rocm-smi` with argv lists (no shell); the library drivers use `pynvml` / `amdsmi` when
importable. A snapshot is a plain JSON-able dict, so it can live in a state file and a later
process (`restore`) can put the device back from it.

Clock levels 0..7 map evenly onto the device's own steps: 0 the lowest, 7 the highest
(AMD: sclk DPM levels; NVIDIA: supported graphics clocks, locked with -lgc).
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Protocol

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject

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

    def snapshot(self) -> JsonObject:
        """The device's current clock and power state (JSON-able)."""
        ...

    def set_clock_level(self, level: int, snap: JsonObject) -> JsonObject:
        """Lock clocks at `level`; return the target (device step, MHz) for verification."""
        ...

    def set_power_limit(self, watts: float) -> None:
        """Set the power cap in watts."""
        ...

    def restore_clock(self, prior: JsonObject) -> None:
        """Put the clock state of `prior` back."""
        ...

    def in_effect(self, snap: JsonObject) -> JsonObject:
        """Clock level/MHz and power cap as read back from a fresh snapshot."""
        ...


def run_tool(argv: list[str]) -> str:
    """Run a vendor tool; GpuControlError with its last output line if it fails."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GpuControlError(f"`{' '.join(argv)}` did not answer in {TOOL_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise GpuControlError(f"cannot run {argv[0]}: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        raise GpuControlError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {last}")
    return proc.stdout


def tool_number(text: str) -> float | None:
    """A float from a tool's field, or None for N/A / Not Supported."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def which_tool(tool: str) -> str:
    """The vendor tool's path on PATH; UsageError naming what to install when it is missing."""
    path = shutil.which(tool)
    if path is None:
        raise UsageError(
            f"{tool} not found on PATH: install the vendor tools (or the "
            "pynvml/amdsmi Python package) to control clocks and power"
        )
    return path


class SmiTool:
    """A vendor command-line tool run on one device index; shared by NvidiaSmi and RocmSmi."""

    tool: str
    index_flag: str  # the tool's option that selects the device

    def __init__(self, index: int) -> None:
        self.index = index
        self.exe = which_tool(self.tool)

    def _smi(self, *args: str) -> str:
        """Run the tool on this device only (argv list, no shell)."""
        return run_tool([self.exe, self.index_flag, str(self.index), *args])

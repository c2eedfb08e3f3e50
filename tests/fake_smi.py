"""Fake `nvidia-smi` and `rocm-smi` executables for tests: a simulated device state in a JSON file.

`install(bin_dir, state_path, log_path)` writes both executables (this file's SCRIPT with the
running Python as interpreter) and an initial state of two GPUs per vendor. Every call is logged
as one JSON line [tool, argv]. FAKE_SMI_DENY=1 makes every set fail like a non-root user;
FAKE_SMI_IGNORE_SETS=1 makes sets "succeed" without changing anything (as a buggy driver might).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

SCRIPT = r"""
import json, os, sys

tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
state_path = os.environ["FAKE_SMI_STATE"]
with open(os.environ["FAKE_SMI_LOG"], "a") as log:
    log.write(json.dumps([tool, args]) + "\n")
with open(state_path) as fh:
    state = json.load(fh)


def save():
    tmp = state_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, state_path)


def fail(msg, code=1):
    print(msg, file=sys.stderr)
    sys.exit(code)


def setting():
    if os.environ.get("FAKE_SMI_DENY") == "1":
        fail("Insufficient Permissions: run as root", 4)
    return os.environ.get("FAKE_SMI_IGNORE_SETS") != "1"


def take(flag):
    i = args.index(flag)
    return args[i + 1]


if tool == "nvidia-smi":
    dev = state["nvidia"][take("-i")]
    if any(a.startswith("--query-gpu=") for a in args):
        names = [a for a in args if a.startswith("--query-gpu=")][0].split("=", 1)[1].split(",")
        keys = {"power.limit": "power_limit", "power.default_limit": "power_default",
                "power.min_limit": "power_min", "power.max_limit": "power_max",
                "clocks.sm": "sm_clock", "clocks.max.sm": "max_sm_clock"}
        print(", ".join(f"{dev[keys[n]]:.2f}" if n.startswith("power") else str(dev[keys[n]])
                        for n in names))
    elif "--query-supported-clocks=graphics" in args:
        for mhz in sorted(dev["supported"], reverse=True):
            print(mhz)
    elif "-pl" in args:
        watts = float(take("-pl"))
        if not dev["power_min"] <= watts <= dev["power_max"]:
            fail(f"Provided power limit {watts:.2f} W is not a valid power limit")
        if setting():
            dev["power_limit"] = watts
        print(f"Power limit for GPU set to {watts:.2f} W")
    elif "-lgc" in args:
        low, high = (int(x) for x in take("-lgc").split(","))
        if setting():
            dev["locked"] = [low, high]
            dev["sm_clock"] = high
        print("GPU clocks set")
    elif "-rgc" in args:
        if setting():
            dev["locked"] = None
            dev["sm_clock"] = dev["idle_sm_clock"]
        print("All done.")
    else:
        fail("fake nvidia-smi: unsupported call " + " ".join(args))
elif tool == "rocm-smi":
    idx = take("-d")
    dev = state["amd"][idx]
    if "--setperflevel" in args:
        level = take("--setperflevel")
        if level not in ("auto", "low", "high", "manual"):
            fail("ERROR: invalid performance level")
        if setting():
            dev["perf_level"] = level
            if level == "auto":
                dev["sclk_level"] = dev["auto_sclk_level"]
        print(f"GPU[{idx}]\t\t: Performance level set to {level}")
    elif "--setsclk" in args:
        level = int(take("--setsclk"))
        if dev["perf_level"] != "manual":
            fail(f"GPU[{idx}]\t\t: Unable to set sclk: performance level is not manual")
        if not 0 <= level < len(dev["levels"]):
            fail(f"GPU[{idx}]\t\t: Invalid sclk level {level}")
        if setting():
            dev["sclk_level"] = level
        print(f"GPU[{idx}]\t\t: Successfully set sclk to level {level}")
    elif "--setpoweroverdrive" in args:
        watts = int(take("--setpoweroverdrive"))
        if "--autorespond" not in args:
            fail("confirmation needed: out of spec warning")
        if not dev["power_min"] <= watts <= dev["power_max"]:
            fail(f"GPU[{idx}]\t\t: Unable to set power to {watts} W")
        if setting():
            dev["power_cap"] = float(watts)
        print(f"GPU[{idx}]\t\t: Successfully set power to: {watts}W")
    else:
        out = ["======== ROCm System Management Interface ========"]
        if "--showperflevel" in args:
            out.append(f"GPU[{idx}]\t\t: Performance Level: {dev['perf_level']}")
        if "--showmaxpower" in args:
            out.append(f"GPU[{idx}]\t\t: Max Graphics Package Power (W): {dev['power_cap']:.1f}")
        if "--showclkfrq" in args:
            out.append(f"GPU[{idx}]\t\t: Supported mclk frequencies on GPU{idx}")
            out.append(f"GPU[{idx}]\t\t: 0: 900Mhz *")
            out.append(f"GPU[{idx}]\t\t: ")
            out.append(f"GPU[{idx}]\t\t: Supported sclk frequencies on GPU{idx}")
            for i, mhz in enumerate(dev["levels"]):
                star = " *" if i == dev["sclk_level"] else ""
                out.append(f"GPU[{idx}]\t\t: {i}: {mhz}Mhz{star}")
            out.append(f"GPU[{idx}]\t\t: ")
        out.append("======== End of ROCm SMI Log ========")
        print("\n".join(out))
save()
"""


def initial_state() -> dict[str, Any]:
    """Two NVIDIA and two AMD GPUs, as found before any test touches them."""

    def nvidia() -> dict[str, Any]:
        return {
            "power_limit": 300.0,
            "power_default": 350.0,
            "power_min": 100.0,
            "power_max": 400.0,
            "sm_clock": 345,
            "idle_sm_clock": 345,
            "max_sm_clock": 1980,
            "supported": [345, 600, 900, 1200, 1410, 1600, 1800, 1980],
            "locked": None,
        }

    def amd() -> dict[str, Any]:
        return {
            "perf_level": "auto",
            "sclk_level": 1,
            "auto_sclk_level": 1,
            "levels": [500, 1200, 2100],
            "power_cap": 264.0,
            "power_min": 100,
            "power_max": 300,
        }

    return {"nvidia": {"0": nvidia(), "1": nvidia()}, "amd": {"0": amd(), "1": amd()}}


def install(bin_dir: Path, state_path: Path, log_path: Path) -> None:
    """Write the fake executables into `bin_dir` and the initial device state."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("nvidia-smi", "rocm-smi"):
        exe = bin_dir / name
        exe.write_text(f"#!{sys.executable}\n{SCRIPT}")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    state_path.write_text(json.dumps(initial_state()))
    log_path.write_text("")


def read_log(log_path: Path) -> list[tuple[str, list[str]]]:
    """Every call made to the fakes, in order."""
    return [tuple(json.loads(line)) for line in log_path.read_text().splitlines() if line]


def env_for(bin_dir: Path, state_path: Path, log_path: Path) -> dict[str, str]:
    """Environment for a CLI subprocess that finds the fakes first on PATH."""
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_SMI_STATE": str(state_path),
        "FAKE_SMI_LOG": str(log_path),
    }


class FakeGpus:
    """The fakes installed under one temp folder, with helpers to read what they saw."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.state = root / "devices.json"
        self.log = root / "smi-calls.jsonl"
        self.state_dir = root / "aorta-state"
        install(self.bin, self.state, self.log)

    def env(self, **extra: str) -> dict[str, str]:
        """Env for the CLI: the fakes first on PATH (what `restore` runs)."""
        return {**env_for(self.bin, self.state, self.log), **extra}

    def state_args(self) -> tuple[str, ...]:
        """The CLI option that keeps aorta's GPU state files in this test's folder (as root the
        default is the machine's /var/lib/aorta)."""
        return ("--state-dir", str(self.state_dir))

    @staticmethod
    def gpu(vendor: str, index: int = 0) -> tuple[str, ...]:
        """cli_with_fakes.py options: clock/power control acts on fake `vendor` GPU `index`."""
        return ("--fake-gpu", f"{vendor}:{index}")

    def devices(self) -> dict[str, Any]:
        """The simulated device state now."""
        return json.loads(self.state.read_text())

    def calls(self) -> list[tuple[str, list[str]]]:
        """Every call made to the fakes so far."""
        return read_log(self.log)

    def state_files(self) -> list[Path]:
        """aorta's GPU state files left in the state folder."""
        return sorted(self.state_dir.glob("gpu-*.json")) if self.state_dir.exists() else []

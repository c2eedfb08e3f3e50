"""Exit codes: one per kind of ending, documented, and what each command really exits with.

The commands run in this process through `cli.main(argv, Collaborators(...))`: the benchmark and
the GPU are replaced through their seams (an in-memory GpuDriver, a benchmark that raises), so
every code is reached by the real command path, not by calling the mapping by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aorta.common.errors import (
    AortaError,
    DeviceLeftChanged,
    ExitCode,
    Interrupted,
    MeasurementFailed,
    Terminated,
    UsageError,
)
from aorta.hw_queue_eval.cli import main
from aorta.hw_queue_eval.commands.collaborators import Collaborators
from aorta.hw_queue_eval.gpu.control import GpuTarget
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError, GpuDriver

DOCS = Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md"
RUN = ["run", "hetero_kernels", "--streams", "2", "-d", "cpu", "-i", "2", "-w", "1", "--size", "small"]


class MemoryGpu:
    """A GpuDriver over an in-memory NVIDIA-like device; `refuse_after` sets fail after that many
    succeeded (1: the change works, putting it back is refused)."""

    vendor = "nvidia"
    tool = "nvidia-smi"

    def __init__(self, index: int = 0, refuse_after: int | None = None) -> None:
        self.index = index
        self.power_w = 300.0
        self.sets: list[float] = []
        self.refuse_after = refuse_after

    def snapshot(self) -> dict[str, Any]:
        return {
            "power_limit_w": self.power_w,
            "power_min_w": 100.0,
            "power_max_w": 400.0,
            "clock": {"sm_mhz": 345, "supported_mhz": [345, 1980]},
        }

    def set_clock_level(self, level: int, snap: dict[str, Any]) -> dict[str, Any]:
        raise GpuControlError("clock control is not part of this fake")

    def set_power_limit(self, watts: float) -> None:
        if self.refuse_after is not None and len(self.sets) >= self.refuse_after:
            raise GpuControlError("Insufficient Permissions: run as root")
        self.sets.append(watts)
        self.power_w = watts

    def restore_clock(self, prior: dict[str, Any]) -> None:
        return None

    def in_effect(self, snap: dict[str, Any]) -> dict[str, Any]:
        return {"clock_mhz": snap["clock"]["sm_mhz"], "power_limit_w": snap["power_limit_w"]}


class OneGpu:
    """A GpuLocator that hands out one driver object, whatever the device."""

    def __init__(self, driver: GpuDriver) -> None:
        self.driver = driver

    def no_gpu_for(self, device: str) -> bool:
        return False  # the stand-in GPU is there whatever the device

    def target_for(self, resolved_device: str) -> GpuTarget | None:
        return GpuTarget(self.driver.vendor, self.driver.index, simulated=True)

    def driver_for(self, target: GpuTarget) -> GpuDriver:
        return self.driver


def _raising(exc: BaseException) -> Any:
    def benchmark(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return benchmark


def _exit(
    argv: list[str], capsys: pytest.CaptureFixture[str], collaborators: Collaborators | None = None
) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv, collaborators)
    return int(info.value.code or 0), capsys.readouterr().err


@pytest.fixture
def _state_dir(tmp_path: Path) -> Path:
    """This test's GPU state folder, given to the commands as --state-dir."""
    return tmp_path / "state"


def test_codes_are_the_documented_ones() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "DEVICE_LEFT_CHANGED": 3,
        "INTERRUPTED": 130,
        "TERMINATED": 143,
    }
    section = DOCS.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", section, flags=re.M)}
    assert documented == {int(c) for c in ExitCode}


def test_errors_share_one_base_and_carry_their_code() -> None:
    kinds = {UsageError: 2, GpuControlError: 2, MeasurementFailed: 1, DeviceLeftChanged: 3}
    for kind, code in kinds.items():
        assert issubclass(kind, AortaError)
        assert kind("x").exit_code == code
    assert Terminated().code == 143 and Interrupted().code == 130
    assert not issubclass(Terminated, Exception), "`except Exception` must not swallow a signal"


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (UsageError("the workload needs a fix"), 2, "error: the workload needs a fix"),
        (MeasurementFailed("nothing usable was measured"), 1, "error: nothing usable was measured"),
        (DeviceLeftChanged("GPU 0 still capped"), 3, "error: GPU 0 still capped"),
        (KeyboardInterrupt(), 130, "interrupted: nothing was written"),
        (Terminated(), 143, None),
    ],
    ids=["usage", "failed", "device-left-changed", "sigint", "sigterm"],
)
def test_run_exits_with_the_code_of_what_ended_it(tmp_path: Path, capsys, raised, code, line) -> None:
    out = tmp_path / "r.json"
    rc, err = _exit([*RUN, "-o", str(out)], capsys, Collaborators(benchmark=_raising(raised)))
    assert rc == code, err
    assert "Traceback" not in err
    if line is not None:
        assert err.strip().splitlines()[-1] == line
    assert not out.exists(), "nothing written half-way"


def test_bad_input_exits_2(capsys) -> None:
    rc, err = _exit(["run", "no_such_workload", "--streams", "2"], capsys)
    assert rc == 2 and err.startswith("error: unknown workload 'no_such_workload'")
    rc, err = _exit(["run", "hetero_kernels", "--streams", "2", "--bogus"], capsys)
    assert rc == 2 and "No such option" in err


def test_verification_failure_exits_1(tmp_path: Path, capsys) -> None:
    from aorta.hw_queue_eval.run.harness import run_benchmark

    def failing_verification(*args: Any, **kwargs: Any) -> Any:
        result = run_benchmark(*args, **kwargs)
        result.status, result.error = "failed", "verification failed"
        return result

    out = tmp_path / "r.json"
    rc, err = _exit([*RUN, "-o", str(out)], capsys, Collaborators(benchmark=failing_verification))
    assert rc == 1, err
    assert out.exists(), "the result of a finished run is written even when it failed"


def test_gpu_put_back_exits_0_and_leaves_no_state(tmp_path: Path, capsys, _state_dir) -> None:
    gpu = MemoryGpu()
    argv = [*RUN, "--power-limit", "150", "--state-dir", str(_state_dir)]
    rc, err = _exit(argv, capsys, Collaborators(gpus=OneGpu(gpu)))
    assert rc == 0, err
    assert gpu.sets == [150.0, 300.0] and gpu.power_w == 300.0
    assert list(_state_dir.glob("gpu-*.json")) == []


def test_gpu_not_put_back_exits_3_not_2(tmp_path: Path, capsys, _state_dir) -> None:
    gpu = MemoryGpu(refuse_after=1)  # the cap is set; putting it back is refused
    out = tmp_path / "r.json"
    argv = [*RUN, "--power-limit", "150", "-o", str(out), "--state-dir", str(_state_dir)]
    rc, err = _exit(argv, capsys, Collaborators(gpus=OneGpu(gpu)))
    assert rc == 3, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "could not put GPU 0 back as found" in errors[0]
    assert errors[0].endswith(f"run `python -m aorta.hw_queue_eval restore --state-dir {_state_dir}`")
    assert gpu.power_w == 150.0, "the fake really was left changed"
    assert len(list(_state_dir.glob("gpu-nvidia-0.json"))) == 1, "kept for `restore`"


@pytest.mark.parametrize(
    ("raised", "why"), [(KeyboardInterrupt(), "KeyboardInterrupt"), (UsageError("bad thing"), "bad thing")]
)
def test_a_device_left_changed_outranks_what_was_ending_the_command(capsys, _state_dir, raised, why) -> None:
    gpu = MemoryGpu(refuse_after=1)
    rc, err = _exit(
        [*RUN, "--power-limit", "150", "--state-dir", str(_state_dir)],
        capsys,
        Collaborators(gpus=OneGpu(gpu), benchmark=_raising(raised)),
    )
    assert rc == 3, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "could not put GPU 0 back as found" in line
    assert line.endswith(f"(while stopping after: {why})")
    assert "Traceback" not in err


def test_restore_that_cannot_act_exits_3(capsys, _state_dir) -> None:
    _state_dir.mkdir(mode=0o700)
    (_state_dir / "gpu-nvidia-0.json").write_text('{"state_version": 1, "vendor": "nvidia"}')
    rc, err = _exit(["restore", "--state-dir", str(_state_dir)], capsys)
    assert rc == 3, err
    assert "is not a valid aorta GPU state file" in err
    assert (_state_dir / "gpu-nvidia-0.json").exists()


# The signal phases a real process goes through, each reached deterministically from inside the
# child (no sleeps, no racing a spawn): during the CLI's imports, once the result is written, and
# in the interpreter's shutdown. `runpy` starts the package as `python -m` does, on any code state.
_IMPORT_TRIP = """
import os, runpy, signal, sys
class Trip:  # a finder asked first for every import: the signal lands while the CLI's imports run
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            os.kill(os.getpid(), signal.{sig})
        return None
sys.meta_path.insert(0, Trip())
sys.argv = ["aorta-hwq", "list"]
runpy.run_module("aorta.hw_queue_eval", run_name="__main__", alter_sys=True)
"""

_LATE_TRIP = """
import atexit, json, os, runpy, signal, sys, time
TARGET = sys.argv[1]
def late():  # the interpreter is shutting down: the same signal once more
    os.kill(os.getpid(), signal.{sig})
    time.sleep(0.2)
atexit.register(late)
replace = os.replace
def replace_then_signal(src, dst, **kw):  # the final file is in place: the signal lands now
    replace(src, dst, **kw)
    if dst == TARGET and json.loads(open(TARGET).read()).get("state", "complete") == "complete":
        os.kill(os.getpid(), signal.{sig})
        time.sleep(0.2)
os.replace = replace_then_signal
sys.argv = ["aorta-hwq", *sys.argv[2:]]
runpy.run_module("aorta.hw_queue_eval", run_name="__main__", alter_sys=True)
"""


def _child(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_during_the_imports_exits_as_documented(tmp_path: Path, sig: str, code: int) -> None:
    """Before: Ctrl+C printed a KeyboardInterrupt traceback (exit 1), SIGTERM killed (−15)."""
    proc = _child(_IMPORT_TRIP.format(sig=sig), cwd=tmp_path)
    assert proc.returncode == code, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert ("interrupted: nothing was written" in proc.stderr) == (sig == "SIGINT")
    assert proc.stdout == ""  # `list` never ran


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "argv", "written"),
    [
        ("SIGINT", RUN, "result written to"),
        ("SIGTERM", RUN, "result written to"),
        ("SIGINT", ["sweep", *RUN[1:]], "sweep written to"),
        ("SIGINT", ["policy-sweep", *RUN[1:], "--policies", "baseline"], "results written to"),
    ],
    ids=["run-SIGINT", "run-SIGTERM", "sweep-SIGINT", "policy-sweep-SIGINT"],
)
def test_a_signal_once_the_result_is_written_changes_nothing(
    tmp_path: Path, sig: str, argv: list[str], written: str
) -> None:
    """Before: 130 "nothing was written" (143) next to the written file, and in the shutdown a
    traceback or death by the signal. Now the command's own code (0) and a complete file."""
    proc = _child(_LATE_TRIP.format(sig=sig), "out.json", *argv, "-o", "out.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{written} out.json" in proc.stdout
    assert "interrupted" not in proc.stderr and "terminated" not in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    assert data.get("state", "complete") == "complete" and data.get("status", "ok") == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]

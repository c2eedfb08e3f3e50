"""The library drivers (pynvml) against an in-process fake module, and the level mapping.

On NVIDIA machines with nvidia-ml-py installed this is the path real runs take, so it is checked
here with the same snapshot → apply → verify → restore contract as the command-line drivers.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.gpu.control import GpuControl, GpuRequest, GpuTarget
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError, level_index


class _NvmlError(Exception):
    pass


def _fake_pynvml(devices: dict[int, dict[str, Any]], calls: list[tuple[Any, ...]]) -> Any:
    """A pynvml stand-in: the NVML calls aorta uses, over `devices` (milliwatts, MHz)."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = _NvmlError
    nv.NVML_CLOCK_SM = 1

    def dev(handle: int) -> dict[str, Any]:
        return devices[handle]

    def record(name: str, handle: int, *args: Any) -> None:
        calls.append((name, handle, *args))

    def set_limit(h: int, mw: int) -> None:
        record("set_limit", h, mw)
        if not dev(h)["min"] <= mw <= dev(h)["max"]:
            raise _NvmlError("Invalid Argument")
        dev(h)["limit"] = mw

    def lock(h: int, low: int, high: int) -> None:
        record("lock", h, low, high)
        dev(h)["sm"] = high

    def reset(h: int) -> None:
        record("reset", h)
        dev(h)["sm"] = dev(h)["idle"]

    nv.nvmlInit = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetPowerManagementLimitConstraints = lambda h: (dev(h)["min"], dev(h)["max"])
    nv.nvmlDeviceGetPowerManagementLimit = lambda h: dev(h)["limit"]
    nv.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: dev(h)["default"]
    nv.nvmlDeviceGetSupportedMemoryClocks = lambda h: [2619, 1593]
    nv.nvmlDeviceGetSupportedGraphicsClocks = lambda h, mem: dev(h)["clocks"][mem]
    nv.nvmlDeviceGetClockInfo = lambda h, kind: dev(h)["sm"]
    nv.nvmlDeviceGetMaxClockInfo = lambda h, kind: max(max(c) for c in dev(h)["clocks"].values())
    nv.nvmlDeviceSetPowerManagementLimit = set_limit
    nv.nvmlDeviceSetGpuLockedClocks = lock
    nv.nvmlDeviceResetGpuLockedClocks = reset
    return nv


def _device() -> dict[str, Any]:
    return {
        "limit": 700_000,
        "default": 700_000,
        "min": 200_000,
        "max": 700_000,
        "sm": 345,
        "idle": 345,
        "clocks": {2619: [1980, 1410, 345], 1593: [1200, 345]},
    }


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[dict, list]:
    devices = {0: _device(), 1: _device()}
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(devices, calls))
    return devices, calls


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """This test's GPU state folder (the --state-dir a command would be given)."""
    return tmp_path / "state"


def test_pynvml_apply_verify_restore(state_dir: Path, nvml: tuple[dict, list], tmp_path: Path) -> None:
    devices, calls = nvml
    target = GpuTarget("nvidia", 1, simulated=False)
    with GpuControl(target, GpuRequest(clock_level=7, power_limit_w=300), state_dir=state_dir) as report:
        assert devices[1]["sm"] == 1980
        assert devices[1]["limit"] == 300_000
        assert report["tool"] == "pynvml"
        assert report["verified"] is True
        assert report["in_effect"]["clock_level"] == 7
        assert report["prior"]["clock"]["supported_mhz"] == [345, 1200, 1410, 1980]
        assert len(list((tmp_path / "state").glob("gpu-nvidia-1.json"))) == 1
    assert [c[0] for c in calls] == ["lock", "set_limit", "set_limit", "reset"]
    assert calls[2] == ("set_limit", 1, 700_000), "prior cap restored, not the default"
    assert devices[1] == _device()
    assert devices[0] == _device()
    assert {c[1] for c in calls} == {1}
    assert report["status"] == "restored"
    assert list((tmp_path / "state").glob("*.json")) == []


def test_pynvml_power_outside_limits_refused(state_dir: Path, nvml: tuple[dict, list]) -> None:
    devices, calls = nvml
    control = GpuControl(
        GpuTarget("nvidia", 0, simulated=False), GpuRequest(power_limit_w=900), state_dir=state_dir
    )
    with (
        pytest.raises(
            UsageError,
            match=r"power limit 900 W is outside what nvidia GPU 0 "
            r"accepts \(200..700 W\)",
        ),
        control,
    ):
        pass
    assert calls == []
    assert devices[0] == _device()


def test_level_index_spans_the_device_steps() -> None:
    assert [level_index(level, 8) for level in range(8)] == list(range(8))
    assert [level_index(level, 3) for level in range(8)] == [0, 0, 1, 1, 1, 1, 2, 2]
    assert level_index(0, 1) == level_index(7, 1) == 0
    with pytest.raises(GpuControlError):
        level_index(3, 0)

"""The amdsmi library driver against an in-process fake `amdsmi` module.

On AMD machines with the amdsmi Python package this is the path real runs take, so it is held
to the same snapshot → apply → verify → restore contract as rocm-smi. The fake keeps what the
real library would: a perf level, the sclk DPM levels and the current one, a power cap in
microwatts; it checks argument types as amdsmi's wrapper does and logs every call.
"""

from __future__ import annotations

import enum
import os
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.gpu import state as gpu_state
from aorta.hw_queue_eval.gpu.control import (
    GpuControl,
    GpuRequest,
    GpuTarget,
    recover_stale_states,
)
from aorta.hw_queue_eval.gpu.drivers import make_driver
from aorta.hw_queue_eval.gpu.drivers.amd_smi import AmdSmi, amdsmi_power, amdsmi_sclk
from aorta.hw_queue_eval.gpu.drivers.base import GpuControlError
from aorta.hw_queue_eval.gpu.drivers.rocm_smi import RocmSmi

MHZ = [500, 800, 1100, 1400, 1700, 2100]


class _AmdSmiException(Exception):
    pass


class _AmdSmiLibraryException(_AmdSmiException):
    def __init__(self, code: int, info: str) -> None:
        self.err_code, self.err_info = code, info
        super().__init__(f"Error code:\n\t{code} | {info}")


class _PerfLevel(enum.IntEnum):
    AUTO = 0
    LOW = 1
    HIGH = 2
    MANUAL = 3


class _ClkType(enum.IntEnum):
    SYS = 0
    DF = 1
    MEM = 4


def _device(**overrides: Any) -> dict[str, Any]:
    dev = {
        "perf": "auto",
        "sclk": 1,
        "mhz": list(MHZ),
        "cap": 550_000_000,
        "default": 550_000_000,
        "min": 100_000_000,
        "max": 550_000_000,
    }
    dev.update(overrides)
    return dev


def _fake_amdsmi(
    devices: dict[int, dict[str, Any]], calls: list[tuple[Any, ...]], quirks: dict[str, Any]
) -> Any:
    """An amdsmi stand-in over `devices`; `quirks` makes it misbehave (sets that do not take,
    no permission, Hz vs MHz, truncated lists)."""
    m = types.ModuleType("amdsmi")
    m.AmdSmiException = _AmdSmiException
    m.AmdSmiLibraryException = _AmdSmiLibraryException
    m.AmdSmiDevPerfLevel = _PerfLevel
    m.AmdSmiClkType = _ClkType

    def dev(handle: str) -> dict[str, Any]:
        return devices[int(handle.removeprefix("gpu"))]

    def setter(name: str, handle: str, *args: Any) -> dict[str, Any]:
        calls.append((name, handle, *args))
        if quirks.get("no_perm"):
            raise _AmdSmiLibraryException(10, "AMDSMI_STATUS_NO_PERM - Permission Denied")
        return dev(handle)

    def set_perf(handle: str, level: Any) -> None:
        if not isinstance(level, _PerfLevel):
            raise _AmdSmiException(f"perf_level {level!r} is not an AmdSmiDevPerfLevel")
        d = setter("set_perf", handle, level.name.lower())
        d["perf"] = level.name.lower()
        if level is _PerfLevel.AUTO:  # the driver picks the level again: idle here
            d["sclk"] = 1

    def set_clk(handle: str, clk: Any, mask: int) -> None:
        if clk is not _ClkType.SYS or not isinstance(mask, int):
            raise _AmdSmiException(f"bad set_clk_freq arguments {clk!r}, {mask!r}")
        d = setter("set_clk", handle, mask)
        if d["perf"] != "manual":
            raise _AmdSmiLibraryException(2, "AMDSMI_STATUS_INVAL - perf level is not manual")
        if not quirks.get("clock_ignored"):
            d["sclk"] = mask.bit_length() - 1

    def set_cap(handle: str, sensor: int, cap: int) -> None:
        d = setter("set_cap", handle, sensor, cap)
        if not d["min"] <= cap <= d["max"]:
            raise _AmdSmiLibraryException(2, "AMDSMI_STATUS_INVAL - Invalid parameters")
        d["cap"] = cap

    def get_clk(handle: str, clk: Any) -> dict[str, Any]:
        assert clk is _ClkType.SYS
        d = dev(handle)
        scale = 1 if quirks.get("mhz") else 1_000_000
        freq = [v * scale for v in d["mhz"]]
        return {
            "num_supported": len(freq),
            "current": d["sclk"],
            "frequency": freq[:-1] if quirks.get("truncated") else freq,
        }

    def get_cap(handle: str) -> dict[str, Any]:
        d = dev(handle)
        return {
            "power_cap": d["cap"],
            "default_power_cap": d["default"],
            "dpm_cap": 2100,
            "min_power_cap": d["min"],
            "max_power_cap": d["max"],
        }

    m.amdsmi_init = lambda: calls.append(("init",))
    m.amdsmi_shut_down = lambda: calls.append(("shut_down",))
    m.amdsmi_get_processor_handles = lambda: [f"gpu{i}" for i in sorted(devices)]
    m.amdsmi_get_gpu_perf_level = lambda h: f"AMDSMI_DEV_PERF_LEVEL_{dev(h)['perf'].upper()}"
    m.amdsmi_get_clk_freq = get_clk
    m.amdsmi_get_power_cap_info = get_cap
    m.amdsmi_set_gpu_perf_level = set_perf
    m.amdsmi_set_clk_freq = set_clk
    m.amdsmi_set_power_cap = set_cap
    return m


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[dict, list, dict]:
    devices = {0: _device(), 1: _device()}
    calls: list[tuple[Any, ...]] = []
    quirks: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "amdsmi", _fake_amdsmi(devices, calls, quirks))
    return devices, calls, quirks


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """This test's GPU state folder (the --state-dir a command would be given)."""
    return tmp_path / "state"


def _changes(calls: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [c for c in calls if c[0].startswith("set_")]


def test_amdsmi_apply_verify_restore(state_dir: Path, amd: tuple[dict, list, dict], tmp_path: Path) -> None:
    devices, calls, _ = amd
    with GpuControl(
        GpuTarget("amd", 1, simulated=False),
        GpuRequest(clock_level=7, power_limit_w=300),
        state_dir=state_dir,
    ) as report:
        assert devices[1]["perf"] == "manual"
        assert devices[1]["sclk"] == 5
        assert devices[1]["cap"] == 300_000_000
        assert report["tool"] == "amdsmi"
        assert report["verified"] is True
        assert report["in_effect"]["clock_level"] == 7
        assert report["in_effect"]["clock_mhz"] == 2100
        assert report["in_effect"]["power_limit_w"] == 300
        assert report["prior"] == {
            "power_limit_w": 550.0,
            "power_default_w": 550.0,
            "power_min_w": 100.0,
            "power_max_w": 550.0,
            "clock": {"perf_level": "auto", "sclk_level": 1, "levels_mhz": MHZ},
        }
        record = gpu_state.read_state(tmp_path / "state" / "gpu-amd-1.json")
        assert record["tool"] == "amdsmi"
    assert _changes(calls) == [
        ("set_perf", "gpu1", "manual"),
        ("set_clk", "gpu1", 1 << 5),
        ("set_cap", "gpu1", 0, 300_000_000),
        ("set_cap", "gpu1", 0, 550_000_000),
        ("set_perf", "gpu1", "auto"),
    ]
    assert {c[1] for c in calls if len(c) > 1} == {"gpu1"}, "only the target GPU is touched"
    assert [c[0] for c in calls].count("init") == 1
    assert calls[0] == ("init",)
    assert calls[-1] == ("shut_down",)
    assert [c[0] for c in calls].count("shut_down") == 1
    assert devices == {0: _device(), 1: _device()}
    assert report["status"] == "restored"
    assert list((tmp_path / "state").glob("*.json")) == []


def test_amdsmi_restores_a_prior_manual_sclk_level(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, calls, _ = amd
    devices[0].update(perf="manual", sclk=2)
    with GpuControl(
        GpuTarget("amd", 0, simulated=False), GpuRequest(clock_level=0), state_dir=state_dir
    ) as report:
        assert devices[0]["sclk"] == 0
        assert report["in_effect"]["clock_mhz"] == 500
    assert _changes(calls)[-2:] == [("set_clk", "gpu0", 1 << 2), ("set_perf", "gpu0", "manual")]
    assert devices[0] == _device(perf="manual", sclk=2)


def test_amdsmi_clock_that_silently_does_not_take_is_an_error(
    state_dir: Path, amd: tuple[dict, list, dict], tmp_path: Path
) -> None:
    devices, calls, quirks = amd
    quirks["clock_ignored"] = True
    control = GpuControl(GpuTarget("amd", 0, simulated=False), GpuRequest(clock_level=7), state_dir=state_dir)
    with (
        pytest.raises(
            GpuControlError,
            match=r"setting did not take effect: clock reads 800 MHz, "
            r"expected 2100 MHz \(level 7\)",
        ),
        control,
    ):
        pass
    assert control.report["verified"] is False
    assert control.report["status"] == "restored"
    assert devices[0] == _device(), "perf level put back even though the clock never moved"
    assert calls[-1] == ("shut_down",)
    assert list((tmp_path / "state").glob("*.json")) == []


def test_amdsmi_permission_error_is_one_line(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, calls, quirks = amd
    quirks["no_perm"] = True
    control = GpuControl(
        GpuTarget("amd", 0, simulated=False), GpuRequest(power_limit_w=200), state_dir=state_dir
    )
    with pytest.raises(UsageError) as info, control:
        pass
    message = str(info.value)
    assert isinstance(info.value, GpuControlError)
    assert "\n" not in message
    assert message == (
        "amdsmi amdsmi_set_power_cap on GPU 0 failed: Error code: 10 | "
        "AMDSMI_STATUS_NO_PERM - Permission Denied"
    )
    assert devices[0] == _device()
    assert calls[-1] == ("shut_down",)


def test_amdsmi_power_outside_limits_refused(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, calls, _ = amd
    control = GpuControl(
        GpuTarget("amd", 0, simulated=False), GpuRequest(power_limit_w=900), state_dir=state_dir
    )
    with (
        pytest.raises(
            UsageError,
            match=r"power limit 900 W is outside what amd GPU 0 "
            r"accepts \(100..550 W\)",
        ),
        control,
    ):
        pass
    assert _changes(calls) == []
    assert devices[0] == _device()
    assert calls[-1] == ("shut_down",)


def test_amdsmi_library_rejects_power_limit_it_does_not_advertise(
    state_dir: Path, amd: tuple[dict, list, dict]
) -> None:
    devices, _calls, _ = amd
    devices[0]["max"] = 0  # no max reported: no preflight range, the library refuses
    with (
        pytest.raises(
            GpuControlError,
            match=r"amdsmi_set_power_cap on GPU 0 failed: .*"
            r"AMDSMI_STATUS_INVAL",
        ),
        GpuControl(GpuTarget("amd", 0, simulated=False), GpuRequest(power_limit_w=600), state_dir=state_dir),
    ):
        pass
    assert devices[0]["cap"] == 550_000_000


def test_amdsmi_missing_index_is_an_error(amd: tuple[dict, list, dict]) -> None:
    _devices, calls, _ = amd
    with pytest.raises(GpuControlError, match=r"amdsmi sees 2 GPU\(s\): there is no GPU 5"):
        AmdSmi(5)
    assert calls == [("init",), ("shut_down",)]


def test_amdsmi_state_file_restored_by_a_later_process(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, calls, _ = amd
    prior = AmdSmi(0).snapshot()
    devices[0].update(perf="manual", sclk=5, cap=200_000_000)  # left changed by a killed run
    gpu_state.write_state(
        {
            "vendor": "amd",
            "index": 0,
            "tool": "amdsmi",
            "pid": 2**22 + 7,
            "pid_start_ticks": 1,
            "prior": prior,
            "applied": {
                "clock_level": {"level": 7, "pending": False},
                "power_limit_w": {"watts": 200, "pending": False},
            },
        },
        state_dir,
    )
    messages = recover_stale_states(state_dir=state_dir)
    assert messages, messages
    assert messages[0].startswith("note: restored amd GPU 0"), messages
    assert devices[0] == _device()
    assert calls[-1] == ("shut_down",)


def _fake_rocm_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "bin" / "rocm-smi"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}")


def test_make_driver_picks_amdsmi_when_importable(
    amd: tuple[dict, list, dict], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_rocm_smi(tmp_path, monkeypatch)
    driver = make_driver("amd", 1)
    assert isinstance(driver, AmdSmi)
    assert driver.tool == "amdsmi"
    assert driver.index == 1
    driver.close()
    assert isinstance(make_driver("amd", 1, allow_library=False), RocmSmi)


def test_make_driver_falls_back_to_rocm_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_rocm_smi(tmp_path, monkeypatch)
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # `import amdsmi` raises ImportError
    driver = make_driver("amd", 0)
    assert isinstance(driver, RocmSmi)
    assert driver.tool == "rocm-smi"


def test_sclk_shapes_across_amdsmi_versions() -> None:
    hz = {"num_supported": 3, "current": 2, "frequency": [500_000_000, 900_000_000, 2_100_000_000]}
    assert amdsmi_sclk(hz, 0) == ([500, 900, 2100], 2)
    mhz = {"num_supported": 3, "current": 0, "frequency": [500, 900, 2100]}
    assert amdsmi_sclk(mhz, 0) == ([500, 900, 2100], 0)
    no_current = {**mhz, "current": 9}
    assert amdsmi_sclk(no_current, 0) == ([500, 900, 2100], None)
    with pytest.raises(GpuControlError, match=r"lists 2 sclk frequencies for num_supported=3"):
        amdsmi_sclk({**mhz, "frequency": [500, 900]}, 0)
    with pytest.raises(GpuControlError, match=r"unknown shape \['clk', 'max_clk'\]"):
        amdsmi_sclk({"clk": 900, "max_clk": 2100}, 0)
    with pytest.raises(GpuControlError, match="no usable sclk frequencies"):
        amdsmi_sclk({"num_supported": 0, "current": 0, "frequency": []}, 0)


def test_power_shapes_across_amdsmi_versions() -> None:
    new = {
        "power_cap": 300_000_000,
        "default_power_cap": 550_000_000,
        "dpm_cap": 1,
        "min_power_cap": 0,
        "max_power_cap": 550_000_000,
    }
    assert amdsmi_power(new, 0) == {
        "power_limit_w": 300.0,
        "power_default_w": 550.0,
        "power_min_w": None,
        "power_max_w": None,
    }
    older = {
        "power_cap": 300_000_000,
        "power_cap_default": 550_000_000,
        "min_power_cap": 100_000_000,
        "max_power_cap": 550_000_000,
    }
    assert amdsmi_power(older, 0) == {
        "power_limit_w": 300.0,
        "power_default_w": 550.0,
        "power_min_w": 100.0,
        "power_max_w": 550.0,
    }
    oldest = {"power_cap": 300_000_000, "dpm_cap": 1}
    assert amdsmi_power(oldest, 0)["power_limit_w"] == 300.0
    with pytest.raises(GpuControlError, match=r"power_cap=300, not a microwatt value"):
        amdsmi_power({"power_cap": 300}, 0)
    with pytest.raises(GpuControlError, match=r"unknown shape \['cap'\]"):
        amdsmi_power({"cap": 300_000_000}, 0)


def test_amdsmi_truncated_clock_list_changes_nothing(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, calls, quirks = amd
    quirks["truncated"] = True
    with (
        pytest.raises(GpuControlError, match="lists 5 sclk frequencies for num_supported=6"),
        GpuControl(GpuTarget("amd", 0, simulated=False), GpuRequest(clock_level=3), state_dir=state_dir),
    ):
        pass
    assert _changes(calls) == []
    assert devices[0] == _device()
    assert calls[-1] == ("shut_down",)


def test_amdsmi_clock_values_in_mhz(state_dir: Path, amd: tuple[dict, list, dict]) -> None:
    devices, _calls, quirks = amd
    quirks["mhz"] = True
    with GpuControl(
        GpuTarget("amd", 0, simulated=False), GpuRequest(clock_level=4), state_dir=state_dir
    ) as report:
        assert report["in_effect"]["clock_mhz"] == 1400
        assert devices[0]["sclk"] == 3
    assert devices[0] == _device()

"""GPU clock/power control against fake nvidia-smi / rocm-smi executables (a real process boundary).

The workload runs on the CPU backend; the CLI runs through tests/cli_with_fakes.py, whose GpuLocator
points the control at a fake GPU (production has no such switch). Runs that measure, are stopped
or are killed are real processes; refusals before any benchmark starts and `restore` call main()
in-process with the same collaborators (run_cli_inprocess(fakes=…)); the vendor tools stay
real processes either way.
Every exit path — normal, error, SIGTERM, kill -9 then `restore` or the next start — must leave
the simulated device exactly as found, and only the target device may be touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import cli_command, load_json, run_cli, run_cli_inprocess, wait_until_measuring
from fake_smi import FakeGpus, initial_state

FAST = ("-d", "cpu", "-i", "3", "-w", "1", "--size", "small")
RUN_4 = ("run", "hetero_kernels", "--streams", "4", *FAST)  # a short CPU run at 4 streams


@pytest.fixture
def fake(tmp_path: Path) -> FakeGpus:
    return FakeGpus(tmp_path)


def _verbs(calls: list[tuple[str, list[str]]]) -> list[str]:
    """Each call reduced to its verb: query / clocks / set flags with values."""
    verbs = []
    for _tool, argv in calls:
        rest = argv[2:]
        if any(a.startswith("--query-gpu") for a in rest) or "--showperflevel" in rest:
            verbs.append("read")
        elif any(a.startswith("--query-supported-clocks") for a in rest):
            verbs.append("read-clocks")
        else:
            verbs.append(" ".join(a for a in rest if a not in ("--autorespond", "YES")))
    return verbs


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    """Kill what a test started and left running (a failed assertion before its own wait): a
    leftover run of a million iterations would load every later test."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _popen(args: list[str], env: dict[str, str], fakes: tuple[str, ...]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*cli_command(*fakes), *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _STARTED.append(proc)
    return proc


def _wait_for(check: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            _out, err = proc.communicate()
            pytest.fail(f"process ended early ({proc.returncode}): {err[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("timed out waiting for the fake device to change")


@pytest.mark.slow
def test_nvidia_apply_verify_restore_order_and_values(fake: FakeGpus, tmp_path: Path) -> None:
    out = tmp_path / "locked.json"
    proc = run_cli(
        *RUN_4,
        *fake.state_args(),
        "--lock-clocks",
        "7",
        "--power-limit",
        "150",
        "-o",
        str(out),
        env=fake.env(),
        fakes=fake.gpu("nvidia", 1),
    )
    assert proc.returncode == 0, proc.stderr
    calls = fake.calls()
    assert {argv[:2] == ["-i", "1"] for _tool, argv in calls} == {True}, "only GPU 1 touched"
    assert _verbs(calls) == [
        "read",
        "read-clocks",  # snapshot before changes
        "-lgc 1980,1980",
        "-pl 150.00",  # apply
        "read",
        "read-clocks",  # verify
        "-pl 300.00",
        "-rgc",  # restore: power cap, then clocks
        "read",
        "read-clocks",
    ]  # verify the restore
    assert fake.devices() == initial_state()
    assert fake.state_files() == []
    report = load_json(out)["gpu_control"]
    assert report["verified"] is True
    assert report["status"] == "restored"
    assert report["in_effect"]["clock_level"] == 7
    assert report["in_effect"]["clock_mhz"] == 1980
    assert report["in_effect"]["power_limit_w"] == 150
    assert report["prior"]["power_limit_w"] == 300
    assert report["after_restore"] == {"clock_mhz": 345, "power_limit_w": 300}


@pytest.mark.slow
def test_amd_apply_verify_restore(fake: FakeGpus, tmp_path: Path) -> None:
    proc = run_cli(
        *RUN_4,
        *fake.state_args(),
        "--lock-clocks",
        "2",
        "--power-limit",
        "150",
        env=fake.env(),
        fakes=fake.gpu("amd", 0),
    )
    assert proc.returncode == 0, proc.stderr
    assert {argv[:2] == ["-d", "0"] for _tool, argv in fake.calls()} == {True}
    assert _verbs(fake.calls()) == [
        "read",
        "--setperflevel manual",
        "--setsclk 1",
        "--setpoweroverdrive 150",
        "read",
        "--setpoweroverdrive 264",
        "--setperflevel auto",
        "read",
    ]
    assert fake.devices() == initial_state()
    assert fake.state_files() == []


@pytest.mark.slow
def test_setting_that_does_not_take_effect_is_an_error_and_restored(fake: FakeGpus, tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    proc = run_cli_inprocess(
        *RUN_4,
        *fake.state_args(),
        "--power-limit",
        "150",
        "-o",
        str(out),
        env=fake.env(FAKE_SMI_IGNORE_SETS="1"),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 2
    assert "did not take effect: power cap reads 300.0 W, expected 150 W" in proc.stderr
    assert not out.exists(), "no benchmark result may claim the setting"
    assert "-pl 300.00" in _verbs(fake.calls()), "restore still ran"
    assert fake.devices() == initial_state()
    assert fake.state_files() == []


def test_missing_privileges_is_a_clear_error(fake: FakeGpus) -> None:
    proc = run_cli_inprocess(
        *RUN_4,
        *fake.state_args(),
        "--lock-clocks",
        "7",
        env=fake.env(FAKE_SMI_DENY="1"),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 2
    assert "Insufficient Permissions" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert fake.devices() == initial_state()
    assert fake.state_files() == []


def test_power_outside_device_limits_refused_before_any_change(fake: FakeGpus) -> None:
    proc = run_cli_inprocess(
        *RUN_4,
        *fake.state_args(),
        "--power-limit",
        "500",
        env=fake.env(),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 2
    assert "outside what nvidia GPU 0" in proc.stderr
    assert "(100..400 W)" in proc.stderr
    assert [v for v in _verbs(fake.calls()) if not v.startswith("read")] == []
    assert fake.state_dir.is_dir(), "the check made the --state-dir folder it would write to"


def test_cpu_backend_refuses_clock_and_power(fake: FakeGpus) -> None:
    proc = run_cli_inprocess(*RUN_4, *fake.state_args(), "--power-limit", "200", env=fake.env())
    assert proc.returncode == 2
    assert "not applicable on the CPU backend" in proc.stderr
    assert fake.calls() == []


#: a run that lasts until it is stopped, with clocks locked and power capped on fake GPU 0
LONG_LOCKED_RUN = [
    *("run", "hetero_kernels", "--streams", "4", "-d", "cpu", "-i", "1000000", "-w", "1"),
    *("--lock-clocks", "5", "--power-limit", "150"),
]


def _changed(fake: FakeGpus) -> bool:
    dev = fake.devices()["nvidia"]["0"]
    return dev["locked"] is not None and dev["power_limit"] == 150.0


def _kill9_mid_run(fake: FakeGpus) -> None:
    proc = _popen(
        [*LONG_LOCKED_RUN, *fake.state_args()],
        fake.env(),
        fake.gpu("nvidia", 0),
    )
    _wait_for(lambda: _changed(fake), proc)
    proc.kill()
    proc.communicate()
    assert _changed(fake), "the hard kill left the device changed"
    assert len(fake.state_files()) == 1
    record = json.loads(fake.state_files()[0].read_text())
    assert record["prior"]["power_limit_w"] == 300.0
    assert set(record["applied"]) == {"clock_level", "power_limit_w"}


@pytest.mark.slow
def test_kill9_then_restore_command(fake: FakeGpus) -> None:
    _kill9_mid_run(fake)
    proc = run_cli_inprocess("restore", *fake.state_args(), env=fake.env())
    assert proc.returncode == 0, proc.stderr
    assert "restored nvidia GPU 0 to its prior state" in proc.stdout
    assert fake.devices() == initial_state()
    assert fake.state_files() == []
    again = run_cli_inprocess("restore", *fake.state_args(), env=fake.env())
    assert again.returncode == 0
    assert "nothing to restore" in again.stdout


@pytest.mark.slow
def test_restore_reports_as_json_file(fake: FakeGpus, tmp_path: Path) -> None:
    _kill9_mid_run(fake)
    out = tmp_path / "restore.json"
    proc = run_cli_inprocess("restore", "--json", "-o", str(out), *fake.state_args(), env=fake.env())
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert json.loads(proc.stdout) == data
    assert data["kind"] == "restore"
    assert len(data["outcomes"]) == 1
    assert data["outcomes"][0]["status"] == "restored"
    assert "restored nvidia GPU 0" in data["outcomes"][0]["message"]
    assert fake.devices() == initial_state()


@pytest.mark.slow
def test_kill9_then_next_start_restores(fake: FakeGpus) -> None:
    _kill9_mid_run(fake)
    proc = run_cli("run", "hetero_kernels", "--streams", "2", *FAST, *fake.state_args(), env=fake.env())
    assert proc.returncode == 0, proc.stderr
    assert "note: restored nvidia GPU 0 to its prior state" in proc.stderr
    assert fake.devices() == initial_state()
    assert fake.state_files() == []


@pytest.mark.slow
def test_sigterm_mid_policy_sweep_restores(fake: FakeGpus, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    proc = _popen(
        [
            "policy-sweep",
            "hetero_kernels",
            "--streams",
            "4",
            "--policies",
            "priority_be,baseline",
            "-d",
            "cpu",
            "-i",
            "1000000",
            "-w",
            "1",
            "-o",
            str(out),
            *fake.state_args(),
        ],
        fake.env(),
        fake.gpu("nvidia", 0),
    )
    _wait_for(lambda: fake.devices()["nvidia"]["0"]["power_limit"] == 150.0, proc)
    wait_until_measuring(proc)  # the point's child run is inside its measurement
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert fake.devices() == initial_state(), "SIGTERM left the device changed"
    assert fake.state_files() == []
    data = load_json(out)
    assert data["kind"] == "policy-sweep"
    assert data["points"] == []


@pytest.mark.slow
def test_device_held_by_a_live_process_is_refused(fake: FakeGpus) -> None:
    from aorta.hw_queue_eval.gpu import state as gpu_state

    fake.state_dir.mkdir(mode=0o700)
    record = {
        "state_version": 1,
        "vendor": "nvidia",
        "index": 0,
        "tool": "nvidia-smi",
        "pid": os.getpid(),
        "pid_start_ticks": gpu_state.process_start_ticks(os.getpid()),
        "prior": {"power_limit_w": 300.0, "clock": {}},
        "applied": {},
    }
    (fake.state_dir / "gpu-nvidia-0.json").write_text(json.dumps(record))
    proc = run_cli(
        "run",
        "hetero_kernels",
        "--streams",
        "2",
        *FAST,
        "--power-limit",
        "150",
        *fake.state_args(),
        env=fake.env(),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 2
    assert f"being controlled by running pid {os.getpid()}" in proc.stderr
    restore = run_cli("restore", *fake.state_args(), env=fake.env())
    assert restore.returncode == 0
    assert "still running" in restore.stdout
    assert fake.calls() == []
    assert len(fake.state_files()) == 1


@pytest.mark.slow
def test_sweep_holds_clocks_for_every_point_and_restores(fake: FakeGpus, tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    proc = run_cli(
        "sweep",
        "hetero_kernels",
        "--streams",
        "1,2",
        *FAST,
        "--lock-clocks",
        "3",
        "-o",
        str(out),
        *fake.state_args(),
        env=fake.env(),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 0, proc.stderr
    verbs = [v for v in _verbs(fake.calls()) if not v.startswith("read")]
    assert verbs == ["-lgc 1200,1200", "-rgc"], "applied once around the whole sweep"
    data = load_json(out)
    assert data["gpu_control"]["status"] == "restored"
    assert data["gpu_control"]["in_effect"]["clock_level"] == 3
    assert [p["status"] for p in data["points"]] == ["ok", "ok"]
    assert fake.devices() == initial_state()
    assert fake.state_files() == []


@pytest.mark.slow
def test_ctrl_c_mid_run_restores(fake: FakeGpus) -> None:
    proc = _popen(
        [*LONG_LOCKED_RUN, *fake.state_args()],
        fake.env(),
        fake.gpu("nvidia", 0),
    )
    _wait_for(lambda: _changed(fake), proc)
    wait_until_measuring(proc)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert fake.devices() == initial_state(), "Ctrl+C left the device changed"
    assert fake.state_files() == []


def test_policy_power_out_of_range_stops_before_any_run(fake: FakeGpus, tmp_path: Path) -> None:
    policies = tmp_path / "p.toml"
    policies.write_text("[policies.too_hot]\npower_limit_w = 450\n")
    out = tmp_path / "o.json"
    proc = run_cli_inprocess(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policy-file",
        str(policies),
        *FAST,
        "-o",
        str(out),
        *fake.state_args(),
        env=fake.env(),
        fakes=fake.gpu("nvidia", 0),
    )
    assert proc.returncode == 2
    assert "power limit 450 W is outside what nvidia GPU 0" in proc.stderr
    assert "accepts (100..400 W)" in proc.stderr
    assert not out.exists(), "stopped before the first point"
    assert [v for v in _verbs(fake.calls()) if not v.startswith("read")] == []
    assert fake.state_dir.is_dir(), "policy-sweep's check made the --state-dir folder"


def test_restore_does_not_need_torch(fake: FakeGpus) -> None:
    code = (
        "import sys\nfrom aorta.hw_queue_eval.cli import main\n"
        f"try:\n    main(['restore', *{list(fake.state_args())!r}])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **fake.env()},
    )
    assert proc.returncode == 0, proc.stderr
    assert "nothing to restore" in proc.stdout


def test_missing_vendor_tool_is_a_clear_error_before_the_benchmark(fake: FakeGpus, tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    proc = run_cli_inprocess(
        *RUN_4,
        *fake.state_args(),
        "--lock-clocks",
        "7",
        "-o",
        str(out),
        env=fake.env(PATH="/usr/bin:/bin"),
        fakes=fake.gpu("amd", 0),
    )
    assert proc.returncode == 2
    assert "rocm-smi not found on PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Running hetero_kernels" not in proc.stderr
    assert not out.exists()
    assert fake.state_files() == []


@pytest.mark.slow
def test_unrestorable_state_file_warns_plain_runs_and_stops_control(fake: FakeGpus) -> None:
    _kill9_mid_run(fake)
    denied = fake.env(FAKE_SMI_DENY="1")
    plain = run_cli("run", "hetero_kernels", "--streams", "2", *FAST, *fake.state_args(), env=denied)
    assert plain.returncode == 0, plain.stderr
    assert "warning:" in plain.stderr
    assert "could not put GPU 0 back as found" in plain.stderr
    assert len(fake.state_files()) == 1, "kept for a later restore"
    control = run_cli_inprocess(
        "run",
        "hetero_kernels",
        "--streams",
        "2",
        *FAST,
        "--power-limit",
        "200",
        *fake.state_args(),
        env=fake.env(FAKE_SMI_DENY="1"),
        fakes=fake.gpu("nvidia", 0),
    )
    assert control.returncode == 3, control.stderr  # a device left changed, not a typo
    assert "could not put GPU 0 back" in control.stderr
    restore = run_cli_inprocess("restore", *fake.state_args(), env=fake.env())
    assert restore.returncode == 0, restore.stderr
    assert fake.devices() == initial_state()
    assert fake.state_files() == []

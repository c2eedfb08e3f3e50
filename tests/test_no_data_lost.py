"""Issue 10, part A: no data lost (locks, other kinds of files, equal paths, disk full, SIGTERM),
`restore` that trusts nothing in a state file, and Markdown that cannot be injected."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import load_json, run_cli, run_cli_inprocess
from fake_smi import FakeGpus, initial_state
from test_compare import _noisy, _run, _write

TINY = ("-i", "2", "-w", "1", "-d", "cpu", "--size", "small")


def one_line_error(proc: subprocess.CompletedProcess[str], needle: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert needle in errors[0], proc.stderr


# -- the sweep output is locked -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sweep", "policy-sweep"])
def test_second_sweep_on_the_same_output_exits_2_naming_the_holder(tmp_path, command):
    out = tmp_path / "s.json"
    streams = "1,2,4" if command == "sweep" else "2"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            command,
            "hetero_kernels",
            "--streams",
            streams,
            "-i",
            "100000",
            "-w",
            "1",
            "-d",
            "cpu",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = run_cli(command, "hetero_kernels", "--streams", streams, *TINY, "-o", str(out))
        one_line_error(second, f"is in use by pid {first.pid}")
        first.send_signal(signal.SIGTERM)
        _out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, err
    assert "terminated: " in err
    assert "Traceback" not in err
    assert load_json(out)["state"] == "terminated"
    assert not (tmp_path / ".s.json.lock").exists(), "the lock is removed at exit"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_lock_of_a_killed_holder_is_no_obstacle(tmp_path):
    from aorta.common.outlock import OutputLock

    out = tmp_path / "s.json"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from aorta.common.outlock import OutputLock\n"
            f"lock = OutputLock({str(out)!r})\nprint('held', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    from aorta.common.errors import UsageError

    with pytest.raises(UsageError, match=f"in use by pid {holder.pid}"):
        OutputLock(out)
    holder.kill()
    holder.wait()
    lock = OutputLock(out)  # the stale file is reused: flock died with its holder
    lock.release()
    assert not (tmp_path / ".s.json.lock").exists()


# -- files of another kind, equal paths ----------------------------------------------------------


def _sweep_checkpoint(path: Path) -> str:
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "sweep",
                "points": [
                    {"key": {"workload": "hetero_kernels", "streams": n}, "status": "ok", "result": {}}
                    for n in (1, 2, 4)
                ],
            }
        )
    )
    return path.read_text()


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "hetero_kernels", "--streams", "1", *TINY, "-o", "{out}"),
        ("run", "hetero_kernels", "--streams", "1", *TINY, "--trace-out", "{out}"),
        ("compare", "-b", "{base}", "-t", "{base}", "-o", "{out}"),
    ],
    ids=["run -o", "run --trace-out", "compare -o"],
)
def test_a_sweep_checkpoint_is_not_replaced_without_force(tmp_path, argv):
    out = tmp_path / "sweep.json"
    before = _sweep_checkpoint(out)
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    proc = run_cli_inprocess(*[a.format(out=out, base=base) for a in argv])
    one_line_error(proc, "already holds a sweep file")
    assert "--force" in proc.stderr
    assert out.read_text() == before


@pytest.mark.slow
def test_force_replaces_and_a_run_result_may_be_rewritten(tmp_path):
    out = tmp_path / "r.json"
    _sweep_checkpoint(out)
    first = run_cli_inprocess("run", "hetero_kernels", "--streams", "1", *TINY, "-o", str(out), "--force")
    assert first.returncode == 0, first.stderr
    assert load_json(out)["kind"] == "run"
    again = run_cli_inprocess("run", "hetero_kernels", "--streams", "1", *TINY, "-o", str(out))
    assert again.returncode == 0, again.stderr  # a run result is replaced by a run result


@pytest.mark.parametrize("trace", ["{d}/r.json", "{d}/./r.json", "{d}/link/r.json"])
def test_result_and_trace_on_the_same_file_refused(tmp_path, trace):
    (tmp_path / "link").symlink_to(tmp_path)
    proc = run_cli_inprocess(
        "run",
        "hetero_kernels",
        "--streams",
        "1",
        *TINY,
        "-o",
        str(tmp_path / "r.json"),
        "--trace-out",
        trace.format(d=tmp_path),
    )
    one_line_error(proc, "name the same file")
    assert not (tmp_path / "r.json").exists()


# -- disk full ------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled up (root only; skipped where mounting is not allowed)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as fh:
            while True:
                fh.write(b"x" * 4096)
                fh.flush()
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_disk_full_run_keeps_the_result_in_a_private_temp_file(full_disk, tmp_path):
    spare = tmp_path / "spare"
    spare.mkdir()
    proc = run_cli(
        "run",
        "hetero_kernels",
        "--streams",
        "2",
        *TINY,
        "-o",
        str(full_disk / "r.json"),
        env={"TMPDIR": str(spare)},
    )
    one_line_error(proc, "No space left on device")
    assert "Throughput" in proc.stdout or "throughput" in proc.stdout.lower()  # printed
    kept = re.search(r"kept in (\S+): move it", proc.stderr)
    assert kept, proc.stderr
    path = Path(kept.group(1))
    assert path.parent.parent == spare
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(path.read_text())["kind"] == "run"
    assert sorted(os.listdir(full_disk)) == ["filler"], "no temp file left on the full disk"


@pytest.mark.slow  # the report draws its plots (matplotlib)
def test_disk_full_report_leaves_no_folder_and_compare_is_one_line(full_disk, tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    report = run_cli_inprocess("report", base, "-o", str(full_disk / "rep"))
    one_line_error(report, "No space left on device")
    compare = run_cli_inprocess("compare", "-b", base, "-t", base, "-o", str(full_disk / "c.json"))
    one_line_error(compare, "No space left on device")
    assert sorted(os.listdir(full_disk)) == ["filler"]


# -- restore validates every field of a state file -----------------------------------------------


def _state(vendor: str) -> dict:
    if vendor == "nvidia":
        clock = {
            "sm_mhz": 345,
            "max_sm_mhz": 1980,
            "supported_mhz": [345, 1980],
            "locked_mhz": None,
            "locked_note": "…",
        }
        prior = {
            "power_limit_w": 300.0,
            "power_default_w": 350.0,
            "power_min_w": 100.0,
            "power_max_w": 400.0,
            "clock": clock,
        }
        tool = "nvidia-smi"
    else:
        prior = {
            "power_limit_w": 264.0,
            "power_default_w": None,
            "power_min_w": None,
            "power_max_w": None,
            "clock": {"perf_level": "auto", "sclk_level": 0, "levels_mhz": [500, 1200, 2100]},
        }
        tool = "rocm-smi"
    return {
        "state_version": 1,
        "vendor": vendor,
        "index": 0,
        "tool": tool,
        "simulated": True,
        "pid": 999_999_999,
        "pid_start_ticks": 1,
        "started": "2026-01-01T00:00:00Z",
        "argv": [],
        "prior": prior,
        "applied": {
            "clock_level": {"level": 7, "pending": False},
            "power_limit_w": {"watts": 150.0, "pending": False},
        },
    }


BAD_STATES = [
    ("nvidia", "index", 1, "do not match the file name"),
    ("nvidia", "index", "0", "not a GPU index"),
    ("nvidia", "index", True, "not a GPU index"),
    ("nvidia", "index", -1, "not a GPU index"),
    ("nvidia", "vendor", "intel", "not nvidia or amd"),
    ("nvidia", "tool", "sh", "tool 'sh'"),
    ("nvidia", "tool", "rocm-smi", "tool 'rocm-smi'"),
    ("nvidia", "state_version", None, "state_version"),
    ("nvidia", "pid", "1; reboot", "pid"),
    ("nvidia", "prior", [], "prior is not an object"),
    ("nvidia", "prior.power_limit_w", "300", "not watts"),
    ("nvidia", "prior.power_limit_w", 1e9, "not watts"),
    ("nvidia", "prior.power_limit_w", float("nan"), "NaN is not a number JSON allows"),  # refused at parse
    ("nvidia", "prior.power_limit_w", 450.0, "outside what GPU 0 accepts"),
    ("nvidia", "prior.clock", "fast", "prior.clock"),
    ("nvidia", "applied", {"fan": {}}, "applied"),
    ("nvidia", "applied.power_limit_w", {"pending": "no"}, "pending"),
    ("amd", "prior.clock.perf_level", "--help", "perf_level '--help'"),
    ("amd", "prior.clock.perf_level", "manual; id", "perf_level"),
    ("amd", "prior.clock.sclk_level", 9, "sclk_level 9"),
    ("amd", "prior.clock.sclk_level", "-1", "sclk_level"),
    ("amd", "prior.clock.levels_mhz", "500", "levels_mhz"),
    ("amd", "prior.clock.levels_mhz", [], "levels_mhz"),
]


def _set(record: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for key in path:
        record = record[key]
    record[last] = value


@pytest.fixture
def fake(tmp_path: Path) -> FakeGpus:
    return FakeGpus(tmp_path)


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_a_valid_state_file_restores(fake, vendor):
    fake.state_dir.mkdir(mode=0o700)
    (fake.state_dir / f"gpu-{vendor}-0.json").write_text(json.dumps(_state(vendor)))
    proc = run_cli_inprocess("restore", *fake.state_args(), env=fake.env())
    assert proc.returncode == 0, proc.stderr
    assert f"restored {vendor} GPU 0" in proc.stdout
    assert fake.state_files() == []


@pytest.mark.parametrize(
    ("vendor", "field", "value", "needle"), BAD_STATES, ids=[f"{f}={v!r}" for _, f, v, _ in BAD_STATES]
)
def test_restore_refuses_a_bad_state_file_and_leaves_it(fake, vendor, field, value, needle):
    fake.state_dir.mkdir(mode=0o700)
    record = _state(vendor)
    _set(record, field, value)
    path = fake.state_dir / f"gpu-{vendor}-0.json"
    path.write_text(json.dumps(record))
    before = path.read_text()
    proc = run_cli_inprocess("restore", *fake.state_args(), env=fake.env())
    one_line_error(proc, needle, code=3)  # the device it names may still be changed
    assert path.read_text() == before, "the file stays for a person to check"
    sets = [
        argv for _tool, argv in fake.calls() if not any(a.startswith(("--query", "--show")) for a in argv)
    ]
    assert sets == [], f"a tool was asked to change something: {sets}"
    assert fake.devices() == initial_state()


# -- Markdown from input files is escaped --------------------------------------------------------

EVIL = "x](https://evil.example) <img src=x onerror=alert(1)>\n# Owned | col *bold* `code`"


def test_markdown_escapes_strings_from_the_input_files(tmp_path):
    base_data = _run(_noisy(10, 30, 1), workload=EVIL)
    test_data = _run(_noisy(12, 30, 2), workload=EVIL)
    for data in (base_data, test_data):
        data["throughput_unit"] = "[u](javascript:alert(1))"
    base = _write(tmp_path, "b.json", base_data)
    test = _write(tmp_path, "t.json", test_data)
    proc = run_cli_inprocess("compare", "-b", base, "-t", test, "--markdown")
    assert proc.returncode in (0, 1), proc.stderr
    text = proc.stdout
    assert "| Point | Metric |" in text  # the table is there …
    assert [ln for ln in text.splitlines() if ln.startswith("#")] == [text.splitlines()[0]]
    for raw in (r"\]\(", r"<img", r"`code", r"\*bold", r"https:", r"\[u"):
        assert not re.search(r"(?<!\\)" + raw, text), raw  # only escaped forms remain
    assert r"\<img" in text
    assert r"\# Owned" in text
    for row in (ln for ln in text.splitlines() if ln.startswith("| x")):
        assert row.count(" | ") == 6, row  # the name's | did not add a column


def test_disk_full_mid_sweep_keeps_the_checkpoint(full_disk, tmp_path, monkeypatch):
    import tempfile

    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.sweeps.checkpoint import CheckpointFile

    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setenv("TMPDIR", str(spare))
    monkeypatch.setattr(tempfile, "tempdir", None)
    file = CheckpointFile(full_disk / "s.json", "sweep", {"fingerprint": "f"})
    with pytest.raises(UsageError, match="No space left on device") as err:
        file.record({"key": {"streams": 1}, "status": "ok", "result": {"x": [1.0] * 20000}})
    kept = re.search(r"kept in (\S+):", str(err.value))
    assert kept
    assert "\n" not in str(err.value)
    assert Path(kept.group(1)).parent.parent == spare
    assert json.loads(Path(kept.group(1)).read_text())["points"][0]["status"] == "ok"
    assert sorted(os.listdir(full_disk)) == ["filler"]

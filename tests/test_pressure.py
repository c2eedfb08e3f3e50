"""The memory-pressure helper: sizes, stale-cgroup cleanup, and a real cgroup when root."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aorta.common.errors import UsageError
from aorta.tools import memory_pressure as pressure
from conftest import process_identity, still_running


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("768M", 768 << 20), ("1.5G", 3 << 29), ("64k", 64 << 10), ("2GiB", 2 << 30)],
)
def test_parse_size(text, value):
    assert pressure.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1M", "0", "5X", "99999999999999999999T", "1e400"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        pressure.parse_size(text)


@pytest.mark.slow
def test_remove_stale_keeps_live_owners_and_never_follows_links(tmp_path):
    dead, alive = tmp_path / f"{pressure.PREFIX}999999999", tmp_path / f"{pressure.PREFIX}{os.getpid()}"
    dead.mkdir()
    alive.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"{pressure.PREFIX}1").symlink_to(tmp_path / "elsewhere")
    assert pressure.remove_stale(tmp_path) == [dead.name]
    assert alive.exists()
    assert not dead.exists()
    assert (tmp_path / f"{pressure.PREFIX}1").is_symlink()
    assert (tmp_path / "elsewhere").exists()


def test_cli_needs_limit_and_command():
    proc = subprocess.run(
        [sys.executable, "-m", "aorta.tools.memory_pressure", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "--limit" in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="creating a cgroup needs root")
def test_cgroup_is_created_limited_and_removed():
    with pressure.MemoryPressure(256 << 20, churn_bytes=8 << 20) as mp:
        folder = mp.folder
        assert folder is not None
        assert folder.is_dir()
        limit_file = "memory.max" if mp.place.version == 2 else "memory.limit_in_bytes"
        assert int((folder / limit_file).read_text()) == 256 << 20
        code = mp.run([sys.executable, "-c", "import sys; print(open('/proc/self/cgroup').read())"])
        assert code == 0
        assert mp.churner is not None
        assert mp.churner.poll() is None
        churner = mp.churner
        assert not list(Path(mp.churn_dir).glob(".aorta-churn-*"))  # unlinked at once
    assert not folder.exists()
    assert churner.poll() is not None


def test_cgroup_folder_under_a_container_mount_root() -> None:
    # a container mounts only its own subtree: mountinfo root /libpod_parent/libpod-1 at
    # /sys/fs/cgroup/memory, while /proc/self/cgroup names the full path
    assert pressure._under(
        "/sys/fs/cgroup/memory", "/libpod_parent/libpod-1", "/libpod_parent/libpod-1"
    ) == Path("/sys/fs/cgroup/memory")
    assert pressure._under(
        "/sys/fs/cgroup/memory", "/libpod_parent/libpod-1", "/libpod_parent/libpod-1/sub"
    ) == Path("/sys/fs/cgroup/memory/sub")
    assert pressure._under("/sys/fs/cgroup", "/", "/a/b") == Path("/sys/fs/cgroup/a/b")
    assert pressure._under("/m", "/x", "/xy") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--limit", "1", "--", "true"], "below 64M"),
        (["--limit", "99999999999999999999T", "--", "true"], "too large"),
        (["--limit", "999T", "--", "true"], "not below this machine's memory"),
        (["--limit", "512M", "--churn-dir", "/nonexistent", "--", "true"], "not an existing folder"),
        (["--limit", "512M", "--churn-dir", "", "--", "true"], "not an existing folder"),
        (["--limit", "512M", "--", "/nonexistent/command"], "not found"),
        (["--limit", "512M", "--", "no-such-command-aorta"], "not found"),
    ],
)
def test_cli_bad_input_is_one_line_before_any_work(args, words):
    proc = subprocess.run(
        [sys.executable, "-m", "aorta.tools.memory_pressure", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="creating a cgroup needs root")
def test_kill_9_of_the_helper_leaves_no_churner_and_no_file(tmp_path):
    """The helper is SIGKILLed mid-run: its churner dies with it, no churn file exists, and the
    next start removes the cgroup."""
    helper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.tools.memory_pressure",
            "--limit",
            "256M",
            "--churn",
            "64M",
            "--churn-dir",
            str(tmp_path),
            "--",
            "sleep",
            "60",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    place = pressure.find_memory_cgroup()
    folder = place.path / f"{pressure.PREFIX}{helper.pid}"
    deadline = time.monotonic() + 30
    churners: list[int] = []
    while time.monotonic() < deadline and not churners:
        with contextlib.suppress(OSError):
            churners = [
                int(p) for p in (folder / "cgroup.procs").read_text().split() if pressure._is_churner(p)
            ]
        time.sleep(0.05)
    assert churners, "the churner never started"
    identities = [process_identity(p) for p in churners]
    assert not list(tmp_path.iterdir())  # the sparse file is unlinked while in use
    helper.kill()
    helper.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(still_running(c) for c in identities):
        time.sleep(0.05)
    assert not any(still_running(c) for c in identities), "the churner outlived the helper"
    sleeper = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    try:
        assert str(folder.name) in pressure.remove_stale(place.path)
        assert not folder.exists()
    finally:
        for pid in sleeper:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

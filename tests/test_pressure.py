"""The memory-pressure helper: sizes, stale-cgroup cleanup, and a real cgroup when root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aorta.common.errors import UsageError
from aorta.ebpf import pressure


@pytest.mark.parametrize(("text", "value"), [("4096", 4096), ("768M", 768 << 20), ("1.5G", 3 << 29),
                                              ("64k", 64 << 10), ("2GiB", 2 << 30)])
def test_parse_size(text, value):
    assert pressure.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-1M", "0", "5X"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        pressure.parse_size(text)


def test_remove_stale_keeps_live_owners_and_never_follows_links(tmp_path):
    dead, alive = tmp_path / f"{pressure.PREFIX}999999999", tmp_path / f"{pressure.PREFIX}{os.getpid()}"
    dead.mkdir()
    alive.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"{pressure.PREFIX}1").symlink_to(tmp_path / "elsewhere")
    assert pressure.remove_stale(tmp_path) == [dead.name]
    assert alive.exists() and not dead.exists()
    assert (tmp_path / f"{pressure.PREFIX}1").is_symlink() and (tmp_path / "elsewhere").exists()


def test_cli_needs_limit_and_command():
    proc = subprocess.run([sys.executable, "-m", "aorta.ebpf.pressure", "--", "true"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "--limit" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a cgroup needs root")
def test_cgroup_is_created_limited_and_removed():
    with pressure.MemoryPressure(256 << 20, churn_bytes=8 << 20) as mp:
        folder = mp.folder
        assert folder is not None and folder.is_dir()
        limit_file = "memory.max" if mp.place.version == 2 else "memory.limit_in_bytes"
        assert int((folder / limit_file).read_text()) == 256 << 20
        code = mp.run([sys.executable, "-c",
                       "import sys; print(open('/proc/self/cgroup').read())"])
        assert code == 0
        assert mp.churner is not None and mp.churner.poll() is None
        churn_file = mp.churn_file
    assert not folder.exists()
    assert churn_file is not None and not os.path.exists(churn_file)


def test_cgroup_folder_under_a_container_mount_root() -> None:
    # a container mounts only its own subtree: mountinfo root /libpod_parent/libpod-1 at
    # /sys/fs/cgroup/memory, while /proc/self/cgroup names the full path
    assert pressure._under("/sys/fs/cgroup/memory", "/libpod_parent/libpod-1",
                           "/libpod_parent/libpod-1") == Path("/sys/fs/cgroup/memory")
    assert pressure._under("/sys/fs/cgroup/memory", "/libpod_parent/libpod-1",
                           "/libpod_parent/libpod-1/sub") == Path("/sys/fs/cgroup/memory/sub")
    assert pressure._under("/sys/fs/cgroup", "/", "/a/b") == Path("/sys/fs/cgroup/a/b")
    assert pressure._under("/m", "/x", "/xy") is None

"""Output paths that are not regular files (issue 21, item 2): `-o` onto a device node or a FIFO
must not replace it (as root, `-o /dev/null` would replace it for the whole system), and no probe
file may be made in its folder. Every writer is checked against a FIFO and a character device
(a clone of /dev/null made with mknod in a private folder; the real /dev is never touched)."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from aorta.common import atomicio
from aorta.common.errors import UsageError
from conftest import run_cli_inprocess, unavailable
from test_cli import assert_usage_error

TINY = ("--streams", "1", "-i", "2", "-w", "1", "-d", "cpu", "--size", "small")

STATE = ("--state-dir", "{state}")  # never the machine's /var/lib/aorta
#: The ten writers; {out} is the special node, {fixture} a result file outside its folder.
WRITERS = {
    "run -o": ("run", "hetero_kernels", *TINY, *STATE, "-o", "{out}"),
    "run --trace-out": ("run", "hetero_kernels", *TINY, *STATE, "--trace-out", "{out}"),
    "sweep": ("sweep", "hetero_kernels", *TINY, *STATE, "-o", "{out}"),
    "policy-sweep": ("policy-sweep", "hetero_kernels", *TINY, *STATE, "-o", "{out}"),
    "compare": ("compare", "-b", "{fixture}", "-t", "{fixture}", "-o", "{out}"),
    "restore": ("restore", *STATE, "-o", "{out}"),
    "ebpf-info": ("ebpf-info", "-o", "{out}"),
    "list": ("list", "-o", "{out}"),
    "info": ("info", "-o", "{out}"),
    "ebpf-attach": ("ebpf-attach", "--pid", str(os.getpid()), "--duration", "1", "-o", "{out}"),
}

KINDS = {"fifo": stat.S_ISFIFO, "chardev": stat.S_ISCHR}


def _make_node(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
        return
    if os.geteuid() != 0:
        unavailable(
            "making a character device (mknod) needs root",
            "making a character device needs root, required in CI",
        )
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null clone


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_refuses_a_device_or_fifo_and_leaves_it(tmp_path, writer, kind):
    folder = tmp_path / "target"
    folder.mkdir()
    node = folder / "out.json"
    _make_node(kind, node)
    fixture = tmp_path / "base.json"
    fixture.write_text("{}")
    args = [a.format(out=node, fixture=fixture, state=tmp_path / "state") for a in WRITERS[writer]]
    proc = run_cli_inprocess(*args)
    assert_usage_error(proc, "not a regular file")
    assert KINDS[kind](os.lstat(node).st_mode), "the node was replaced"
    assert os.listdir(folder) == ["out.json"], "something was made in the node's folder"


def test_the_write_itself_refuses_a_fifo_planted_after_the_check(tmp_path):
    target = tmp_path / "out.json"
    atomicio.check_output_path(target)  # nothing there yet: accepted
    os.mkfifo(target)  # planted between the check and the write
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        atomicio.atomic_write_json(target, {"a": 1})
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert os.listdir(tmp_path) == ["out.json"]


def test_no_probe_file_in_a_kernel_file_system_folder(monkeypatch):
    made: list[str] = []
    real = atomicio._create_temp
    monkeypatch.setattr(atomicio, "_create_temp", lambda fd, stem: made.append(stem) or real(fd, stem))
    # /proc and /sys are the kernel's everywhere; /dev is devtmpfs on a host but a tmpfs in a
    # container (podman), a plain file system where a result may go
    for folder in ("/dev", "/proc", "/sys"):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            kernel = atomicio.filesystem_type(fd) in atomicio.KERNEL_FILESYSTEMS
        finally:
            os.close(fd)
        assert kernel or folder == "/dev"
        if kernel:
            with pytest.raises(UsageError, match=r"kernel's .* file system"):
                atomicio.check_output_path(f"{folder}/aorta-new-result.json")
    assert made == []


def test_a_plain_folder_is_still_probed(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert atomicio.filesystem_type(fd) not in atomicio.KERNEL_FILESYSTEMS  # None: unknown
    finally:
        os.close(fd)
    assert atomicio.check_output_path(tmp_path / "r.json") == tmp_path / "r.json"
    assert os.listdir(tmp_path) == []


# -- the lock beside a sweep file ----------------------------------------------------------------

SWEEPS = {
    "sweep": ("sweep", "hetero_kernels", *TINY, "-o", "{out}"),
    "policy-sweep": ("policy-sweep", "hetero_kernels", *TINY, "-o", "{out}"),
}


@pytest.mark.parametrize("command", sorted(SWEEPS))
def test_a_fifo_planted_as_the_lock_file_is_refused(tmp_path, command):
    out = tmp_path / "s.json"
    os.mkfifo(tmp_path / ".s.json.lock")
    proc = run_cli_inprocess(*[a.format(out=out) for a in SWEEPS[command]])
    assert_usage_error(proc, ".s.json.lock is not a regular file")
    assert stat.S_ISFIFO(os.lstat(tmp_path / ".s.json.lock").st_mode)
    assert sorted(os.listdir(tmp_path)) == [".s.json.lock"]


@pytest.fixture
def full_tmpfs(tmp_path):
    """A 64 KiB tmpfs filled to the last block (mounting needs root; CI=true requires it)."""
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root", "mounting a full tmpfs needs root, required in CI")
    mnt = tmp_path / "full"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        with open(mnt / "filler", "wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode:  # a leaked descriptor
            subprocess.run(["umount", "-l", str(mnt)], check=True)
            pytest.fail("a file on the full tmpfs was left open")


@pytest.mark.parametrize("command", sorted(SWEEPS))
def test_a_full_disk_is_one_line_and_leaves_no_lock_file(full_tmpfs, command):
    proc = run_cli_inprocess(*[a.format(out=full_tmpfs / "s.json") for a in SWEEPS[command]])
    assert_usage_error(proc, "No space left on device", "free space or choose another -o")
    assert os.listdir(full_tmpfs) == ["filler"]

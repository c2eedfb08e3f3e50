"""The guide's privilege and path routes (issue 15, section 3), tried for real where possible.

* a bpftrace carrying file capabilities (setcap), run by an unprivileged user (nobody): aorta uses
  it without sudo if it can, else names exactly what stops it;
* tracefs under debugfs when /sys/kernel/tracing is absent or empty, and which one was mounted;
* non-root with an unreadable $HOME: a plain run does not crash on the GPU-state folder;
* "can't start new thread" in `run`: one line, exit 2, nothing written;
* a process in its own PID namespace (container without --pid=host): tracing says why it is off.

Runs as another user use the distribution's /usr/bin/python3 and a world-readable copy of
`aorta.ebpf` (standard library only), because this checkout's environment may live in /root.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from aorta.ebpf import session, tracefs
from aorta.ebpf.filecaps import FileCaps, file_caps, parse_vfs_cap_data

SRC = Path(__file__).resolve().parents[1] / "src"
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def _need(*tools: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to switch to an unprivileged user and set file capabilities)")
    for tool in tools:
        if not (shutil.which(tool) or os.access(tool, os.X_OK)):
            pytest.skip(f"needs {tool}")


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A temporary folder every user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="aorta-guide-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_nobody(
    public: Path, code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run python `code` as user nobody with a public copy of aorta (the ebpf package is stdlib-only)."""
    copy = public / "src"
    if not copy.exists():
        shutil.copytree(SRC / "aorta", copy / "aorta", ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(public):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755)
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "PYTHONPATH": str(copy),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()),
            SYSTEM_PYTHON,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=str(public),
    )


def _setcap_copy(public: Path, caps: str) -> str:
    """A copy of the real bpftrace with file capabilities `caps` (e.g. cap_bpf,cap_perfmon+ep)."""
    real = shutil.which("bpftrace")
    if real is None:
        pytest.skip("needs bpftrace")
    copy = public / f"bpftrace-{caps.replace(',', '-').replace('+', '_')}"
    shutil.copy2(real, copy)
    copy.chmod(0o755)
    proc = subprocess.run(["setcap", caps, str(copy)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"setcap failed here: {proc.stderr.strip()}")
    return str(copy)


def readiness_code(bpftrace: str) -> str:
    """Python that prints check_readiness's verdict and reason for this bpftrace (--bpftrace)."""
    return (
        "from aorta.ebpf.engine import check_readiness\n"
        f"r = check_readiness(mount_tracefs=False, bpftrace={bpftrace!r})\n"
        "print('OK' if r.ok else 'NO'); print(r.reason or r.privilege)\n"
    )


# --- file capabilities -------------------------------------------------------------------------


def test_vfs_cap_data_is_decoded() -> None:
    # revision 2, effective flag; permitted low word has bit 2, high word bits 38-32=6 and 39-32=7
    raw = struct.pack("<IIIII", 0x02000001, 1 << 2, 0, (1 << 6) | (1 << 7), 0)
    caps = parse_vfs_cap_data(raw)
    assert caps == FileCaps(frozenset({"cap_dac_read_search", "cap_perfmon", "cap_bpf"}), True)
    assert caps.describe() == "cap_bpf,cap_dac_read_search,cap_perfmon=ep"
    assert parse_vfs_cap_data(struct.pack("<III", 0x02000000, 1 << 21, 0)).effective is False
    assert parse_vfs_cap_data(b"\x00" * 20) is None
    assert parse_vfs_cap_data(b"") is None


@pytest.mark.slow
@pytest.mark.ebpf
def test_setcap_bpftrace_as_unprivileged_user_names_what_stops_it(public_dir: Path) -> None:
    _need("setpriv", "setcap", SYSTEM_PYTHON)
    copy = _setcap_copy(public_dir, "cap_bpf,cap_perfmon+ep")
    assert file_caps(copy) == FileCaps(frozenset({"cap_bpf", "cap_perfmon"}), True)
    proc = _as_nobody(public_dir, readiness_code(copy))
    assert proc.returncode == 0, proc.stderr
    verdict, reason = proc.stdout.splitlines()[:2]
    # bpftrace's own answer decides: a version that runs for a capable non-root user is used
    # without sudo; one with the old uid check is named as the obstacle, with the fix.
    direct = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            copy,
            "-e",
            "BEGIN { exit(); }",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=str(public_dir),
    )
    assert verdict == "NO"
    assert f"{copy} has file capabilities cap_bpf,cap_perfmon=ep" in reason
    if session.ROOT_ONLY_TEXT in direct.stderr + direct.stdout:
        assert "refuses every non-root user" in reason
        assert "newer bpftrace" in reason
    tracefs_readable = (
        subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "test",
                "-r",
                "/sys/kernel/tracing/events",
                "-a",
                "-x",
                "/sys/kernel/tracing/events",
            ],
            check=False,
        ).returncode
        == 0
    )
    if not tracefs_readable:
        assert "/sys/kernel/tracing) is not readable by uid 65534" in reason
        assert "gid=" in reason


@pytest.mark.slow
@pytest.mark.ebpf
def test_setcap_without_perfmon_names_the_missing_capability(public_dir: Path) -> None:
    _need("setpriv", "setcap", SYSTEM_PYTHON)
    copy = _setcap_copy(public_dir, "cap_bpf+ep")
    proc = _as_nobody(public_dir, readiness_code(copy))
    assert proc.returncode == 0, proc.stderr
    verdict, reason = proc.stdout.splitlines()[:2]
    assert verdict == "NO"
    assert "lacks cap_perfmon" in reason
    assert f"setcap cap_bpf,cap_perfmon+ep {copy}" in reason


def test_setcap_route_uses_bpftrace_directly_when_it_works(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a stand-in bpftrace that accepts the test program, and a readable tracefs tree
    fake = tmp_path / "bpftrace"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    (tmp_path / "tree" / "events").mkdir(parents=True)
    monkeypatch.setattr(tracefs, "TRACEFS_CANDIDATES", (str(tmp_path / "tree"),))
    prefix, why = session.file_caps_launch(
        str(fake), FileCaps(frozenset({"cap_bpf", "cap_perfmon"}), True), "sudo not installed"
    )
    assert prefix == []
    assert why.startswith("file capabilities (cap_bpf,cap_perfmon=ep)")
    prefix, why = session.file_caps_launch(
        str(fake), FileCaps(frozenset({"cap_bpf", "cap_perfmon"}), False), "sudo not installed"
    )
    assert prefix is None
    assert "not effective" in why


# --- tracefs: not readable vs missing; debugfs fallback -----------------------------------------


def test_unreadable_tracepoint_is_not_readable_never_missing(public_dir: Path) -> None:
    _need("setpriv", SYSTEM_PYTHON)
    event = public_dir / "tree" / "events" / "amdgpu" / "amdgpu_cs_ioctl"
    event.mkdir(parents=True)
    (event / "format").write_text("name: amdgpu_cs_ioctl\nID: 1\nformat:\n")
    code = (
        "from aorta.ebpf.tracefs import Tracefs\n"
        f"t = Tracefs({str(public_dir / 'tree')!r})\n"
        "print(t.event_state('amdgpu', 'amdgpu_cs_ioctl'), t.event_state('amdgpu', 'amdgpu_bo_move'),"
        " t.event_state('amdkfd', 'kfd_evict_process'))\n"
    )
    _as_nobody(public_dir, "pass")  # makes the public copy (and makes everything 0755)
    (event / "format").chmod(0o600)  # as on a tracefs whose format files only root may read
    proc = _as_nobody(public_dir, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["not", "readable", "missing", "missing"]


@pytest.fixture
def fake_sys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    """/sys/kernel/{tracing,debug} stand-ins and a `mount` that records calls and 'mounts'."""
    calls: list[tuple[str, str]] = []
    tracing, debug = tmp_path / "tracing", tmp_path / "debug"
    monkeypatch.setattr(tracefs, "TRACEFS_CANDIDATES", (str(tracing), str(debug / "tracing")))
    monkeypatch.setattr(tracefs, "DEBUGFS", str(debug))
    monkeypatch.setattr(tracefs.os, "geteuid", lambda: 0)

    def fake_mount(fstype: str, target: str) -> str | None:
        calls.append((fstype, target))
        events = Path(target) / ("tracing" if fstype == "debugfs" else "") / "events"
        events.mkdir(parents=True)
        return None

    monkeypatch.setattr(tracefs, "_mount", fake_mount)
    return tmp_path, calls


def test_mounts_tracefs_at_sys_kernel_tracing_when_it_exists(fake_sys) -> None:
    root, calls = fake_sys
    (root / "tracing").mkdir()
    (root / "debug").mkdir()
    found, note = tracefs.find_tracefs(mount_if_root=True)
    assert calls == [("tracefs", str(root / "tracing"))]
    assert found is not None
    assert found.root == root / "tracing"
    assert "tracefs mounted now" in note


def test_mounts_debugfs_when_only_sys_kernel_debug_exists(fake_sys) -> None:
    root, calls = fake_sys
    (root / "debug").mkdir()
    found, note = tracefs.find_tracefs(mount_if_root=True)
    assert calls == [("debugfs", str(root / "debug"))]
    assert found is not None
    assert found.root == root / "debug" / "tracing"
    assert note == f"{root / 'debug' / 'tracing'} (debugfs mounted now)"


def test_uses_debugfs_tracing_when_sys_kernel_tracing_is_empty(fake_sys) -> None:
    root, calls = fake_sys
    (root / "tracing").mkdir()  # empty: not mounted
    (root / "debug" / "tracing" / "events").mkdir(parents=True)  # debugfs already holds tracefs
    found, _ = tracefs.find_tracefs(mount_if_root=True)
    assert calls == []
    assert found is not None
    assert found.root == root / "debug" / "tracing"


def test_failed_mounts_say_what_was_tried(fake_sys, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = fake_sys
    (root / "tracing").mkdir()
    (root / "debug").mkdir()
    monkeypatch.setattr(tracefs, "_mount", lambda fstype, target: "permission denied")
    found, note = tracefs.find_tracefs(mount_if_root=True)
    assert found is None
    assert f"mount -t tracefs nodev {root / 'tracing'}: permission denied" in note
    assert f"mount -t debugfs nodev {root / 'debug'}: permission denied" in note
    assert "--privileged" in note


def test_ebpf_info_never_mounts_and_says_who_does(fake_sys) -> None:
    """ebpf-info is a diagnostic: with tracefs not mounted it mounts nothing (not even for
    --show-script) and says that run/ebpf-attach mount it; --mount mounts it on request."""
    from conftest import run_cli_inprocess

    root, calls = fake_sys
    (root / "tracing").mkdir()
    (root / "debug").mkdir()
    report = run_cli_inprocess("ebpf-info")
    assert report.returncode == 0, report.stderr
    script = run_cli_inprocess("ebpf-info", "--show-script")
    assert script.returncode == 0, script.stderr
    assert calls == []
    said = (
        f"tracefs is not mounted ({root / 'tracing'} has no events/) and this command only reads: "
        "run --ebpf-trace and ebpf-attach mount it when they trace (ebpf-info --mount mounts it now)"
    )
    assert f"  tracefs:    {said}" in report.stdout
    assert said in script.stderr
    mounted = run_cli_inprocess("ebpf-info", "--mount")
    assert mounted.returncode == 0, mounted.stderr
    assert calls == [("tracefs", str(root / "tracing"))]
    assert "tracefs mounted now" in mounted.stdout


# --- PID namespace ------------------------------------------------------------------------------


def test_pid_namespace_is_detected_for_real() -> None:
    _need("unshare")
    code = (
        f"import sys; sys.path.insert(0, {str(SRC)!r})\n"
        "from aorta.ebpf.session import pid_namespace_problem\n"
        "print(pid_namespace_problem())\n"
    )
    inside = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if inside.returncode != 0:
        pytest.skip(f"unshare --pid failed here: {inside.stderr.strip()}")
    assert "own PID namespace" in inside.stdout
    assert "--pid=host" in inside.stdout
    if os.readlink("/proc/self/ns/pid") == session.INIT_PID_NS:
        assert session.pid_namespace_problem() is None


# --- non-root $HOME, thread limit -----------------------------------------------------------------


def _run_as_root_without_dac(code: str, home: Path) -> subprocess.CompletedProcess[str]:
    """uid 0 without CAP_DAC_OVERRIDE/READ_SEARCH, pretending to be uid 1000: file modes apply."""
    prog = "import os; os.geteuid = lambda: 1000\n" + code
    env = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    env["HOME"] = str(home)
    return subprocess.run(
        [
            "setpriv",
            "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search",
            sys.executable,
            "-c",
            prog,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
        cwd=str(home.parent),
    )


@pytest.mark.slow
def test_unreadable_home_does_not_break_a_plain_run(tmp_path: Path) -> None:
    _need("setpriv")
    home = tmp_path / "home"
    home.mkdir(mode=0o000)
    home.chmod(0o000)
    try:
        run = _run_as_root_without_dac(
            "from aorta.hw_queue_eval.cli import main\n"
            "main(['run', 'tiny_kernel_stress', '--streams', '2', '-i', '2', '-w', '1',"
            " '--size', 'small'])\n",
            home,
        )
        assert run.returncode == 0, run.stderr
        assert "Traceback" not in run.stderr
        assert "PermissionError" not in run.stderr
        state = _run_as_root_without_dac(
            "from aorta.common.errors import UsageError\n"
            "from aorta.hw_queue_eval.gpu.state import ensure_state_dir, list_state_files\n"
            "print(list_state_files(None))\n"
            "try:\n    ensure_state_dir(None)\nexcept UsageError as exc:\n    print('usage:', exc)\n",
            home,
        )
        assert state.returncode == 0, state.stderr
        lines = state.stdout.splitlines()
        assert lines[0] == "[]"
        assert lines[1].startswith(f"usage: cannot create state folder {home}/.local/state/aorta")
        assert "--state-dir" in lines[1]
    finally:
        home.chmod(0o700)


@pytest.mark.slow
@pytest.mark.resource_limits
def test_thread_limit_in_run_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = (
        "import threading\n"
        'def refuse(self):\n    raise RuntimeError("can\'t start new thread")\n'
        "threading.Thread.start = refuse\n"
        "from aorta.hw_queue_eval.cli import main\n"
        f"main(['run', 'hetero_kernels', '--streams', '2', '-i', '2', '-w', '1', '-o', {str(out)!r}])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert not out.exists()
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "ulimit -u" in errors[0]
    assert "--streams" in errors[0]


@pytest.mark.slow
def test_ebpf_info_as_unprivileged_user_says_not_accessible(public_dir: Path) -> None:
    _need("setpriv", SYSTEM_PYTHON)
    tracefs_readable = (
        subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                "test",
                "-x",
                "/sys/kernel/tracing/events",
            ],
            check=False,
        ).returncode
        == 0
    )
    if tracefs_readable:
        pytest.skip("tracefs is readable by everyone here")
    code = (
        "import json\nfrom aorta.ebpf.capabilities import full_report\n"
        "print(json.dumps(full_report()['summary']))\n"
    )
    proc = _as_nobody(public_dir, code)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    import json

    summary = json.loads(proc.stdout)
    assert summary["amdgpu_tracepoints"]["note"] == "not accessible"
    assert summary["amdkfd_tracepoints"]["note"] == "not accessible"
    assert set(summary["amdgpu_tracepoints"]["events"].values()) == {"not accessible"}
    assert summary["root_or_cap_bpf"]["ok"] is False
    assert summary["overall_available"] is False

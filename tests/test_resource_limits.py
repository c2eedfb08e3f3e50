"""The suite skips only on genuine resource exhaustion (fork/thread EAGAIN), never on logic failures."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from resource_limits import exhaustion_reason

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
EAGAIN = BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")


def test_fork_refused_in_subprocess_is_exhaustion() -> None:
    reason = exhaustion_reason(
        EAGAIN,
        [
            ("/repo/tests/test_x.py", "test_x", "subprocess.run(cmd)"),
            ("/usr/lib/python3.11/subprocess.py", "_execute_child", "self.pid = _fork_exec("),
        ],
    )
    assert reason is not None
    assert "creating a process or thread" in reason


def test_thread_refused_is_exhaustion() -> None:
    exc = RuntimeError("can't start new thread")
    assert (
        exhaustion_reason(
            exc, [("/usr/lib/python3.11/threading.py", "start", "_start_new_thread(self._bootstrap, ())")]
        )
        is not None
    )
    assert exhaustion_reason(EAGAIN, [("/repo/tests/test_x.py", "test_x", "pid = os.fork()")]) is not None


def test_eagain_from_a_lock_or_read_is_a_logic_failure() -> None:
    # outlock uses a non-blocking flock: EAGAIN there means "held", which tests must see fail
    assert (
        exhaustion_reason(EAGAIN, [("/repo/src/aorta/common/outlock.py", "acquire", "fcntl.flock(fd, op)")])
        is None
    )
    assert (
        exhaustion_reason(RuntimeError("other"), [("/usr/lib/python3.11/threading.py", "start", "")]) is None
    )


def test_child_reports_in_an_assertion_are_recognised_only_when_about_creation() -> None:
    thread = AssertionError("exit 1\nTraceback ...\nRuntimeError: can't start new thread\n")
    assert exhaustion_reason(thread, [("/repo/tests/test_x.py", "t", "assert rc == 0")]) is not None
    forked = AssertionError(
        '  File "subprocess.py", line 1, in _execute_child\n'
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
    )
    assert exhaustion_reason(forked, [("/repo/tests/test_x.py", "t", "assert rc == 0")]) is not None
    locked = AssertionError("BlockingIOError: [Errno 11] Resource temporarily unavailable\n")
    assert exhaustion_reason(locked, [("/repo/tests/test_x.py", "t", "assert rc == 0")]) is None
    assert exhaustion_reason(AssertionError("assert 1 == 2"), [("/repo/tests/test_x.py", "t", "")]) is None


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A throw-away suite using this conftest (its resource-exhaustion hook), CI unset."""
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.syspathinsert(str(CONFTEST.parent))
    pytester.makepyfile(
        test_inner="""
        import errno, fcntl, subprocess, threading
        import pytest

        def refuse_fork(*args, **kwargs):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

        def test_fork_refused(monkeypatch):
            monkeypatch.setattr(subprocess, "_fork_exec", refuse_fork)
            subprocess.run(["true"])

        def test_thread_refused(monkeypatch):
            def refuse(*args, **kwargs):
                raise RuntimeError("can't start new thread")
            monkeypatch.setattr(threading, "_start_new_thread", refuse)
            threading.Thread(target=print).start()

        def test_lock_held(tmp_path):
            with open(tmp_path / "l", "w") as a, open(tmp_path / "l") as b:
                fcntl.flock(a, fcntl.LOCK_EX)
                fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)

        def test_logic():
            assert 1 == 2

        @pytest.mark.resource_limits
        def test_marked_stays_failed():
            raise RuntimeError("can't start new thread")
    """
    )
    return pytester


@pytest.mark.slow
def test_hook_skips_exhaustion_and_keeps_logic_failures(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=2, failed=3)
    result.stdout.fnmatch_lines(["*resource exhaustion, not a test result*"])
    failed = {
        r.nodeid.split("::")[-1] for r in result.reprec.getreports("pytest_runtest_logreport") if r.failed
    }
    assert failed == {"test_lock_held", "test_logic", "test_marked_stays_failed"}


@pytest.mark.slow
def test_hook_keeps_failures_in_ci(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    suite.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(failed=5)


def test_each_test_has_its_own_tmpdir(private_tmpdir: Path) -> None:
    assert tempfile.gettempdir() == str(private_tmpdir)
    assert os.environ["TMPDIR"] == str(private_tmpdir)
    assert private_tmpdir != Path("/tmp")
    assert list(private_tmpdir.iterdir()) == []
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == str(private_tmpdir)

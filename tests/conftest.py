"""Shared test fixtures: run the CLI as a real subprocess against this checkout's sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Subprocesses import this checkout's package, even when another copy is installed.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m aorta.hw_queue_eval ARGS` in a subprocess; returns the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "aorta.hw_queue_eval", *args],
                          capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd, check=False)


def load_json(path: str | Path) -> Any:
    """Read a JSON file written by the tool."""
    return json.loads(Path(path).read_text())


@pytest.fixture
def cli():
    """The `run_cli` helper as a fixture."""
    return run_cli


@pytest.fixture
def ebpf_ready() -> None:
    """Real-eBPF tests: skip with the reason where impossible, fail when CI=true (ebpf_support)."""
    from ebpf_support import require_ebpf

    require_ebpf()


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own TMPDIR (inherited by its subprocesses), outside tmp_path: checks for
    leftover temp folders then see only this test's, never those of other runs on the machine."""
    folder = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure caused by the machine refusing a new process or thread (EAGAIN, several suites at
    once) becomes a skip with that reason; any other failure stays one. CI=true keeps it a failure."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed or item.get_closest_marker("resource_limits"):
        return
    from resource_limits import exhaustion_reason, frames_of

    reason = exhaustion_reason(call.excinfo.value, frames_of(call.excinfo))
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        report.sections.append(("resource exhaustion", f"{reason}: kept as a failure in CI"))
        return
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (item.location[1] or 0) + 1,
                       f"Skipped: resource exhaustion, not a test result: {reason}")

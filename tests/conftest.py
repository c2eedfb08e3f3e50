"""Shared test fixtures: run the CLI as a real subprocess against this checkout's sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


#: the CLI with replaced collaborators (a fake GPU, a crashing point, a failing rank)
CLI_WITH_FAKES = Path(__file__).resolve().parent / "cli_with_fakes.py"


def cli_command(*fakes: str) -> list[str]:
    """argv of the CLI: `python -m aorta.hw_queue_eval`, or with `fakes` (cli_with_fakes.py
    options such as "--fake-gpu", "nvidia:0") the test entry point that injects them."""
    if not fakes:
        return [sys.executable, "-m", "aorta.hw_queue_eval"]
    return [sys.executable, str(CLI_WITH_FAKES), *fakes, "--"]


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: str | Path | None = None,
            fakes: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python -m aorta.hw_queue_eval ARGS` in a subprocess; returns the completed process.

    `fakes`: run it through cli_with_fakes.py with those options instead."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*cli_command(*fakes), *args],
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

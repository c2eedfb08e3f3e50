"""Style is enforced, not hoped for: CI lints, checks formatting and type-checks with pinned tools."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def _pinned(tool: str) -> str:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (spec,) = [s for s in extras["test"] if re.match(rf"{tool}\b", s)]
    match = re.fullmatch(rf"{tool}==([0-9.]+)", spec)
    assert match, f"{tool} must be pinned exactly in the test extras (found {spec!r})"
    return match.group(1)


def _ci_lines() -> list[str]:
    return [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_ci_runs_ruff_check_and_format_check_before_the_tests() -> None:
    steps = ("-m ruff check", "-m ruff format", "-m mypy", "-m pytest")
    text = [line for line in _ci_lines() if any(step in line for step in steps)]
    assert any("-m ruff check ." in line for line in text), text
    assert any("-m ruff format --check ." in line for line in text), text
    assert "pytest" in text[-1], "the tests run after the style checks"
    assert all("|| exit" in line for line in text[:-1]), "a style failure fails CI"


def test_ci_type_checks_the_package_before_the_tests() -> None:
    lines = _ci_lines()
    (mypy,) = [i for i, line in enumerate(lines) if "-m mypy" in line]
    (tests,) = [i for i, line in enumerate(lines) if "-m pytest" in line]
    assert mypy < tests and "|| exit" in lines[mypy], lines
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["src/aorta"] and config["strict"] is True


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_tool_is_pinned_and_the_installed_one_is_the_pin(tool: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", tool, "--version"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"{tool} is not installed here (bash scripts/setup.sh --test installs it)")
    version = proc.stdout.split()[1] if tool == "mypy" else proc.stdout.split()[-1]
    assert version == _pinned(tool)


def test_format_settings_follow_the_lint_line_length() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert "line-length" not in config.get("format", {}), "one line length for lint and format"
    assert config["line-length"] == 110
    assert config["format"]["quote-style"] == "double"


def test_ruff_check_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    if "No module named ruff" in proc.stderr:
        pytest.skip("ruff is not installed here (bash scripts/setup.sh --test installs it)")
    assert proc.returncode == 0, proc.stdout[-3000:]

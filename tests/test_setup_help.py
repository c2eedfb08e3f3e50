"""`--help` of the set-up scripts prints their usage comment and nothing else, from any folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _usage_comment(script: Path) -> list[str]:
    """The script's leading comment block (after the shebang), without the '# ' prefix."""
    lines = []
    for line in script.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return lines


@pytest.mark.parametrize("script", ["docker/setup-env.sh", "scripts/setup.sh"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("cwd", [".", "docker"])
def test_help_prints_only_the_usage(script: str, flag: str, cwd: str) -> None:
    path = ROOT / script
    # a relative name, as a user types it: `$0` then only resolves from the folder it ran in
    proc = subprocess.run(
        ["bash", os.path.relpath(path, ROOT / cwd), flag],
        cwd=ROOT / cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == _usage_comment(path)
    assert "set -euo" not in proc.stdout

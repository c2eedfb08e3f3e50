"""Where bench/gpu_check.py's children import from on a lent machine: the carried tree, no install.

The lent machine's python3 has torch, click, rich, numpy and matplotlib but no jsonschema (and no
network): the check runs from the carried checkout (`PYTHONPATH=src`), and the wheels that
bench/gpu_wheels.py saved in `.gpu-wheels/` are installed `--no-index --no-deps` into a private
temporary folder this process creates. Every child gets exactly these folders on its path and no
PYTHON* variable of the caller (`procs.child_environment`): the `run` children through
PYTHONPATH, the `python -I` children through their argv (`-I` ignores PYTHONPATH).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aorta.common.procs import child_environment

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
WHEELS = REPO / ".gpu-wheels"


def install_wheels(folder: Path) -> tuple[list[str], dict[str, Any]]:
    """Install every wheel of `folder` into a new private folder (removed at exit); (path dirs, line)."""
    wheels = sorted(str(p) for p in folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return [], {"check": "wheels", "installed": [], "reason": f"no wheels in {folder}"}
    target = tempfile.mkdtemp(prefix="aorta-gpu-wheels-")  # 0700, root's own: nothing else writes it
    atexit.register(shutil.rmtree, target, ignore_errors=True)  # gone when the check ends
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            target,
            *wheels,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    line = {"check": "wheels", "target": target, "installed": [Path(w).name for w in wheels]}
    if proc.returncode != 0:
        return [], {**line, "installed": [], "error": proc.stderr.strip().splitlines()[-3:]}
    return [target], line


def child_paths(extra: list[str]) -> list[str]:
    """The folders every child imports aorta and the carried wheels from, in that order."""
    return [str(SRC), *extra]


def child_env(paths: list[str]) -> dict[str, str]:
    """The children's environment: the caller's without PYTHON*, PYTHONPATH = `paths` only."""
    return child_environment({"PYTHONPATH": os.pathsep.join(paths)})


def imported_from(module: str, env: dict[str, str]) -> str | None:
    """The file a child started like the `run` points imports `module` from (None: it cannot)."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}; print({module}.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=False,
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None

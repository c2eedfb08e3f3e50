"""What a command's start costs: no importlib.metadata on the path of list / --help (issue 20)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aorta

ROOT = Path(__file__).resolve().parents[1]

PROBE = (
    "import sys; from aorta.hw_queue_eval.cli import main\n"
    "try: main(sys.argv[1:])\n"
    "except SystemExit: pass\n"
    "print('LOADED', *sorted(m for m in ('importlib.metadata', 'torch', 'secrets') if m in sys.modules))"
)


def _loaded(*args: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60, check=True
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LOADED"))
    return set(line.split()[1:])


def test_list_and_help_import_no_package_metadata() -> None:
    # importlib.metadata cost ~300 ms under load on every start (aorta/__init__.py read the version)
    assert _loaded("list") == set()
    assert _loaded("--help") == set()
    assert _loaded("--version") == set()


def test_the_version_has_one_source() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the tomli the package depends on there
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/aorta/__init__.py"
    from importlib.metadata import version

    assert version("aorta") == aorta.__version__  # the installed metadata read it from there

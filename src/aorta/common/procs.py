"""Process facts and child-process launching shared by every package.

`python_module_command` is the one way aorta starts a Python child (sweep points, the pressure
churner): in isolated mode (`-I`: no cwd or script folder on sys.path, no PYTHON* variables, no
user site-packages) with the parent's own `aorta` package loaded by file location, so a module
planted in the working directory, in PYTHONPATH or in ~/.local cannot run as root in the child.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

#: Runs in the child (python -I -c): load this `aorta` package from its folder, then the module
#: as __main__, exactly as `python -m` would, but without adding any folder to sys.path.
_BOOTSTRAP = (
    "import importlib.util, runpy, sys\n"
    "root, module = sys.argv[1], sys.argv[2]\n"
    "spec = importlib.util.spec_from_file_location('aorta', root + '/__init__.py', "
    "submodule_search_locations=[root])\n"
    "pkg = importlib.util.module_from_spec(spec)\n"
    "sys.modules['aorta'] = pkg\n"
    "spec.loader.exec_module(pkg)\n"
    "del sys.argv[1:3]\n"
    "runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
)


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (also when it belongs to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def aorta_package_dir() -> str:
    """The folder of the `aorta` package this process runs (the child loads the same one)."""
    import aorta

    return str(Path(aorta.__file__).resolve().parent)


def python_module_command(module: str, *args: str) -> list[str]:
    """argv that runs `python -m MODULE ARGS` in isolated mode with this process's aorta package.

    `-I` (Python ≥ 3.4; it implies the safe-path `-P` on 3.11+) keeps the working directory, the
    PYTHON* variables and the user's site-packages out of the child's imports; the standard
    library and the interpreter's site-packages stay.
    """
    if not module.startswith("aorta."):
        raise ValueError(f"only aorta modules are started this way, not {module!r}")
    return [sys.executable, "-I", "-c", _BOOTSTRAP, aorta_package_dir(), module, *args]


def child_environment(overrides: Mapping[str, str] | None = None,
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Python child: the parent's without PYTHON* variables, plus overrides.

    `-I` already makes the child interpreter ignore PYTHON*; dropping them also keeps them from
    anything the child starts.
    """
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("PYTHON")}
    env.update(overrides or {})
    return env

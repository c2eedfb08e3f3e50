"""Private cache folders for aorta and every process it starts (torch compile, triton, GPU JITs).

Libraries keep compiled code in shared places by default: inductor in `$TMPDIR/torchinductor_USER`
(a folder another user can make first in a sticky /tmp), triton, torch extensions, the CUDA and
MIOpen/comgr JIT caches under `$HOME` (another user's when HOME is theirs). Whatever sits there is
code root loads. `private_cache_env` points every such variable at a folder of this user's own
cache (`~/.cache/aorta/` of the passwd entry, never `$HOME`), made 0700 and checked not to be
changeable by another user up to `/`; a variable the user set names a folder that must pass the
same check, or the command stops with one line (exit 2). Torch also keeps inductor files under
`tempfile.gettempdir()` whatever TORCHINDUCTOR_CACHE_DIR says (precompiled headers), so TMPDIR
too becomes the private `~/.cache/aorta/tmp` unless it already names a private folder.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import tempfile
from collections.abc import Mapping

from aorta.common import environment
from aorta.common.errors import UsageError
from aorta.common.safedir import check_private_chain, open_folder, private_folder

#: cache variable → its sub-folder of the private cache
CACHE_VARIABLES = {
    "TORCHINDUCTOR_CACHE_DIR": "torchinductor",  # default $TMPDIR/torchinductor_USER
    "TRITON_CACHE_DIR": "triton",  # default ~/.triton/cache
    "TRITON_HOME": "triton_home",  # ~/.triton: triton's dumps, overrides and toolchains
    "TORCH_EXTENSIONS_DIR": "torch_extensions",  # default ~/.cache/torch_extensions
    "PYTORCH_KERNEL_CACHE_PATH": "torch_kernels",  # default ~/.cache/torch/kernels
    "XDG_CACHE_HOME": "xdg",  # ~/.cache: torch hub, comgr and anything else using it
    "CUDA_CACHE_PATH": "cuda",  # default ~/.nv/ComputeCache
    "MIOPEN_USER_DB_PATH": "miopen_db",  # default ~/.config/miopen
    "MIOPEN_CUSTOM_CACHE_DIR": "miopen",  # default ~/.cache/miopen
    "AMD_COMGR_CACHE_DIR": "comgr",  # default ~/.cache/comgr
    "MPLCONFIGDIR": "matplotlib",  # default ~/.config/matplotlib (matplotlibrc) and its font cache
}
_RUN_PREFIX = "aorta-cache-"


def passwd_home() -> str | None:
    """This user's home folder from the passwd entry (not $HOME, which the caller controls)."""
    try:
        home = pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return None
    return home if home.startswith("/") else None


def _per_run_root() -> str:
    """A fresh 0700 folder for this run (no usable home), removed when the process ends."""
    root = tempfile.mkdtemp(prefix=f"{_RUN_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, root, True)
    return private_folder(root, "private cache folder")


def _cache_root() -> str:
    """`~/.cache/aorta` of the passwd home when it is private, else a folder for this run."""
    home = passwd_home()
    if home is not None:
        try:
            return private_folder(os.path.join(home, ".cache", "aorta"), "private cache folder")
        except UsageError:
            pass
    return _per_run_root()


def private_cache_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every cache variable → a folder only root or this user can change (made 0700 if missing).

    A variable already set (by the user, or by aorta for its parent) is checked, never replaced:
    UsageError naming it when another user could change its folder.
    """
    env = environment.snapshot() if environ is None else environ
    chosen: dict[str, str] = {}
    root: str | None = None
    for name, sub in CACHE_VARIABLES.items():
        given = env.get(name, "")
        if given:
            try:
                private_folder(given, f"{name} folder")
            except UsageError as exc:
                raise UsageError(f"{exc}, or unset {name}") from None
            chosen[name] = os.path.abspath(given)
            continue
        root = root or _cache_root()
        chosen[name] = private_folder(os.path.join(root, sub), "private cache folder")
    given = env.get("TMPDIR", "")
    if given and _is_private(given):
        chosen["TMPDIR"] = os.path.abspath(given)
    else:
        chosen["TMPDIR"] = private_folder(os.path.join(root or _cache_root(), "tmp"), "private cache folder")
    return chosen


def _is_private(path: str) -> bool:
    """True if `path` is a folder only root or this user can change, up to `/` (nothing made)."""
    try:
        fd = open_folder(path)
    except (UsageError, OSError):
        return False
    try:
        check_private_chain(fd, path, "TMPDIR")
    except UsageError:
        return False
    finally:
        os.close(fd)
    return True


def use_private_caches() -> None:
    """Set the cache variables and TMPDIR of this process (before torch loads), so of its children."""
    env = private_cache_env()
    environment.set_values(env)
    tempfile.tempdir = env["TMPDIR"]

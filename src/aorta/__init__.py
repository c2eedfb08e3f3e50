"""aorta: GPU hardware-queue evaluation with kernel-level (eBPF) visibility.

Nothing here imports beyond `os` and `sys` (both loaded before any package): this runs before
every other import of the tool, and its start-up cost is every command's (bench/cli_startup.py).
"""

import os
import sys

#: The one version string; pyproject.toml reads it from here (hatch `[tool.hatch.version]`), so the
#: package metadata and the tool cannot disagree, and no start pays for importlib.metadata.
__version__ = "0.1.0"


def _cwd_entry_index(path: list[str], argv0: str, cwd: str) -> int | None:
    """Where `python -m` put the current folder on `path` (index 0), else None.

    `-m` inserts the folder's absolute path first, and argv[0] reads "-m" while the package is
    being imported. A script's own folder, the entry point's bin/, `-c`'s '' and every other
    entry stay (a `-c` line or a script in that folder means to import from it)."""
    if path and argv0 == "-m" and path[0] == cwd:
        return 0
    return None


def _others_can_write(folder: str) -> bool:
    """Whether a user other than root may create files in `folder` (world-, or non-root group-writable)."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    return bool(info.st_mode & 0o002) or bool(info.st_mode & 0o020 and info.st_gid != 0)


def _drop_cwd_entry_as_root() -> None:
    """As root without -I/-P, take the current folder off sys.path before any third-party import.

    `sudo python -m aorta.hw_queue_eval …` (the guide's form) puts the current folder first on
    sys.path: from a folder another user can write, their click.py or json.py would run as uid 0.
    """
    if os.geteuid() != 0 or sys.flags.isolated or getattr(sys.flags, "safe_path", False):
        return
    try:
        cwd = os.getcwd()
    except OSError:  # the folder was removed: nothing can be imported from it
        return
    index = _cwd_entry_index(sys.path, sys.argv[0] if sys.argv else "", cwd)
    if index is None:
        return
    del sys.path[index]
    if _others_can_write(cwd):
        print(
            f"warning: running as root from {cwd}, a folder other users can write: it was taken off "
            "the import path, but an aorta/ package planted there is imported before this check can "
            "run; use the entry point instead (sudo .venv/bin/aorta-hwq …)",
            file=sys.stderr,
        )


_drop_cwd_entry_as_root()

"""Crash-safe output: write to a temp file in the same folder, fsync, rename; never follow symlinks.

Running as root is common for this tool, so an attacker-planted symlink at the output path must
never redirect a write. Paths are checked before long work starts (`check_output_path`).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from aorta.common.errors import UsageError


def check_output_path(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Fail fast (UsageError) if `path` cannot be written atomically; returns it as a Path.

    Checks: the parent folder exists and is writable, the path is not a symlink or a folder.
    Nothing is created.
    """
    p = Path(path)
    if str(path) == "":
        raise UsageError(f"empty {what} path: give a file name such as results.json")
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_symlink():
        raise UsageError(f"{what} {p} is a symbolic link; refusing to write through it: "
                         "choose another path")
    if p.exists() and p.is_dir():
        raise UsageError(f"{what} {p} is a folder: give a file name inside it")
    if not parent.is_dir():
        raise UsageError(f"cannot write {what} {p}: folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {what} {p}: folder {parent} is not writable; "
                         "choose a writable path")
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(f"cannot write {what} {p}: file is not writable; choose another path")
    _probe_writable(parent, f"{what} {p}")
    return p


def _probe_writable(folder: Path, target: str) -> None:
    """Create and remove a temp file in `folder`: the real test, since root passes os.access
    everywhere and read-only mounts or /proc do not show in permission bits."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".aorta-", suffix=".probe", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror} in {folder}; "
                         "choose a writable path") from None
    os.close(fd)
    os.unlink(probe)


def check_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Fail fast unless `path` is, or can be created as, a writable real folder; creates nothing."""
    out = Path(path)
    if out.is_symlink():
        raise UsageError(f"{what} {out} is a symbolic link; refusing to write through it")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{what} {out} is a file: give a folder path")
    parent = out.parent if str(out.parent) else Path(".")
    if not out.exists() and not parent.is_dir():
        raise UsageError(f"cannot create {what} {out}: {parent} does not exist; create it first")
    _probe_writable(out if out.exists() else parent, f"{what} {out}")
    return out


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` atomically (same-folder temp file, fsync, rename).

    Refuses to replace a symlink; the temp file is removed on every failure.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{p} is a symbolic link; refusing to write through it")
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)  # rename replaces a link itself, never its target
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically write UTF-8 text (see `atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write `obj` as indented JSON; NaN/Infinity are refused (they are not JSON)."""
    atomic_write_text(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def read_json_file(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Read a JSON file or raise a one-line UsageError saying why it could not be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what} {p} not found: check the path") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {p} is a folder, not a file") from None
    except PermissionError:
        raise UsageError(f"cannot read {what} {p}: permission denied") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what} {p} is not UTF-8 text: is it a result JSON?") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {p} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:
        raise UsageError(f"{what} {p} is not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{what} {p} is nested too deeply to be a result file") from None


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (aorta never writes them): refuse them on input."""
    raise ValueError(f"{name} is not a number JSON allows")

"""State files for GPU clock/power changes: the prior state, on disk before anything changes.

One file per controlled device (`gpu-<vendor>-<index>.json`), so a process killed with -9 leaves
what `restore` (or the next start) needs to put the device back. Written atomically, never
through a symlink, in a folder only its owner can write.

Folder: $AORTA_STATE_DIR if set (tests, unusual setups); else /var/lib/aorta as root; else
$XDG_STATE_HOME/aorta or ~/.local/state/aorta.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

from aorta.common.atomicio import atomic_write_json, read_json_file
from aorta.common.errors import UsageError

STATE_VERSION = 1


def state_dir() -> Path:
    """The folder holding state files (not created here)."""
    override = os.environ.get("AORTA_STATE_DIR")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/var/lib/aorta")
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "aorta"


def _check_dir(path: Path) -> None:
    """Refuse a folder that is a symlink, not a folder, or writable by others / not ours."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"state folder {path} is a symbolic link or not a folder; remove it "
                         "or set AORTA_STATE_DIR")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UsageError(f"state folder {path} is not owned by this user or is writable by "
                         "others; fix its owner/mode (0700) or set AORTA_STATE_DIR")


def ensure_state_dir() -> Path:
    """Create the state folder (mode 0700) if needed and check it is safe to write into."""
    path = state_dir()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create state folder {path}: {exc.strerror}; "
                         "set AORTA_STATE_DIR to a writable folder") from None
    _check_dir(path)
    return path


def state_path(vendor: str, index: int) -> Path:
    """The state file of one device."""
    return state_dir() / f"gpu-{vendor}-{index}.json"


def process_start_ticks(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), to tell a live owner from a reused pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[19])  # field 22 of stat, counted after "pid (comm)"
    except (IndexError, ValueError):
        return None


def owner_alive(record: dict[str, Any]) -> bool:
    """True if the process that wrote `record` is still running (same pid and start time)."""
    pid, ticks = record.get("pid"), record.get("pid_start_ticks")
    if not isinstance(pid, int) or pid <= 0:
        return False
    return ticks is not None and process_start_ticks(pid) == ticks


def write_state(record: dict[str, Any]) -> Path:
    """Write one device's record atomically; returns its path."""
    ensure_state_dir()
    path = state_path(record["vendor"], record["index"])
    atomic_write_json(path, {"state_version": STATE_VERSION, **record})
    return path


def read_state(path: Path) -> dict[str, Any]:
    """Read a state file (UsageError if it is a symlink or unreadable)."""
    if path.is_symlink():
        raise UsageError(f"state file {path} is a symbolic link; refusing to read it")
    data = read_json_file(path, "state file")
    if not isinstance(data, dict) or "vendor" not in data or "index" not in data \
            or "prior" not in data:
        raise UsageError(f"state file {path} is not an aorta GPU state file")
    return data


def remove_state(path: Path) -> None:
    """Delete a state file once the device is back as found."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def list_state_files() -> list[Path]:
    """Every GPU state file in the state folder (empty if the folder does not exist)."""
    folder = state_dir()
    if not os.path.lexists(folder):
        return []
    _check_dir(folder)  # a file or a link where the folder should be is an error, not "nothing"
    return sorted(p for p in folder.glob("gpu-*-*.json") if not p.is_symlink())

"""State files for GPU clock/power changes: the prior state, on disk before anything changes.

One file per controlled device (`gpu-<vendor>-<index>.json`), so a process killed with -9 leaves
what `restore` (or the next start) needs to put the device back. Written atomically, never
through a symlink, in a folder only its owner can write.

Folder: the --state-dir option of the command (run, sweep, policy-sweep, restore) if given; else
/var/lib/aorta as root; else $XDG_STATE_HOME/aorta or ~/.local/state/aorta. Every function here
takes that option's value (`given`, None when it was not given), so nothing in the environment
chooses the folder whose files root reads back.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from pathlib import Path
from typing import Any, TypeGuard

from aorta.common import environment
from aorta.common.atomicio import atomic_write_json, read_json_file
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.common.safedir import check_root_may_use

STATE_VERSION = 1
OPTION = "--state-dir"


def state_dir(given: str | Path | None) -> Path:
    """The folder holding state files (not created here): `given` (--state-dir) or the default."""
    if given is not None:
        return Path(given)
    if os.geteuid() == 0:
        return Path("/var/lib/aorta")
    xdg = environment.get("XDG_STATE_HOME")
    home = os.path.expanduser("~")
    if not xdg and not os.path.isabs(home):  # no HOME and no passwd entry: never a relative path
        raise UsageError(
            f"no home folder to keep GPU state files in: set HOME or XDG_STATE_HOME, or give {OPTION} DIR"
        )
    base = Path(xdg) if xdg else Path(home) / ".local" / "state"
    return base / "aorta"


def _check_dir(path: Path, what: str = "state folder", fix: str = f"give {OPTION} DIR") -> None:
    """Refuse a folder that is a symlink, not a folder, or writable by others / not ours."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{what} {path} is a symbolic link or not a folder; remove it or {fix}")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UsageError(
            f"{what} {path} is not owned by this user or is writable by "
            f"others; fix its owner/mode (0700) or {fix}"
        )


def check_state_dir(value: str) -> str:
    """--state-dir DIR checked when the command line is read: DIR as an absolute path (children
    run in their own folder), else UsageError (one line). An existing DIR must pass _check_dir;
    as root, DIR (or the folder it will be made in) and every folder above it must be beyond
    other users (check_root_may_use), as root reads back and acts on the files kept there."""
    if not value.strip():
        raise UsageError(f"{OPTION}: give a folder path")
    path = os.path.abspath(value)
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    check_root_may_use(existing, OPTION, "give a folder only root can change")
    if existing == path:
        try:
            _check_dir(Path(path), OPTION, "give another folder")
        except OSError as exc:
            raise UsageError(f"{OPTION} {path} cannot be read: {exc.strerror}") from None
    return path


def ensure_state_dir(given: str | Path | None) -> Path:
    """Create the state folder (mode 0700) if needed and check it is safe to write into."""
    path = state_dir(given)  # UsageError when there is no home folder
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_dir(path)
    except OSError as exc:
        raise UsageError(
            f"cannot create state folder {path}: {exc.strerror}; give {OPTION} DIR, a folder you can write"
        ) from None
    return path


def state_path(vendor: str, index: int, given: str | Path | None) -> Path:
    """The state file of one device."""
    return state_dir(given) / f"gpu-{vendor}-{index}.json"


def process_start_ticks(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), to tell a live owner from a reused pid."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of stat, counted after "pid (comm)"
    except (IndexError, ValueError):
        return None


def owner_alive(record: JsonObject) -> bool:
    """True if the process that wrote `record` is still running (same pid and start time)."""
    pid, ticks = record.get("pid"), record.get("pid_start_ticks")
    if not isinstance(pid, int) or pid <= 0:
        return False
    return ticks is not None and process_start_ticks(pid) == ticks


def write_state(record: JsonObject, given: str | Path | None) -> Path:
    """Write one device's record atomically; returns its path."""
    ensure_state_dir(given)
    path = state_path(record["vendor"], record["index"], given)
    atomic_write_json(path, {"state_version": STATE_VERSION, **record})
    return path


def read_state(path: Path) -> JsonObject:
    """Read and validate a state file (UsageError naming the bad field; the file stays)."""
    if path.is_symlink():
        raise UsageError(f"state file {path} is a symbolic link; refusing to read it")
    data = read_json_file(path, "state file")
    problem = record_problem(data, path.name)
    if problem:
        raise UsageError(
            f"state file {path} is not a valid aorta GPU state file ({problem}); "
            "it was left in place: check it, then restore the GPU by hand or "
            "remove it"
        )
    checked: JsonObject = data  # record_problem accepted it: a JSON object
    return checked


#: Performance levels a state file may name (what rocm-smi and amdsmi report); anything else —
#: an option such as `--help` — is refused before a tool sees it.
PERF_LEVELS = frozenset(
    {
        "auto",
        "low",
        "high",
        "manual",
        "stable_std",
        "stable_peak",
        "stable_min_mclk",
        "stable_min_sclk",
        "determinism",
    }
)
TOOLS = {"nvidia": ("nvidia-smi", "pynvml"), "amd": ("rocm-smi", "amdsmi")}
MAX_INDEX = 63
_MIN_W, _MAX_W = 1.0, 5000.0  # as policies.MIN_POWER_W / MAX_POWER_W


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_watts(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and _MIN_W <= value <= _MAX_W
    )


def _clock_problem(vendor: str, clock: Any) -> str | None:
    if not isinstance(clock, dict):
        return "prior.clock is not an object"
    if vendor == "nvidia":
        supported = clock.get("supported_mhz", [])
        if not isinstance(supported, list) or not all(_is_int(v) for v in supported):
            return "prior.clock.supported_mhz is not a list of whole MHz"
        return None
    if clock.get("perf_level") not in PERF_LEVELS:
        return (
            f"prior.clock.perf_level {clock.get('perf_level')!r} is not one of "
            f"{', '.join(sorted(PERF_LEVELS))}"
        )
    levels = clock.get("levels_mhz")
    if (
        not isinstance(levels, list)
        or not levels
        or len(levels) > 64
        or not all(_is_int(v) and 0 < v < 100_000 for v in levels)
    ):
        return "prior.clock.levels_mhz is not a list of 1..64 clock levels in MHz"
    step = clock.get("sclk_level")
    if step is not None and not (_is_int(step) and 0 <= step < len(levels)):
        return f"prior.clock.sclk_level {step!r} is not an index into levels_mhz"
    return None


def record_problem(data: Any, file_name: str) -> str | None:
    """What is wrong with a state record (None if every field is valid): types, the vendor and
    tool from fixed sets, the index matching the file name, perf levels, watts in range."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("state_version") != STATE_VERSION:
        return f"state_version {data.get('state_version')!r}, expected {STATE_VERSION}"
    vendor, index = data.get("vendor"), data.get("index")
    if vendor not in TOOLS:
        return f"vendor {vendor!r} is not nvidia or amd"
    if not _is_int(index) or not 0 <= index <= MAX_INDEX:
        return f"index {index!r} is not a GPU index 0..{MAX_INDEX}"
    if file_name != f"gpu-{vendor}-{index}.json":
        return f"vendor/index {vendor} {index} do not match the file name {file_name}"
    if data.get("tool") not in TOOLS[vendor]:
        return f"tool {data.get('tool')!r} is not one of {', '.join(TOOLS[vendor])}"
    for key in ("pid", "pid_start_ticks"):
        if data.get(key) is not None and not (_is_int(data[key]) and data[key] >= 0):
            return f"{key} {data[key]!r} is not a whole number"
    prior = data.get("prior")
    if not isinstance(prior, dict):
        return "prior is not an object"
    for key in ("power_limit_w", "power_default_w", "power_min_w", "power_max_w"):
        if prior.get(key) is not None and not _is_watts(prior[key]):
            return f"prior.{key} {prior[key]!r} is not watts within {_MIN_W:g}..{_MAX_W:g}"
    clock_problem = _clock_problem(vendor, prior.get("clock"))
    if clock_problem:
        return clock_problem
    applied = data.get("applied", {})
    if not isinstance(applied, dict) or not set(applied) <= {"clock_level", "power_limit_w"}:
        return "applied is not an object with clock_level / power_limit_w"
    for key, value in applied.items():
        if not isinstance(value, dict) or not isinstance(value.get("pending", False), bool):
            return f"applied.{key} is not an object with a true/false pending"
    return None


def remove_state(path: Path) -> None:
    """Delete a state file once the device is back as found."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def list_state_files(given: str | Path | None) -> list[Path]:
    """Every GPU state file in the state folder (empty if the folder does not exist).

    Also empty when this user cannot look at the folder or it is another user's (an unreadable
    $HOME, e.g. under setpriv or sudo -u): this user can never have written state there. A file
    or a link where the folder should be is an error, not "nothing to restore".
    """
    try:
        folder = state_dir(given)
        if not os.path.lexists(folder):
            return []
        st = os.lstat(folder)
    except (PermissionError, UsageError):
        return []
    if stat.S_ISDIR(st.st_mode) and st.st_uid != os.geteuid():
        return []
    _check_dir(folder)
    return sorted(p for p in folder.glob("gpu-*-*.json") if not p.is_symlink())

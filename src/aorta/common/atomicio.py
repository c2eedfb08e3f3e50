"""Crash-safe output, the one mechanism every writer uses: open the parent folder without
following links another user could plant (safedir), write a temp file there through the folder's
descriptor, fsync, rename; never follow a symlink at the output path itself.

Running as root is common for this tool, so an attacker-planted symlink at the output path or in
one of its folders must never redirect a write. Paths are checked before long work starts
(`check_output_path`); a failed write (disk full) is a one-line `WriteError`.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.safedir import open_folder, trusted_uids


class WriteError(UsageError):
    """A write that failed (disk full, I/O error, read-only file system): one line, exit 2."""


def _split(path: str | os.PathLike[str], what: str) -> tuple[str, str]:
    """(parent folder, file name) of `path`; UsageError for an empty path or a folder name."""
    text = os.fspath(path)
    if text == "":
        raise UsageError(f"empty {what} path: give a file name such as results.json")
    parent, name = os.path.split(text)
    if name in ("", ".", ".."):
        raise UsageError(f"{what} {text} is a folder: give a file name inside it")
    return parent or ".", name


def _lstat_in(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def parent_folder(path: str | os.PathLike[str], what: str = "output file") -> Iterator[tuple[int, str]]:
    """(descriptor of the parent folder, file name) of `path`, opened without following untrusted
    links (safedir); the descriptor is closed on exit. Every writer goes through here."""
    parent, name = _split(path, what)
    fd = open_folder(parent, f"cannot write {what} {os.fspath(path)}")
    try:
        yield fd, name
    finally:
        os.close(fd)


def check_output_path(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """Fail fast (UsageError) if `path` cannot be written atomically; returns it as a Path.

    Checks: the parent folder exists (reached without untrusted links) and is writable, the path
    is not a symlink or a folder. Nothing is left behind.
    """
    p = Path(path)
    with parent_folder(path, what) as (dir_fd, name):
        st = _lstat_in(dir_fd, name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise UsageError(
                f"{what} {p} is a symbolic link; refusing to write through it: choose another path"
            )
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} {p} is a folder: give a file name inside it")
        if st is not None:
            _refuse_special(st, f"{what} {p}")
        if st is not None and not os.access(name, os.W_OK, dir_fd=dir_fd):
            raise UsageError(f"cannot write {what} {p}: file is not writable; choose another path")
        _probe_writable(dir_fd, f"{what} {p}")
    return p


_SPECIAL = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse_special(st: os.stat_result, target: str) -> None:
    """UsageError if an existing target is a device, FIFO or socket: renaming over it would
    replace `/dev/null` for the whole system (as root), and writing into it is no result file."""
    for test, kind in _SPECIAL:
        if test(st.st_mode):
            raise UsageError(
                f"{target} is {kind}, not a regular file; refusing to replace it: choose another path"
            )


#: File systems of the kernel's own objects: no place for a result, and no probe file is made there.
KERNEL_FILESYSTEMS = frozenset(
    [
        "devtmpfs",
        "devpts",
        "proc",
        "sysfs",
        "tracefs",
        "debugfs",
        "securityfs",
        "cgroup",
        "cgroup2",
        "bpf",
        "configfs",
        "pstore",
        "efivarfs",
        "mqueue",
        "hugetlbfs",
        "fusectl",
        "binfmt_misc",
        "autofs",
    ]
)


def filesystem_type(dir_fd: int) -> str | None:
    """The file system type of the open folder, from /proc/self/mountinfo (None if unknown)."""
    dev = os.fstat(dir_fd).st_dev
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 3 and fields[2] == wanted and " - " in line:
                    return line.split(" - ", 1)[1].split()[0]
    except OSError:
        return None
    return None


def _probe_writable(dir_fd: int, target: str) -> None:
    """Create and remove a temp file in the folder: the real test, since root passes os.access
    everywhere and read-only mounts or /proc do not show in permission bits. Never in a folder
    of a kernel file system (/dev, /proc, /sys): a file there is no result, so it is refused."""
    fstype = filesystem_type(dir_fd)
    if fstype in KERNEL_FILESYSTEMS:
        raise UsageError(
            f"cannot write {target}: its folder is on the kernel's {fstype} file system, "
            "not a place for files; choose a writable path"
        )
    try:
        fd, name = _create_temp(dir_fd, "probe")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror}; choose a writable path") from None
    os.close(fd)  # an open probe kept its (deleted) file and the mount busy until exit
    os.unlink(name, dir_fd=dir_fd)


def _create_temp(dir_fd: int, stem: str) -> tuple[int, str]:
    """A new private file `.aorta-STEM.RANDOM.tmp` in the folder (never through a link)."""
    for _ in range(100):
        import secrets  # here, not at start-up: it loads hashlib/hmac (every command imports this)

        name = f".{stem[:64]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=dir_fd,
            )
        except FileExistsError:
            continue
        return fd, name
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def _folder_text(path: str | os.PathLike[str]) -> str:
    """A folder path without trailing slashes ("out/" names the folder "out")."""
    text = os.fspath(path)
    return text.rstrip("/") or text


def check_output_dir(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """Fail fast unless `path` is, or can be created as, a writable real folder; creates nothing."""
    out = Path(path)
    with parent_folder(_folder_text(path), what) as (parent_fd, name):
        st = _lstat_in(parent_fd, name)
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise UsageError(f"{what} {out} is a symbolic link; refusing to write through it")
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{what} {out} is a file: give a folder path")
        if st is None:
            _probe_writable(parent_fd, f"{what} {out}")
            return out
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
        except OSError as exc:
            raise UsageError(f"cannot use {what} {out}: {exc.strerror}") from None
        try:
            _probe_writable(fd, f"{what} {out}")
        finally:
            os.close(fd)
    return out


def write_bytes_in(
    dir_fd: int, name: str, data: bytes | Iterable[bytes], mode: int = 0o644, shown: str | None = None
) -> None:
    """Replace `name` in the open folder with `data` atomically (temp file, fsync, rename).

    `data` is the bytes, or pieces of them written as they come (a large file is then never
    whole in memory). Refuses to replace a symlink; the temp file is removed on every failure
    (also when making a piece raises); an OS error (disk full …) becomes a one-line WriteError.
    """
    shown = shown or name
    st = _lstat_in(dir_fd, name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{shown} is a symbolic link; refusing to write through it")
    if st is not None:
        _refuse_special(st, shown)
    tmp = None
    try:
        fd, tmp = _create_temp(dir_fd, name)
        with os.fdopen(fd, "wb") as fh:
            for piece in (data,) if isinstance(data, bytes) else data:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
            os.fchmod(fh.fileno(), mode)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # replaces a link itself
        tmp = None
    except OSError as exc:
        raise WriteError(
            f"cannot write {shown}: {exc.strerror or exc}; free space or choose another path"
        ) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes | Iterable[bytes], mode: int = 0o644
) -> None:
    """Replace `path` with `data` (bytes or their pieces) atomically through its safely opened
    parent folder."""
    with parent_folder(path) as (dir_fd, name):
        write_bytes_in(dir_fd, name, data, mode, shown=os.fspath(path))


class OutputFolder:
    """A report folder made atomically and written through its descriptor (no race with a link
    planted after the check); a folder this object made is removed again if writing fails."""

    def __init__(self, path: str | os.PathLike[str], what: str = "output folder") -> None:
        self.path = Path(path)
        self.what = what
        self.written: list[str] = []
        self.created = False
        self._parent = self._fd = -1
        parent, self.name = _split(_folder_text(path), what)
        self._parent = open_folder(parent, f"cannot create {what} {self.path}")
        try:
            try:
                os.mkdir(self.name, 0o755, dir_fd=self._parent)
                self.created = True
            except FileExistsError:
                pass
            self._fd = os.open(self.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._parent)
        except OSError as exc:
            self.close(discard=True)
            why = (
                "it is a symbolic link or a file"
                if exc.errno in (errno.ELOOP, errno.ENOTDIR)
                else exc.strerror
            )
            raise UsageError(f"cannot use {what} {self.path}: {why}") from None

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write one file of the folder atomically; returns its path (for messages)."""
        write_bytes_in(self._fd, name, data, shown=str(self.path / name))
        self.written.append(name)
        return self.path / name

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    def close(self, discard: bool = False) -> None:
        """Close; with `discard`, remove what was written and the folder if this object made it."""
        if discard and self._fd >= 0:
            for name in self.written:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._fd)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if discard and self.created:
            with contextlib.suppress(OSError):
                os.rmdir(self.name, dir_fd=self._parent)
        if self._parent >= 0:
            os.close(self._parent)
            self._parent = -1

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(discard=exc_type is not None)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Atomically write UTF-8 text (see `atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def json_text(obj: Any) -> str:
    """`obj` as the indented JSON aorta writes; NaN/Infinity are refused (they are not JSON)."""
    import json

    return json.dumps(obj, indent=2, allow_nan=False) + "\n"


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write `obj` as indented JSON (`json_text`)."""
    atomic_write_text(path, json_text(obj))


#: No result aorta writes comes near this; it bounds what a reader holds in memory.
MAX_JSON_BYTES = 1 << 30


def read_json_file(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Read a JSON file or raise a one-line UsageError saying why it could not be read."""
    text = read_small_text(path, what, MAX_JSON_BYTES, "is it a result JSON?")
    return parse_json_text(text, what, Path(path))


def read_small_text(path: str | os.PathLike[str], what: str, limit: int, hint: str = "") -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; one-line UsageError otherwise
    (`/dev/zero` would be read without end and a FIFO would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{what} {path} not found: check the path") from None
    except PermissionError:
        raise UsageError(f"cannot read {what} {path}: permission denied") from None
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UsageError(f"{what} {path} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise UsageError(f"{what} {path} is not a regular file: give a text file")
        try:
            raw = fh.read(limit + 1)
        except OSError as exc:
            raise UsageError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if len(raw) > limit:
        raise UsageError(f"{what} {path} is larger than {limit // 1024} KiB: is it the right file?")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text{': ' + hint if hint else ''}") from None


def parse_json_text(text: str, what: str, path: str | os.PathLike[str]) -> Any:
    """json.loads with NaN/Infinity (written, or by overflow: 1e999) and runaway nesting refused
    as one-line UsageErrors (integers beyond 64 bits: results/validation.py)."""
    import json

    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
        if _SURROGATE_ESCAPE.search(text):  # a pair is one character; a lone half is no text
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        return data
    except UnicodeEncodeError:
        raise UsageError(
            f"{what} {path} holds a lone UTF-16 surrogate (\\ud800-\\udfff escape): it is no text; "
            "regenerate the file"
        ) from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except ValueError as exc:
        raise UsageError(f"{what} {path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{what} {path} is nested too deeply to be a result file") from None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one that overflows to infinity (1e999) is refused like Infinity."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is too large for a float")
    return value


def _refuse_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (aorta never writes them): refuse them on input."""
    raise ValueError(f"{name} is not a number JSON allows")


def keep_unsaved(name: str, data: bytes) -> str | None:
    """Keep output that could not be written in a new private temp folder; its path, or None.

    Used when the real destination failed (disk full): the measurement is not lost.
    """
    import tempfile

    try:
        folder = tempfile.mkdtemp(prefix="aorta-unsaved-")  # mode 0700, a fresh name
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        write_bytes_in(dir_fd, name, data, mode=0o600)
    except UsageError:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        return None
    finally:
        os.close(dir_fd)
    return os.path.join(folder, name)


def check_distinct_outputs(paths: dict[str, str | None]) -> None:
    """UsageError if two output options name the same file (one would replace the other)."""
    seen: dict[tuple[str, str], str] = {}
    for option, path in paths.items():
        if not path:
            continue
        parent, name = os.path.split(os.path.abspath(path))
        key = (os.path.realpath(parent), name)
        if key in seen:
            raise UsageError(
                f"{seen[key]} and {option} name the same file {path}: the second "
                "write would replace the first; give two different paths"
            )
        seen[key] = option


def existing_kind(path: str | os.PathLike[str]) -> tuple[bool, str | None]:
    """(file exists, its aorta `kind` or None when it is not an aorta JSON file)."""
    p = Path(path)
    if not p.exists() or p.is_dir():
        return False, None
    if p.stat().st_size == 0:
        return True, "empty"
    try:
        data = read_json_file(p)
    except (UsageError, RecursionError):
        return True, None
    if not isinstance(data, dict):
        return True, None
    kind = data.get("kind")
    if kind is None and "stream_count" in data:
        kind = "run"
    if kind is None and isinstance(data.get("traceEvents"), list):
        kind = "trace"
    return True, kind if isinstance(kind, str) else None


def check_replaceable(
    path: str | os.PathLike[str],
    kinds: tuple[str, ...],
    force: bool,
    what: str = "output file",
    fix: str = "choose another path or add --force",
) -> None:
    """Refuse (UsageError) to replace a file that is not of one of `kinds` unless `force`.

    A sweep checkpoint with finished points must not vanish under `run -o` or `compare -o`.
    """
    exists, kind = existing_kind(path)
    if force or not exists or kind in (*kinds, "empty"):
        return
    held = f"a {kind} file" if kind else "a file that is not an aorta result"
    raise UsageError(
        f"{what} {path} already holds {held}; refusing to replace it with a {kinds[0]} file: {fix}"
    )


def read_owned_json(path: str | os.PathLike[str], what: str) -> Any:
    """Read a JSON file that this run will trust (e.g. resume): as root, the file must belong to
    root or to the invoking user (SUDO_UID) and not be writable by others; read through one
    descriptor opened without following links, so the checked file is the read one."""
    with parent_folder(path, what) as (dir_fd, name):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UsageError(f"{what} {path} is a symbolic link; refusing to read it") from None
            raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block, /dev/zero never end
            raise UsageError(f"{what} {path} is not a regular file")
        if os.geteuid() == 0:
            _check_owner(st, path, what)
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {path} is not UTF-8 text") from None
    return parse_json_text(text, what, path)


def _check_owner(st: os.stat_result, path: str | os.PathLike[str], what: str) -> None:
    trusted = trusted_uids()
    if st.st_uid not in trusted:
        raise UsageError(
            f"{what} {path} belongs to user {st.st_uid}, not to root or you: "
            "refusing to trust it as root; check it and copy it, or choose another -o"
        )
    if st.st_mode & 0o002:
        raise UsageError(
            f"{what} {path} is writable by every user: refusing to trust it as "
            "root; chmod o-w it after checking its content"
        )

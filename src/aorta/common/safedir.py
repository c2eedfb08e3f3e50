"""Open a folder one path component at a time, never through a link another user could plant.

Root writes results wherever it is told; a symbolic link planted by an unprivileged user in a
folder of the path (`ln -s /root-only-dir /tmp/x/results`) must not redirect that write. Every
component is opened with O_NOFOLLOW relative to the previous folder's descriptor, so what is
checked is what is used (no race between check and write). A symbolic link is followed only when
nobody but root or this user could have made or replaced it: the link belongs to root or to this
user and the folder holding it does too and is not writable by others (or is sticky, as /tmp).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque

from aorta.common import environment
from aorta.common.errors import UsageError

MAX_LINKS = 40  # as the kernel's ELOOP limit
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def trusted_uids() -> set[int]:
    """Owners this process trusts: root, its effective user and, under sudo, the invoking user
    (`SUDO_UID`: that user could run anything as root anyway, so their own links are theirs)."""
    uids = {0, os.geteuid()}
    sudo_uid = environment.get("SUDO_UID") or ""
    if os.geteuid() == 0 and sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return uids


def folder_is_private(st: os.stat_result) -> bool:
    """True if only root or this user can add, remove or rename entries of the folder `st`."""
    if st.st_uid not in trusted_uids():
        return False
    return not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)


def _components(path: str) -> deque[str]:
    return deque(part for part in path.split("/") if part not in ("", "."))


def _follow_link(holder_fd: int, name: str, shown: str, what: str) -> str:
    """The target of link `name` in folder `holder_fd` if it is trusted; UsageError otherwise."""
    holder = os.fstat(holder_fd)
    link = os.stat(name, dir_fd=holder_fd, follow_symlinks=False)
    if link.st_uid not in trusted_uids() or not folder_is_private(holder):
        planter = link.st_uid if link.st_uid not in trusted_uids() else holder.st_uid
        raise UsageError(
            f"{what}: {shown} is a symbolic link that user {planter} could have "
            "planted (it or its folder is not only root's or yours); refusing to "
            "follow it: give the real path"
        )
    return os.readlink(name, dir_fd=holder_fd)


def open_folder(path: str | os.PathLike[str], what: str = "folder") -> int:
    """An O_DIRECTORY descriptor of `path` (the caller closes it); UsageError naming the problem.

    Relative paths start at the working directory. Untrusted links are refused (module doc).
    """
    text = os.fspath(path)
    fd = os.open("/" if text.startswith("/") else ".", _DIR_FLAGS)
    parts = _components(text)
    shown = "/" if text.startswith("/") else "."
    links = 0
    try:
        while parts:
            name = parts.popleft()
            here = os.path.join(shown, name)
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise _open_error(exc, here, what) from None
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError as inner:
                    raise _open_error(inner, here, what) from None
                if not stat.S_ISLNK(st.st_mode):
                    raise UsageError(
                        f"{what} {text}: {here} does not exist as a folder (it is a file); give a folder path"
                    ) from None
                links += 1
                if links > MAX_LINKS:
                    raise UsageError(f"{what} {text}: too many symbolic links") from None
                target = _follow_link(fd, name, here, what)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                    shown = "/"
                parts.extendleft(reversed(_components(target)))
                continue
            os.close(fd)
            fd, shown = nfd, here
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_error(exc: OSError, here: str, what: str) -> UsageError:
    if exc.errno == errno.ENOENT:
        return UsageError(f"{what}: folder {here} does not exist; create it first")
    if exc.errno == errno.EACCES:
        return UsageError(f"{what}: folder {here} cannot be opened: permission denied")
    return UsageError(f"{what}: folder {here} cannot be opened: {exc.strerror}")


def _shown_fd(fd: int, fallback: str) -> str:
    """The path of an open folder for a message (Linux /proc), else `fallback`."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return fallback


def _check_folders_up(fd: int, shown: str, what: str, fix: str = "use a folder only you can write") -> None:
    """UsageError unless the open folder `fd` and every folder above it up to `/` are private
    (`folder_is_private`): nobody else can rename one away and put their own in its place."""
    current = os.dup(fd)
    try:
        while True:
            st = os.fstat(current)
            if not folder_is_private(st):
                raise UsageError(
                    f"{what} {shown}: the folder {_shown_fd(current, '..')} on its path can be changed "
                    f"by another user (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); {fix}"
                )
            parent = os.open("..", _DIR_FLAGS, dir_fd=current)
            up = os.fstat(parent)
            os.close(current)
            current = parent
            if (up.st_ino, up.st_dev) == (st.st_ino, st.st_dev):  # "/" is its own parent
                return
    finally:
        os.close(current)


def check_private_chain(fd: int, shown: str, what: str) -> None:
    """UsageError unless the open folder `fd` and every folder above it are beyond other users.

    The folder itself must belong to root or this user and be writable by nobody else (no sticky
    exception: what a library keeps in it is code root runs); the folders above must be private.
    """
    st = os.fstat(fd)
    if st.st_uid not in trusted_uids() or st.st_mode & 0o022:
        raise UsageError(
            f"{what} {shown} can be changed by another user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}); use a folder only you can write"
        )
    _check_folders_up(fd, shown, what)


def private_folder(path: str, what: str) -> str:
    """Make `path` (missing folders 0700) and check it is private (`check_private_chain`).

    Nothing is made unless the folder it goes in is private up to `/`; a missing folder is made
    through the descriptor of that folder, never through a link, and one another user made first
    (a race or a plant) fails the check. Returns `path`.
    """
    existing, missing = os.path.abspath(path), []
    while not os.path.lexists(existing) and existing != "/":
        existing, name = os.path.split(existing)
        missing.append(name)
    fd = open_folder(existing, what)
    try:
        if missing:
            _check_folders_up(fd, path, what)
        for name in reversed(missing):
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise UsageError(f"{what} {path}: cannot create {name}: {exc.strerror}") from None
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise UsageError(f"{what} {path}: {name} is not a folder ({exc.strerror})") from None
            os.close(fd)
            fd = nfd
        check_private_chain(fd, path, what)
    finally:
        os.close(fd)
    return path


def check_root_may_use(path: str, what: str, fix: str) -> None:
    """As root, UsageError unless `path` (a program root would run, a folder whose files root
    would read) and every folder above it are beyond other users: owned by root or the invoking
    user, not writable by group or others. Nothing is checked for a non-root user, nor for a path
    that does not exist (the caller reports it missing)."""
    if os.geteuid() != 0:
        return
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return  # nothing there to trust: the caller says it is missing
    except OSError as exc:
        raise UsageError(f"{what} {path} cannot be read: {exc.strerror}; {fix}") from None
    if st.st_uid not in trusted_uids() or st.st_mode & 0o022:
        raise UsageError(
            f"{what} {path} can be changed by another user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}): as root aorta trusts only what root owns; {fix}"
        )
    fd = os.open(real if stat.S_ISDIR(st.st_mode) else os.path.dirname(real), _DIR_FLAGS)
    try:
        _check_folders_up(fd, path, what, fix)
    finally:
        os.close(fd)

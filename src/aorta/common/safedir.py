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

from aorta.common.errors import UsageError

MAX_LINKS = 40  # as the kernel's ELOOP limit
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def trusted_uids() -> set[int]:
    """Owners this process trusts: root, its effective user and, under sudo, the invoking user
    (`SUDO_UID`: that user could run anything as root anyway, so their own links are theirs)."""
    uids = {0, os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
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

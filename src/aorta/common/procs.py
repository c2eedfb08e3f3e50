"""Process facts and child-process launching shared by every package.

`python_module_command` is the one way aorta starts a Python child (sweep points, the pressure
churner): in isolated mode (`-I`: no cwd or script folder on sys.path, no PYTHON* variables, no
user site-packages) with the parent's own `aorta` package loaded by file location, so a module
planted in the working directory, in PYTHONPATH or in ~/.local cannot run as root in the child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from aorta.common import environment
from aorta.common.caches import passwd_home, private_cache_env

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

PID_MAX = 1 << 22  # Linux's largest pid_max: a bigger "pid" in a foreign name is not a pid
_PR_SET_PDEATHSIG = 1


def parse_pid(text: str) -> int | None:
    """A pid from untrusted text (a folder name, an env value), None unless 1..PID_MAX digits."""
    if not text.isascii() or not text.isdigit() or len(text) > 7:
        return None
    value = int(text)
    return value if 0 < value <= PID_MAX else None


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (also when it belongs to another user)."""
    if not 0 < pid <= PID_MAX:
        return False
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


def python_module_command(module: str, *args: str, package_dir: str | None = None) -> list[str]:
    """argv that runs `python -m MODULE ARGS` in isolated mode with this process's aorta package.

    `-I` (Python ≥ 3.4; it implies the safe-path `-P` on 3.11+) keeps the working directory, the
    PYTHON* variables and the user's site-packages out of the child's imports; the standard
    library and the interpreter's site-packages stay. `package_dir` (bench/cpu_run_cv.py
    --against: another code state the caller extracted into its own private folder) replaces
    this process's package; nothing else passes one.
    """
    if not module.startswith("aorta."):
        raise ValueError(f"only aorta modules are started this way, not {module!r}")
    return [sys.executable, "-I", "-c", _BOOTSTRAP, package_dir or aorta_package_dir(), module, *args]


def child_environment(
    overrides: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child: the parent's without PYTHON* variables, with private caches
    and HOME pinned, plus overrides.

    `-I` already makes the child interpreter ignore PYTHON*; dropping them also keeps them from
    anything the child starts. Every cache variable names a private folder (caches.py: another
    user's compiled code never loads) and HOME is this user's passwd home, not a caller's HOME
    (another user's ~/.local, ~/.triton … never reach the child); without a passwd home it is
    dropped.
    """
    source = environment.snapshot() if base is None else base
    env = {k: v for k, v in source.items() if not k.startswith("PYTHON")}
    env.update(private_cache_env(source))
    home = passwd_home()
    if home is None:
        env.pop("HOME", None)
    else:
        env["HOME"] = home
    env.update(overrides or {})
    return env


#: set by a sweep in a torchrun point's environment: the sweep's pid, which the ranks outlive
#: only by the moment it takes them to notice (`die_with_launcher`)
OWNER_PID_ENV = "AORTA_OWNER_PID"


def set_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send `sig` to this process when the thread that started it exits
    (PR_SET_PDEATHSIG; best effort: without prctl nothing changes)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A subprocess `preexec_fn`: the child gets `sig` when this process dies, even during exec.

    PR_SET_PDEATHSIG is set in the child before exec; if the parent already died between fork and
    that call (the signal would never come), the child exits at once instead. SIGKILL cannot be
    caught or lost, unlike SIGTERM which bpftrace drops while it attaches probes.
    """
    parent = os.getpid()

    def preexec() -> None:
        set_death_signal(sig)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def die_with_launcher(environ: Mapping[str, str]) -> None:
    """A torchrun rank: SIGKILL with its agent, and at once if the sweep that started it is gone.

    torchrun starts ranks in their own sessions with no death signal, so a kill -9 of a sweep
    (whose agent dies with it, `die_with_parent`) used to leave them running. The rank sets its
    own at start; if the agent died before that (the signal would never come), the agent's
    parent named by OWNER_PID_ENV is gone too, and the rank ends itself the same way.
    """
    set_death_signal(signal.SIGKILL)
    owner = parse_pid(environ.get(OWNER_PID_ENV, ""))
    if owner is not None and not pid_alive(owner):
        os.kill(os.getpid(), signal.SIGKILL)


def process_state(pid: int) -> str | None:
    """The state letter of a process from /proc (R, S, D, Z …), None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return text[text.rindex(")") + 2 :].split()[0]
    except (OSError, ValueError, IndexError):
        return None


def process_running(pid: int) -> bool:
    """True while the process exists and has not exited (a zombie has exited)."""
    return process_state(pid) not in (None, "Z", "X")


def thread_group_of(pid: int) -> int | None:
    """The process (thread group) a thread id belongs to, from /proc/ID/status Tgid."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def ppid_of(pid: int) -> int | None:
    """The parent pid of `pid` from /proc (None when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def is_ancestor(ancestor: int, pid: int, depth: int = 4) -> bool:
    """True if `ancestor` is among the first `depth` parents of `pid`."""
    current: int | None = pid
    for _ in range(depth):
        current = ppid_of(current) if current else None
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
    return False


def stale_owned_dirs(root: str, prefix: str) -> list[str]:
    """Folders `root/<prefix><pid>-…` of this user whose owning pid is dead (left by a kill -9).

    Names in a shared folder are foreign input: anything not a real folder owned by the current
    user, or whose pid part is not a plausible pid, is ignored (never parsed further, never removed).
    """
    found: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return found
    for name in names:
        if not name.startswith(prefix):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        pid = parse_pid(name[len(prefix) :].split("-", 1)[0])
        if pid is not None and not pid_alive(pid):
            found.append(path)
    return found

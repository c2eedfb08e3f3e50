"""Run one measurement point in a fresh child process (`run ... -o tmp.json`).

A crash, an OOM kill or a hang costs that point only; env overrides reach the child before any
GPU runtime initialises (env policies only work that way). The child runs in its own process
group so a timeout or Ctrl+C ends it and everything it started; its temp folder is always removed,
and folders left by a parent that was killed hard (kill -9) are removed by the next point.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from aorta.common.atomicio import read_json_file
from aorta.common.errors import UsageError
from aorta.common.interrupts import INTERRUPTS
from aorta.common.jsontypes import JsonObject
from aorta.common.procs import (
    OWNER_PID_ENV,
    child_environment,
    die_with_parent,
    python_module_command,
    stale_owned_dirs,
)

TERM_GRACE_S = 5.0
TEMP_PREFIX = "aorta-point-"


@dataclass
class PointOutcome:
    """What happened to one child run."""

    status: str  # ok | failed | timeout
    result: JsonObject | None
    error: str | None
    duration_s: float
    returncode: int | None

    def to_dict(self) -> JsonObject:
        return {
            "status": self.status,
            "error": self.error,
            "duration_s": self.duration_s,
            "returncode": self.returncode,
        }


def _with_mask(mask: AbstractSet[int], then: Callable[[], None]) -> Callable[[], None]:
    """A `preexec_fn`: set the child's signal mask back to `mask` (the parent's before it held
    INTERRUPTS), then run `then`."""

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        then()

    return preexec


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the child's process group, then SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, TERM_GRACE_S)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:") or "Error" in line:
            return line
    return lines[-1] if lines else "no output"


def remove_stale_point_dirs(temp_root: str | None = None) -> list[str]:
    """Remove point folders whose parent process is gone (left by a kill -9); returns them.

    Only real folders owned by this user whose name carries a dead pid are touched; rmtree
    refuses symlinks, so nothing outside the folder can be reached.
    """
    removed = stale_owned_dirs(temp_root or tempfile.gettempdir(), TEMP_PREFIX)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def point_command(
    run_args: Sequence[str], out_path: str, nproc_per_node: int | None = None, package_dir: str | None = None
) -> list[str]:
    """The child's argv: `run` directly, or through torchrun (--standalone: one node, a free
    rendezvous port) with `nproc_per_node` ranks, whose rank 0 writes `out_path`.

    Under torchrun the ranks are started `--no-python` with the same isolated command as a
    direct child (`python -I`, this aorta package by file location): torchrun's own `-m` start
    would run them without -I, so the cwd, PYTHON* and the user site of HOME (usercustomize)
    would reach them."""
    command = python_module_command(
        "aorta.hw_queue_eval", "run", *run_args, "-o", out_path, package_dir=package_dir
    )
    return command if nproc_per_node is None else under_torchrun(command, nproc_per_node)


def check_torchrun_host(hostname: str | None = None) -> None:
    """Refuse (UsageError) a machine whose hostname does not resolve: torchrun --standalone
    binds its rendezvous to it and then retries for ever ("The IPv6 network addresses of (vm,
    …) cannot be retrieved"), so every point would hang until its timeout."""
    name = hostname or socket.gethostname()
    try:
        socket.getaddrinfo(name, None)
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(
            f"--nproc-per-node: this machine's hostname {name!r} does not resolve ({exc}); torchrun's "
            f"rendezvous needs it: add '127.0.1.1 {name}' to /etc/hosts"
        ) from None


def under_torchrun(command: Sequence[str], nproc_per_node: int) -> list[str]:
    """`command` (an isolated `python -I …` argv) as every rank of a one-node torchrun job."""
    torchrun = [sys.executable, "-I", "-m", "torch.distributed.run", "--standalone"]
    return [*torchrun, "--nproc-per-node", str(nproc_per_node), "--no-python", *command]


#: builds a point's child argv from (run args, result path, ranks per node or None)
PointCommand = Callable[[Sequence[str], str, int | None], list[str]]


def run_point(
    run_args: Sequence[str],
    env_overrides: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    nproc_per_node: int | None = None,
    build_command: PointCommand = point_command,
) -> PointOutcome:
    """Run `python -m aorta.hw_queue_eval run RUN_ARGS -o <tmp>` and return its outcome.

    The child is isolated from the working directory and PYTHON* (`procs.python_module_command`).
    With `nproc_per_node` the point runs under torchrun (docs/distributed.md); torchrun stops
    its ranks when it gets SIGTERM, which is how a timeout or Ctrl+C ends the point. The child
    runs in the point's private folder (mkdtemp, 0700) with `procs.child_environment` (private
    caches, HOME pinned).

    `build_command` makes the child's argv (default `point_command`; a caller of the CLI may
    pass another through commands/collaborators.py). Raises KeyboardInterrupt after stopping the
    child if the parent is interrupted.
    """
    env = child_environment(env_overrides)
    remove_stale_point_dirs()
    tmpdir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
    out_path = os.path.join(tmpdir, "point.json")
    if nproc_per_node is not None:
        # torchrun's log folders (torchelastic_*) and the ranks' temp files go into the point's
        # folder, removed with it (or by the next point after a kill -9); the ranks die with this
        # process even if their agent died before they could notice (procs.die_with_launcher)
        env["TMPDIR"] = tmpdir
        env[OWNER_PID_ENV] = str(os.getpid())
    cmd = build_command(run_args, out_path, nproc_per_node)
    started = time.monotonic()
    # Ctrl+C/SIGTERM are held while the child starts: one landing after the fork but before Popen
    # returns would leave a child this function never stops. The child gets the mask back first.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            preexec_fn=_with_mask(held, die_with_parent()),
            cwd=tmpdir,
        )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held Ctrl+C lands here, `proc` known
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return PointOutcome(
                "timeout",
                None,
                f"no result after {timeout_s:g} s; stopped",
                time.monotonic() - started,
                proc.returncode,
            )
        duration = time.monotonic() - started
        if proc.returncode == 2:
            return PointOutcome("failed", None, _last_error_line(stderr), duration, 2)
        result = None
        if os.path.exists(out_path):
            try:
                result = read_json_file(out_path, "point result")
            except UsageError as exc:
                return PointOutcome("failed", None, str(exc), duration, proc.returncode)
        if proc.returncode == 0 and result is not None:
            return PointOutcome("ok", result, None, duration, 0)
        reason = _last_error_line(stderr)
        if result is not None and result.get("status") == "failed" and result.get("error"):
            # the run measured and its outcome failed (verification): the result says why; its
            # stderr holds only progress lines (the report went to the discarded stdout)
            reason = f"run failed: {result['error']}"
            verification = result.get("verification")
            if isinstance(verification, dict) and verification.get("max_rel_error") is not None:
                reason += f" (max relative error {verification['max_rel_error']:.3g})"
        if proc.returncode is not None and proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            reason = f"killed by signal {-proc.returncode} ({name}; last output: {reason})"
        return PointOutcome("failed", result, reason, duration, proc.returncode)
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        if proc.poll() is None:
            _stop_group(proc)
        shutil.rmtree(tmpdir, ignore_errors=True)

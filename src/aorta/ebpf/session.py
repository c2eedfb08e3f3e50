"""Run one bpftrace program: spawn, readiness handshake, window gate, JSON stream, lost events, stop.

* Spawn: `bpftrace -f json FILE` as root, or `sudo -n bpftrace …` otherwise (fails fast when sudo
  would prompt). As root bpftrace gets SIGKILL when its parent dies (PR_SET_PDEATHSIG, set before
  exec and checked against a parent that died first), and reads its program from a memfd, so a
  hard-killed parent leaves neither a root bpftrace nor a temp file behind. Under sudo the program
  itself exits when its owner exits (see `program.py`), and a temp folder named after the owner
  pid holds the file. Every start first kills bpftrace processes whose owner is gone and removes
  their temp folders.
* Ready: PING marker syscalls until both handshake probes answer (see `program.py`); no sleeps.
* Parse: a reader thread decodes every JSON record while bpftrace runs (maps, histograms, stats,
  printf, `lost_events`); the text form "Lost N events" is counted too; the RLIMIT_MEMLOCK notice
  on stderr is harmless and dropped.
* Stop: the EXIT marker (the gate calls exit(); END runs, maps print), re-sent every 0.25 s;
  before the handshake SIGINT instead, sent when bpftrace's poll loop waits (`interrupt.py`);
  then SIGTERM, then SIGKILL after timeouts. No signal is sent to a ready program: bpftrace
  resets SIGINT to the default action while it prints its maps. The readers drain stdout and
  stderr until EOF whatever a line holds, so END never blocks on a full pipe. The temp file
  holding the program (sudo only) is removed as soon as bpftrace has loaded it, and again on
  every exit path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aorta.common import environment
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.common.procs import die_with_parent, is_ancestor, parse_pid, pid_alive, stale_owned_dirs
from aorta.common.safedir import check_root_may_use
from aorta.ebpf import marker, procstat, uprobes
from aorta.ebpf.filecaps import FileCaps, file_caps
from aorta.ebpf.interrupt import Interrupter
from aorta.ebpf.mapcap import MAP_KEYS_MAX
from aorta.ebpf.probes.base import EdgeSnapshots
from aorta.ebpf.program import CLOSED_TEXT, HANDSHAKE_IDS, READY_TEXT, Program

HARMLESS_STDERR = (re.compile(r"RLIMIT_MEMLOCK"), re.compile(r"^\s*$"))
_LOST_TEXT = re.compile(r"Lost (\d+) events")
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
TEMP_PREFIX = "aorta-bpf-"
STOP_RESEND_S = 0.25  # stop(): the EXIT marker again at this interval until bpftrace exits
INTERRUPT_POLL_S = 0.02  # stop() without the marker: how often it looks whether SIGINT is due
EXIT_MARKER = "EXIT marker"  # SessionOutput.stop_signal when the gate's exit() ended bpftrace
OWNER_ENV = "AORTA_TRACE_OWNER"  # set in bpftrace's environment: the pid that must outlive it

#: bpftrace detaches every uprobe after printing its maps on SIGINT: on a loaded 2-core machine
#: 74 probes took 12 s and 198 (five runtime processes) over 15 s, so the wait grows per probe
STOP_S_PER_PROBE = 0.4


def stop_timeout_s(probes: int | None) -> float:
    """How long to wait for bpftrace to exit after SIGINT: 15 s, more with many probes."""
    return max(15.0, STOP_S_PER_PROBE * (probes or 0))


class SessionError(Exception):
    """bpftrace could not be started or did not become ready (message says why and how to fix)."""


def check_bpftrace(path: str, option: str = "--bpftrace") -> str:
    """`path`, made absolute (sweep points run in their own folder), when it names a bpftrace this
    process may run: an executable regular file and, as root, one beyond other users (root would
    run it). UsageError (one line) otherwise."""
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise UsageError(f"{option} {path}: not an executable regular file; give the path of bpftrace")
    check_root_may_use(path, option, "give a bpftrace only root can change")
    return os.path.abspath(path)


def bpftrace_path(override: str | None = None) -> str | None:
    """The bpftrace to run: `override` (the --bpftrace option, checked by check_bpftrace), else
    the one on PATH; None when there is none."""
    if override is not None:
        return check_bpftrace(override)
    return shutil.which("bpftrace")


_VERSIONS: dict[tuple[str, int, int, int, int], tuple[int, int, int]] = {}


def bpftrace_version(path: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) from `bpftrace --version`, None if it cannot be run.

    Cached per executable (path, device, inode, size, mtime): `bpftrace --version` costs 50-80 ms
    on a loaded machine and every run, sweep point and attach asked again. A replaced or rebuilt
    binary changes the key and is asked anew; a failure is never cached."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _VERSIONS:
        found = _probe_version(path)
        if found is None:
            return None
        _VERSIONS[key] = found
    return _VERSIONS[key]


def _probe_version(path: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION_RE.search(out)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def sudo_works() -> tuple[bool, str]:
    """Whether `sudo -n` runs commands without a password prompt (checked, never prompts)."""
    sudo = shutil.which("sudo")
    if sudo is None:
        return False, "sudo not installed"
    try:
        proc = subprocess.run(
            [sudo, "-n", "true"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"sudo -n failed: {exc}"
    if proc.returncode != 0:
        return False, f"sudo -n needs a password ({proc.stderr.strip() or 'exit ' + str(proc.returncode)})"
    return True, "sudo -n works"


#: bpftrace runs as root: it is started with this PATH and the locale only, never with the
#: caller's library or path variables (LD_PRELOAD, LD_LIBRARY_PATH, PATH, BPFTRACE_* ...)
SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
KEPT_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE", "TZ")
#: `env` (which sets bpftrace's variables, also through `sudo -n`) by absolute path, not PATH's
ENV_BINARY = shutil.which("env", path=SAFE_PATH) or "/usr/bin/env"


def bpftrace_environment(settings: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment bpftrace starts with: SAFE_PATH, the locale, and aorta's own `settings`."""
    source = environment.snapshot() if environ is None else environ
    kept = {name: source[name] for name in KEPT_VARIABLES if name in source}
    return {**kept, "PATH": SAFE_PATH, **settings}


def launcher(bpftrace: str | None = None) -> tuple[list[str] | None, str]:
    """Command prefix to run bpftrace with the needed privileges, or None with the reason.

    Root runs it directly; otherwise `sudo -n`; otherwise a bpftrace carrying file capabilities
    (setcap) runs without sudo when it can, else the reason names what stops it.
    """
    if os.geteuid() == 0:
        return [], "root"
    ok, why = sudo_works()
    if ok:
        return [shutil.which("sudo") or "sudo", "-n"], "sudo -n"
    if bpftrace:
        caps = file_caps(bpftrace)
        if caps is not None and caps.permitted:
            return file_caps_launch(bpftrace, caps, why)
    return None, f"not root and {why}: run with sudo (eBPF needs root or CAP_BPF+CAP_PERFMON)"


# The initial PID namespace's inode number (PROC_PID_INIT_INO in the kernel): a fixed value.
INIT_PID_NS = "pid:[4026531836]"


def pid_namespace_problem() -> str | None:
    """Why per-process probes would see nothing here (a PID namespace), or None.

    bpftrace's pid/tid are the kernel's (initial namespace) ids; inside a container with its own
    PID namespace this process knows other numbers, so every per-process filter would match nothing.
    """
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    if ns == INIT_PID_NS:
        return None
    return (
        "this process runs in its own PID namespace (a container without --pid=host): the "
        "kernel's process ids differ from the ones seen here, so per-process probes would match "
        "nothing; run the container with --pid=host (compose: pid: host)"
    )


ROOT_ONLY_TEXT = "only supports running as the root user"


def file_caps_launch(bpftrace: str, caps: FileCaps, sudo_why: str) -> tuple[list[str] | None, str]:
    """Use a setcap'd bpftrace without sudo if it works here; else name what stops it and the fix."""
    from aorta.ebpf.tracefs import TRACEFS_CANDIDATES, find_tracefs

    problems = []
    fix = f"sudo setcap cap_bpf,cap_perfmon+ep {bpftrace}"
    if not (caps.has("cap_bpf", "cap_perfmon") or caps.has("cap_sys_admin")):
        lacking = ",".join(c for c in ("cap_bpf", "cap_perfmon") if not caps.has(c))
        problems.append(f"it lacks {lacking} (fix: {fix})")
    if not caps.effective:
        problems.append(f"its capabilities are not effective, '+p' without 'e' (fix: {fix})")
    if not problems:  # a test program shows what bpftrace itself says (no tracefs needed)
        try:
            proc = subprocess.run(
                [bpftrace, "-e", "BEGIN { exit(); }"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            out, rc = (proc.stdout + proc.stderr).strip(), proc.returncode
        except (OSError, subprocess.TimeoutExpired) as exc:
            out, rc = str(exc), -1
        if ROOT_ONLY_TEXT in out:
            problems.append(
                "this bpftrace refuses every non-root user whatever its capabilities (bpftrace "
                "replaced that uid check with capability checks only in late 2025, pull request "
                "#4773): run as root or with sudo, or install a newer bpftrace"
            )
        elif rc != 0:
            last = out.splitlines()[-1] if out else f"exit {rc}"
            problems.append(f"a test program failed: {last}")
    tracefs, _ = find_tracefs(mount_if_root=False)
    if tracefs is None:
        problems.append(
            f"tracefs ({TRACEFS_CANDIDATES[0]}) is not readable by uid {os.geteuid()}, and aorta "
            "reads tracepoint formats there too (fix: give a group access, e.g. sudo mount -o "
            f"remount,gid=$(id -g),mode=0750 {TRACEFS_CANDIDATES[0]}; cap_dac_read_search on "
            "bpftrace alone is not enough)"
        )
    if not problems:
        return [], f"file capabilities ({caps.describe()}) on {bpftrace}"
    return None, (
        f"not root and {sudo_why}; {bpftrace} has file capabilities {caps.describe()} "
        f"but {'; and '.join(problems)}"
    )


@dataclass
class SessionOutput:
    """Everything bpftrace reported: printed maps by name, lost events, diagnostics."""

    maps: JsonObject = field(default_factory=dict)
    lost_events: int = 0
    lost_records: int = 0
    attached_probes: int | None = None
    printf: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    exit_code: int | None = None
    stop_signal: str | None = None  # how stop() ended it: EXIT_MARKER, SIGINT, SIGTERM or SIGKILL
    sigints_sent: int = 0
    attach_s: float | None = None
    stop_s: float | None = None
    probe_cost: JsonObject | None = None
    snapshots: dict[str, EdgeSnapshots] = field(default_factory=dict)  # family name → its edges
    marker_clock: procstat.MarkerClock | None = None  # the marker thread's CPU time at the markers
    # (helper, retcode, line, col) → count of bpftrace `helper_error` records (failed updates)
    helper_errors: dict[tuple[str, int, int, int], int] = field(default_factory=dict)
    map_keys_max: int = MAP_KEYS_MAX


class TraceSession:
    """One bpftrace process carrying one assembled Program."""

    def __init__(
        self,
        program: Program,
        bpftrace: str,
        prefix: list[str],
        env: dict[str, str] | None = None,
        map_keys_max: int = MAP_KEYS_MAX,
        flags: tuple[str, ...] = ("-k",),
    ) -> None:
        if isinstance(map_keys_max, bool) or not isinstance(map_keys_max, int) or map_keys_max < 1:
            raise SessionError(f"map_keys_max {map_keys_max!r}: must be a positive integer")
        if any(f not in ("-k",) for f in flags):
            raise SessionError(f"unsupported bpftrace flags {flags!r}")
        self.program = program
        self.bpftrace = bpftrace
        self.prefix = list(prefix)
        self.env = env or {}
        self.map_keys_max = map_keys_max
        self.flags = list(flags)
        self.output = SessionOutput(map_keys_max=map_keys_max)
        self._proc: subprocess.Popen[str] | None = None
        self._tmpdir: str | None = None
        self._readers: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._lines_read = 0  # stdout + stderr lines so far (stop(): has bpftrace answered SIGINT?)
        self._ready: set[int] = set()
        self._ready_event = threading.Event()
        self._closed_event = threading.Event()
        self._window_open = False
        # set by every printf line that is not the engine's own (late_runtimes: a new executable
        # mapping of a traced process); whoever waits on it clears it
        self.printf_seen = threading.Event()

    # -- start -------------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> None:
        """Spawn bpftrace and block until every probe is attached (handshake) or raise."""
        t0 = time.monotonic()
        self._spawn()
        try:
            self._handshake(t0 + timeout_s)
        except BaseException:
            self.abort()
            raise
        self._cleanup_files()
        self.output.attach_s = time.monotonic() - t0

    def _spawn(self) -> None:
        """Start bpftrace and its output readers (no handshake: start() waits for that)."""
        remove_stale_sessions()
        sudo = bool(self.prefix)
        program_fd, script = self._program_file(sudo)
        env = bpftrace_environment(self.env)
        # `env` carries the settings through `sudo -n`, which resets the environment
        cmd = [
            *self.prefix,
            ENV_BINARY,
            f"BPFTRACE_MAP_KEYS_MAX={self.map_keys_max}",
            f"{OWNER_ENV}={os.getpid()}",
            self.bpftrace,
            *self.flags,
            "-f",
            "json",
            str(script),
        ]
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                env=env,
                start_new_session=True,
                pass_fds=() if program_fd is None else (program_fd,),
                preexec_fn=None if sudo else die_with_parent(),
            )
        except OSError as exc:
            self._cleanup_files()
            raise SessionError(f"cannot start bpftrace: {exc}") from None
        finally:
            if program_fd is not None:
                os.close(program_fd)
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _program_file(self, sudo: bool) -> tuple[int | None, str]:
        """Where bpftrace reads the program: a memfd as root (nothing on disk to leave behind),
        a private temp folder named after this pid under sudo (which closes inherited fds)."""
        if not sudo:
            fd = os.memfd_create("aorta-program", 0)
            os.write(fd, self.program.text.encode())
            os.lseek(fd, 0, os.SEEK_SET)
            return fd, f"/dev/fd/{fd}"
        self._tmpdir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
        script = Path(self._tmpdir) / "program.bt"
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self.program.text)
        return None, str(script)

    def _handshake(self, deadline: float) -> None:
        assert self._proc is not None
        while not self._ready_event.is_set():
            if self._proc.poll() is not None:
                self._join_readers(5)
                raise SessionError(
                    "bpftrace exited before its probes were live: "
                    + (self._error_text() or f"exit {self._proc.returncode}")
                )
            if time.monotonic() > deadline:
                raise SessionError(
                    "bpftrace did not become ready in time (probes not attached); "
                    + (self._error_text() or "no error printed")
                )
            marker.send(marker.PING, self.program.token)
            if self.program.uprobe_ping:  # uprobes have their own handshake (see uprobes.py)
                uprobes.ping(self.program.token)
            self._ready_event.wait(0.005)

    # -- window ------------------------------------------------------------------------------
    def window_start(self) -> None:
        """Open the gate: from now on families count events (snapshots taken just before)."""
        self._snapshot("start")
        self.output.marker_clock = procstat.start_marker_clock()
        marker.send(marker.WINDOW_START, self.program.token)
        self._window_open = True

    def window_stop(self, drain_timeout_s: float = 2.0) -> None:
        """Close the gate (snapshots taken just after), then wait until bpftrace has delivered
        the gate's closing line: records emitted in the window (failed map updates, printf) come
        through the event buffers asynchronously and would be cut off by an early SIGINT."""
        if self._window_open:
            clock = self.output.marker_clock
            if clock is not None and clock.tid == threading.get_native_id():
                clock.stop = procstat.own_counters()
            marker.send(marker.WINDOW_STOP, self.program.token)
            self._window_open = False
            self._snapshot("stop")
            self._closed_event.wait(drain_timeout_s)

    def closed_elsewhere(self, drain_timeout_s: float = 2.0) -> None:
        """The markers were sent by the ranks themselves (a node's shared gate): never send a stop
        from here; wait until bpftrace has delivered the gate's closing line (see window_stop)."""
        self._window_open = False
        self._closed_event.wait(drain_timeout_s)

    def _snapshot(self, edge: str) -> None:
        target = self.program.target
        if target is None:
            return
        if self._proc is not None:  # bpftrace is our child: not part of what is traced
            target = dataclasses.replace(
                target, exclude_pids=(*target.exclude_pids, self._proc.pid, *_children(self._proc.pid))
            )
        for family in self.program.families:
            try:
                value = family.snapshot(target)
            except Exception as exc:  # a family's snapshot bug must not stop the window
                value = {"error": f"{type(exc).__name__}: {exc}"}
            if value is not None:
                self.output.snapshots.setdefault(family.name, {})[edge] = value

    @property
    def pid(self) -> int | None:
        """The bpftrace (or sudo/setpriv wrapper) process id, None before start."""
        return self._proc.pid if self._proc is not None else None

    # -- stop --------------------------------------------------------------------------------
    def stop(self, timeout_s: float | None = None) -> SessionOutput:
        """End bpftrace so that END runs and its maps print; escalate to SIGTERM, then SIGKILL.
        `timeout_s`: how long it may take (default: stop_timeout_s of the probes attached).

        A ready program with the gate is ended by the EXIT marker (its gate calls `exit()`),
        sent again every STOP_RESEND_S until bpftrace exits: no signal is sent, so none can kill
        bpftrace while it prints its maps (it resets SIGINT to the default action then). Before
        the handshake, or for a program without the gate, SIGINT is sent instead (see
        `_interrupt`)."""
        t0 = time.monotonic()
        if timeout_s is None:
            timeout_s = stop_timeout_s(self.output.attached_probes)
        self.window_stop()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self.output.probe_cost = probe_cost(proc.pid)
        if proc is not None:
            if self.program.exits_on_marker and self._ready_event.is_set():
                self._exit_by_marker(proc, timeout_s)
            else:
                self._interrupt(proc, timeout_s)
            for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                if proc.poll() is not None:
                    break
                self.output.stop_signal = sig.name
                self._signal(sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait_s)
            self._join_readers(10)
            self.output.exit_code = proc.returncode
        self._cleanup_files()
        self.output.stop_s = time.monotonic() - t0
        return self.output

    def _exit_by_marker(self, proc: subprocess.Popen[str], timeout_s: float) -> None:
        """The EXIT marker, again every STOP_RESEND_S until bpftrace exits or timeout_s passes.
        A repeat is harmless: once bpftrace is finishing it ignores further exit() events, and
        the gate probe is detached before END runs."""
        self.output.stop_signal = EXIT_MARKER
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            marker.send(marker.EXIT, self.program.token)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(min(left, STOP_RESEND_S))

    def _interrupt(self, proc: subprocess.Popen[str], timeout_s: float) -> None:
        """SIGINT when bpftrace can take it, again only when it was lost (`interrupt.py`)."""
        self.output.stop_signal = signal.SIGINT.name
        interrupter = Interrupter(proc.pid, observable=not self.prefix)  # a prefix is sudo
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            interrupter.send_if_due(time.monotonic(), self._lines_read)
            self.output.sigints_sent = interrupter.sent
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(min(left, INTERRUPT_POLL_S))

    def abort(self) -> None:
        """Stop without caring for the output (exceptions, Ctrl+C); never leaves bpftrace behind."""
        with contextlib.suppress(Exception):
            self.stop(timeout_s=3.0)
        self._cleanup_files()

    def _signal(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        if sig == signal.SIGKILL and self.prefix[:1] and self.prefix[0].endswith("sudo"):
            # Killing only sudo would orphan a root bpftrace: kill its children through sudo first.
            for child in _children(proc.pid):
                subprocess.run(
                    ["sudo", "-n", "kill", "-KILL", str(child)], capture_output=True, timeout=10, check=False
                )
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)

    # -- output parsing ----------------------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._drain(self._proc.stdout, self.handle_line)

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        self._drain(self._proc.stderr, self.handle_stderr)

    def _drain(self, stream: Any, handle: Any) -> None:
        """Read until EOF whatever one line does: a reader that stopped would leave bpftrace
        blocked writing END's maps into a full pipe, which looks like a bpftrace ignoring SIGINT."""
        for line in stream:
            self._lines_read += 1
            try:
                handle(line)
            except Exception as exc:  # a record we cannot decode must not stop the draining
                with self._lock:
                    self.output.stderr.append(f"aorta could not decode a line ({type(exc).__name__}: {exc})")

    def handle_line(self, line: str) -> None:
        """Decode one stdout line (a JSON record, or text from an older bpftrace)."""
        line = line.strip()
        if not line:
            return
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            self._text_line(line)
            return
        if not isinstance(record, dict):
            return
        kind, data = record.get("type"), record.get("data")
        if kind == "helper_error":
            self._helper_error(record)
            return
        with self._lock:
            if kind in ("map", "hist", "stats") and isinstance(data, dict):
                self.output.maps.update(data)
            elif kind == "lost_events" and isinstance(data, dict):
                self.output.lost_events += int(data.get("events", 0))
                self.output.lost_records += 1
            elif kind == "attached_probes" and isinstance(data, dict):
                self.output.attached_probes = data.get("probes")
            elif kind == "printf" and isinstance(data, str):
                self._printf(data)

    def _helper_error(self, record: JsonObject) -> None:
        """Count a failed helper call (a full map refusing an update) by statement position."""
        try:
            key = (
                str(record.get("helper")),
                int(record.get("retcode", 0)),
                int(record.get("line", 0)),
                int(record.get("col", 0)),
            )
        except (TypeError, ValueError):
            return
        with self._lock:
            self.output.helper_errors[key] = self.output.helper_errors.get(key, 0) + 1

    def _text_line(self, line: str) -> None:
        match = _LOST_TEXT.search(line)
        with self._lock:
            if match:
                self.output.lost_events += int(match.group(1))
                self.output.lost_records += 1
            else:
                self.output.stderr.append(f"stdout: {line}")

    def _printf(self, text: str) -> None:
        for part in text.splitlines():
            words = part.split()
            if part.strip() == CLOSED_TEXT:
                self._closed_event.set()
            elif len(words) == 2 and words[0] == READY_TEXT and words[1].isdigit():
                self._ready.add(int(words[1]))
                if self._ready >= set(self.program.handshake_ids or HANDSHAKE_IDS):
                    self._ready_event.set()
            elif part.strip():
                self.output.printf.append(part)
                self.printf_seen.set()

    def handle_stderr(self, line: str) -> None:
        """Keep stderr lines that matter; count 'Lost N events'; drop the RLIMIT_MEMLOCK notice."""
        match = _LOST_TEXT.search(line)
        if match:
            with self._lock:
                self.output.lost_events += int(match.group(1))
                self.output.lost_records += 1
            return
        if any(p.search(line) for p in HARMLESS_STDERR):
            return
        with self._lock:
            self.output.stderr.append(line.rstrip())

    def _error_text(self) -> str:
        return " | ".join(self.output.stderr[-5:])

    def _join_readers(self, timeout_s: float) -> None:
        for reader in self._readers:
            reader.join(timeout_s)

    def _cleanup_files(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def remove_stale_sessions(temp_root: str | None = None) -> dict[str, list[Any]]:
    """Kill bpftrace processes whose owner is gone and remove their temp folders (after kill -9).

    A session's bpftrace carries its owner's pid in its environment (AORTA_TRACE_OWNER); it is
    stale when that process is dead or no longer its ancestor (the pid was reused). Only
    processes whose environment this user can read, and folders this user owns, are touched.
    """
    killed = []
    for entry in Path("/proc").iterdir():
        pid = parse_pid(entry.name)
        if pid is None or _read(f"/proc/{pid}/comm") != "bpftrace":
            continue
        owner = _owner_of(pid)
        if owner is None or (pid_alive(owner) and is_ancestor(owner, pid)):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    folders = stale_owned_dirs(temp_root or tempfile.gettempdir(), TEMP_PREFIX)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return {"killed": killed, "folders": folders}


def _owner_of(pid: int) -> int | None:
    """The AORTA_TRACE_OWNER pid in a process's environment (None if absent or unreadable)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = f"{OWNER_ENV}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(key):
            return parse_pid(item[len(key) :].decode("ascii", "replace"))
    return None


def probe_cost(pid: int) -> JsonObject:
    """Time the kernel spent in this bpftrace's BPF programs since attach (fdinfo run_time_ns).

    The kernel counts it only while sysctl kernel.bpf_stats_enabled=1; otherwise the values are
    null with that reason. Under sudo the root process's fdinfo is not readable: null as well.
    """
    pids = [pid] + (
        []
        if Path(f"/proc/{pid}/comm").exists() and _read(f"/proc/{pid}/comm") == "bpftrace"
        else _children(pid)
    )
    run_ns = run_cnt = 0
    progs = 0
    misses: int | None = None  # fdinfo has recursion_misses from Linux 5.12
    for p in pids:
        try:
            fds = list(Path(f"/proc/{p}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd) != "anon_inode:bpf-prog":
                    continue
                info = dict(
                    line.split(":", 1)
                    for line in Path(f"/proc/{p}/fdinfo/{fd.name}").read_text().splitlines()
                    if ":" in line
                )
                progs += 1
                run_ns += int(info.get("run_time_ns", "0").strip() or 0)
                run_cnt += int(info.get("run_cnt", "0").strip() or 0)
                if "recursion_misses" in info:
                    misses = (misses or 0) + int(info["recursion_misses"].strip() or 0)
    enabled = _read("/proc/sys/kernel/bpf_stats_enabled") == "1"
    if progs == 0:
        return {
            "programs": 0,
            "run_count": None,
            "run_time_ms": None,
            "reason": "bpftrace's BPF programs are not readable from this process",
        }
    if not enabled and run_cnt == 0:
        return {
            "programs": progs,
            "run_count": None,
            "run_time_ms": None,
            "recursion_misses": misses,
            "reason": "kernel.bpf_stats_enabled=0: the kernel does not time BPF programs",
        }
    return {
        "programs": progs,
        "run_count": run_cnt,
        "recursion_misses": misses,
        "run_time_ms": run_ns / 1e6,
        "avg_ns_per_run": run_ns / run_cnt if run_cnt else None,
        "covered": "every hit since attach (warm-up and window), all probes",
    }


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc/PID/task/*/children)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found.extend(int(x) for x in (task / "children").read_text().split())
    return found

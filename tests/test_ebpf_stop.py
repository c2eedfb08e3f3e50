"""stop() against the real bpftrace: the EXIT marker for a ready program, a SIGINT sent while
bpftrace still attaches, a large END, and the bpftrace behaviour that rules out a second SIGINT."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from aorta.ebpf import engine
from aorta.ebpf.interrupt import Interrupter
from aorta.ebpf.probes.base import TraceTarget
from aorta.ebpf.program import Program
from aorta.ebpf.session import EXIT_MARKER, TraceSession, bpftrace_path
from ebpf_support import many_keys

pytestmark = [pytest.mark.ebpf, pytest.mark.slow]

# Many probes, so that attaching takes a while; BEGIN fills a 100-key map that the exit prints,
# END prints a known line.
SYSCALLS = ("read", "write", "openat", "close", "mmap", "futex", "ioctl", "getpid", "poll", "lseek")
PROGRAM = (
    "\n".join(f"tracepoint:syscalls:sys_enter_{s} {{ @{s} = count(); }}" for s in SYSCALLS)
    + "\nBEGIN { $i = 0; unroll(100) { @end_map[$i] = $i; $i++; } }"
    + '\nEND { printf("end ran\\n"); }\n'
)


def _spawned(ready: engine.Readiness) -> TraceSession:
    session = TraceSession(
        Program(text=PROGRAM, token=1, families=[]),
        str(ready.bpftrace),
        list(ready.prefix or []),
        map_keys_max=4096,
    )
    session._spawn()  # no handshake: stop while bpftrace is still loading or attaching probes
    return session


@pytest.mark.parametrize("delay_s", [0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3])
def test_stop_during_attach_gets_ends_maps_by_sigint(ebpf_ready: None, delay_s: float) -> None:
    """bpftrace 0.17 loses a SIGINT that arrives while it attaches: stop() must still end it
    with SIGINT (END ran, its map complete), not fall back to SIGTERM. Before the SIGINT was
    re-sent this fell back to SIGTERM after timeout_s, with no END output."""
    ready = engine.check_readiness()
    session = _spawned(ready)
    deadline = time.monotonic() + 30
    # wait for bpftrace's "attaching N probes" record: its SIGINT handler is installed by then
    while (
        session.output.attached_probes is None
        and session._proc is not None
        and session._proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.002)
    time.sleep(delay_s)
    out = session.stop(timeout_s=30.0)  # attaching 12 probes can take seconds under load
    assert out.attached_probes == len(SYSCALLS) + 2, out.stderr  # with BEGIN and END
    assert out.stop_signal == "SIGINT", (out.sigints_sent, out.stderr)
    assert out.exit_code == 0, out.stderr
    assert "end ran" in out.printf
    assert out.maps["@end_map"] == {str(i): i for i in range(100)}


@pytest.mark.parametrize("keys", [10, 20_000])
def test_a_ready_program_is_ended_by_its_exit_marker_without_a_signal(ebpf_ready: None, keys: int) -> None:
    """The gate's exit() ends bpftrace: END ran, every key printed, exit 0, and no SIGINT sent
    (a second SIGINT while bpftrace prints its maps would kill it, see the test below)."""
    ready = engine.check_readiness()
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[many_keys()]
    )
    session = engine.start_session(program, ready)
    try:
        session.window_start()
        for _ in range(keys):
            os.getppid()
    finally:
        out = session.stop()
    assert out.stop_signal == EXIT_MARKER, (out.stop_signal, out.stderr)
    assert out.sigints_sent == 0
    assert out.exit_code == 0, out.stderr
    assert len(out.maps.get("@t_many_keys", {})) == keys, sorted(out.maps)


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process `pid` has a handler installed for `sig` (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigCgt line for pid {pid}")


def test_bpftrace_printing_its_maps_dies_of_a_second_sigint(ebpf_ready: None) -> None:
    """The bpftrace behaviour behind stop(): once its poll loop has ended it resets SIGINT to the
    default action, so a SIGINT while it prints its maps kills it (exit -2). bpftrace is held
    inside the printing by a full pipe (its map is far larger than the pipe)."""
    pid = os.getpid()
    keys = 30_000
    text = (
        f"tracepoint:syscalls:sys_enter_getppid /pid == {pid}/ {{ "
        f'if (@n == 0) {{ printf("probe_live\\n"); }} @n = @n + 1; @keys[@n] = 1; }}'
    )
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "BPFTRACE_MAP_KEYS_MAX": str(2 * keys)}
    proc = subprocess.Popen(
        [bpftrace_path() or "bpftrace", "-f", "json", "-e", text], stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        seen = b""
        while b"probe_live" not in seen:  # the probe is live once it answered a getppid
            assert time.monotonic() < deadline and proc.poll() is None, seen[-500:]
            os.getppid()
            if select.select([proc.stdout], [], [], 0.01)[0]:
                seen += os.read(proc.stdout.fileno(), 65536)
        for _ in range(keys):
            os.getppid()
        interrupter = Interrupter(proc.pid)
        # the first SIGINT, when it can take it; then nothing is read, so printing blocks
        while _catches(proc.pid, signal.SIGINT) or not _blocked_writing(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None, interrupter
            interrupter.send_if_due(time.monotonic(), 0)
            time.sleep(0.01)
        assert interrupter.sent == 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGINT


def _blocked_writing(pid: int) -> bool:
    """Whether `pid`'s main thread waits to write into a full pipe (wchan pipe_write; newer
    kernels name it anon_pipe_write)."""
    return Path(f"/proc/{pid}/wchan").read_text().strip().endswith("pipe_write")

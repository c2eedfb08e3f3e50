"""stop() against the real bpftrace: a SIGINT sent while bpftrace still attaches, a large END."""

from __future__ import annotations

import time

import pytest

from aorta.ebpf import engine
from aorta.ebpf.program import Program
from aorta.ebpf.session import TraceSession

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

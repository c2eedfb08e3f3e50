"""Where an eBPF attach's time goes (issue 24: attach ≤ 0.3 s), measured side by side in one run.

Each round, in turn: a bare bpftrace start (`BEGIN { printf }`: parse, LLVM, load, no probe:
the floor every program pays), aorta's handshake-only program (the marker/gate probes, no
family), and the programs `run` loads for --ebpf-trace, with --ebpf-memory-trace, and with the
--trace-out timeline. Each is timed from spawn to "ready" (the handshake aorta waits on before
the window opens: TraceSession.attach_s). Prints medians, the probes bpftrace says it attached
(BEGIN/END/interval included), and the time per attach point above
the handshake-only program. "run's start" times what `run` does before the window (readiness
check, program, session) without and with the bpftrace version cache. "plain bpftrace" runs
the --ebpf-trace program without TraceSession (no wrapper, readers or stale-session sweep):
the session's own share.

    sudo .venv/bin/python bench/ebpf_attach_time.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable

from aorta.ebpf import engine, timeline
from aorta.ebpf.probes.base import TraceTarget


def bare_start(bpftrace: str) -> tuple[float, int]:
    """(seconds from spawn to the BEGIN probe's first line, probes attached) of a program with
    no probe besides BEGIN."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [bpftrace, "-e", 'BEGIN { printf("ready\\n"); exit(); }'],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line, probes = proc.stdout.readline(), 0
    while line.startswith("Attaching"):  # "Attaching 1 probe..."
        probes = int(line.split()[1])
        line = proc.stdout.readline()
    took = time.monotonic() - t0
    proc.wait(30)
    if line.strip() != "ready":
        raise SystemExit(f"bare bpftrace start printed {line!r}, not 'ready'")
    return took, probes


def raw_start(ready: engine.Readiness, make: Callable[[], engine.Program]) -> tuple[float, int]:
    """(seconds, probes bpftrace attached) of the same program run by a plain `bpftrace -k -f
    json FILE` (no TraceSession around it), from spawn to both handshake lines."""
    import json
    import tempfile
    import threading

    from aorta.ebpf import marker

    program = make()
    with tempfile.NamedTemporaryFile("w", suffix=".bt", delete=False) as fh:
        fh.write(program.text)
    stop = threading.Event()

    def ping() -> None:
        while not stop.is_set():
            marker.send(marker.PING, program.token)
            time.sleep(0.005)

    t0 = time.monotonic()
    proc = subprocess.Popen(
        [ready.bpftrace, "-k", "-f", "json", fh.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    threading.Thread(target=ping, daemon=True).start()
    seen, probes = 0, 0
    assert proc.stdout is not None
    for line in proc.stdout:
        record = json.loads(line)
        if record.get("type") == "attached_probes":
            probes = record["data"]["probes"]
        elif "aorta_ready" in str(record.get("data")):
            seen += 1
            if seen == 2:
                break
    took = time.monotonic() - t0
    stop.set()
    for _ in range(120):  # the gate's exit(), as TraceSession.stop ends it (no signal)
        marker.send(marker.EXIT, program.token)
        try:  # END prints the maps: read them, or bpftrace blocks on the pipe
            proc.communicate(timeout=0.25)
            break
        except subprocess.TimeoutExpired:
            continue
    os.unlink(fh.name)
    return took, probes


def session_start(ready: engine.Readiness, make: Callable[[], engine.Program]) -> tuple[float, int]:
    """(attach seconds, attach points) of one program started the way `run` starts it."""
    program = make()
    session = engine.start_session(program, ready)
    try:
        assert session.output.attach_s is not None
        return session.output.attach_s, int(session.output.attached_probes or 0)
    finally:
        session.stop()


def run_start(cached: bool, make_target: Callable[[], TraceTarget]) -> tuple[float, int]:
    """(seconds, probes) of what `run --ebpf-trace` does before its window: check_readiness,
    build the program, start the session. `cached=False` is the code before the version cache
    (every start ran `bpftrace --version`): the before/after of issue 24's attach item."""
    from aorta.ebpf import session as session_mod

    if not cached:
        session_mod._VERSIONS.clear()
    t0 = time.monotonic()
    ready = engine.check_readiness()
    assert ready.tracefs is not None
    program = engine.make_program(True, False, make_target(), ready.tracefs, ready.version)
    session = engine.start_session(program, ready)
    took = time.monotonic() - t0
    try:
        return took, int(session.output.attached_probes or 0)
    finally:
        session.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ready = engine.check_readiness()
    if ready.bpftrace is None or ready.prefix is None or ready.tracefs is None:
        raise SystemExit(f"eBPF not usable here: {ready}")
    me = TraceTarget((os.getpid(),))
    with_tl = TraceTarget((os.getpid(),), timeline_events=timeline.TIMELINE_EVENTS)

    def program(queue: bool, memory: bool, target: TraceTarget, families=None):
        return lambda: engine.make_program(
            queue, memory, target, ready.tracefs, ready.version, families=families
        )

    variants: dict[str, Callable[[], float | tuple[float, int]]] = {
        "bare bpftrace start (BEGIN only)": lambda: bare_start(ready.bpftrace),
        "handshake only (no family)": lambda: session_start(ready, program(False, False, me, [])),
        "--ebpf-trace": lambda: session_start(ready, program(True, False, me)),
        "--ebpf-trace, plain bpftrace (no session)": lambda: raw_start(ready, program(True, False, me)),
        "--ebpf-trace --ebpf-memory-trace": lambda: session_start(ready, program(True, True, me)),
        "--ebpf-trace --trace-out (timeline)": lambda: session_start(ready, program(True, False, with_tl)),
        "run's start: readiness+session, before": lambda: run_start(False, lambda: me),
        "run's start: readiness+session, after": lambda: run_start(True, lambda: me),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    points: dict[str, int] = {}
    for _ in range(args.rounds):  # interleaved: machine noise hits every variant alike
        for name, run in variants.items():
            took, n = run()
            times[name].append(took)
            points[name] = n
    base = statistics.median(times["bare bpftrace start (BEGIN only)"])
    hand = statistics.median(times["handshake only (no family)"])
    print(f"{'program':40} {'probes':>10} {'median s':>9} {'min s':>7} {'× bare':>7} {'ms/pt over hs':>13}")
    for name, values in times.items():
        med = statistics.median(values)
        extra = points[name] - points["handshake only (no family)"]
        per = f"{(med - hand) * 1e3 / extra:13.1f}" if extra > 0 else f"{'':13}"
        print(f"{name:40} {points[name]:10d} {med:9.3f} {min(values):7.3f} {med / base:7.2f} {per}")
    print(f"rounds: {args.rounds}, bpftrace {'.'.join(map(str, ready.version or ()))}")


if __name__ == "__main__":
    main()

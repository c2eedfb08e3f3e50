"""Event capacity of the engine vs the naive per-event printf pipeline, plus attach/stop times.

(b) A generator issues exactly N getppid() syscalls at full speed inside the window. The engine
counts them in the kernel (`count()`): its count must equal N with 0 lost. The naive design
prints one line per event (`printf` via `bpftrace -f json`) and parses every line in Python: we
report how many arrived, how many bpftrace declared lost, and the CPU it cost.
The floor: the same engine program with an empty action on the same tracepoint (no filter, no
map): what attaching any BPF program there costs per event. Untraced, engine and empty runs
alternate in --rounds interleaved rounds (the order rotates), so machine drift hits all three;
medians are compared as two engine/floor ratios (`Ratios`): of the ns each adds per event over
the untraced generator (the engine's own cost against the floor's; goal ≤ 1.2×), and of the
generator's total wall time (which adds the untraced syscall to both sides and so dilutes it).
(c) Attach (start → handshake complete) and stop (SIGINT → exit, maps read) times of the full
`--ebpf-trace` program, median of --repeats, beside the attach time of the floor program (what
bpftrace itself needs to start and attach one probe) and of a bare `bpftrace -e 'BEGIN{exit()}'`.

Usage: sudo PYTHONPATH=src python bench/ebpf_capacity.py [--events 2000000] [--rounds 5] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aorta.common.atomicio import atomic_write_json, check_output_path
from aorta.ebpf import engine
from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily, RenderContext, TraceTarget
from aorta.ebpf.program import CLOSED_TEXT
from aorta.ebpf.session import TraceSession

EVENT = ("syscalls", "sys_enter_getppid")


class _Counter(ProbeFamily):
    """In-kernel aggregation: one counter."""

    name = "cap"
    section = "queue"
    description = "capacity benchmark: count getppid() in the window"

    def wanted_events(self) -> list[str]:
        return [":".join(EVENT)]

    def render(self, ctx: RenderContext) -> ProbeCode:
        return ProbeCode(
            probes=[
                f"tracepoint:{':'.join(EVENT)}\n/{ctx.pid_filter} && {ctx.gate}/\n"
                "{\n  @cap_events = count();\n}"
            ],
            used_events=[":".join(EVENT)],
        )

    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        return FamilyResult(self.name, self.section, {"events": maps.get("@cap_events", 0)}, {})


class _Printer(_Counter):
    """The naive design: one printf per event, parsed in user space."""

    name = "naive"

    def render(self, ctx: RenderContext) -> ProbeCode:
        return ProbeCode(
            probes=[
                f"tracepoint:{':'.join(EVENT)}\n/{ctx.pid_filter} && {ctx.gate}/\n"
                '{\n  printf("%d %llu\\n", tid, nsecs);\n}'
            ],
            used_events=[":".join(EVENT)],
        )


class _Empty(_Counter):
    """The floor: a program on the same tracepoint whose action does nothing (no filter, no map)."""

    name = "empty"

    def render(self, ctx: RenderContext) -> ProbeCode:
        return ProbeCode(probes=[f"tracepoint:{':'.join(EVENT)}\n{{\n}}"], used_events=[":".join(EVENT)])

    def collect(self, maps: dict[str, Any], context: dict[str, Any]) -> FamilyResult:
        return FamilyResult(self.name, self.section, {"events": None}, {})


class _CountingSession(TraceSession):
    """Counts parsed printf records instead of storing them (the Python side of the naive path)."""

    parsed = 0

    def _printf(self, text: str) -> None:
        if text.startswith(("aorta_ready", CLOSED_TEXT)):  # the engine's own lines
            super()._printf(text)
        else:
            self.parsed += 1


def _cpu_seconds(pid: int) -> float | None:
    """utime+stime of a process from /proc (None once it has exited)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _generate(n: int) -> float:
    getppid = os.getppid
    t0 = time.perf_counter()
    for _ in range(n):
        getppid()
    return time.perf_counter() - t0


def _traced(family: ProbeFamily, n: int, ready: engine.Readiness) -> dict[str, Any]:
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[family]
    )
    session = _CountingSession(program, ready.bpftrace or "bpftrace", ready.prefix or [])
    session.start()
    cpu0 = time.process_time()
    try:
        session.window_start()
        wall = _generate(n)
        session.window_stop()
        bpf_cpu = _cpu_seconds(session._proc.pid) if session._proc else None
        drain0 = time.monotonic()
        last = -1
        while isinstance(family, _Printer) and session.parsed != last:  # let the reader catch up
            last = session.parsed
            time.sleep(0.2)
        drain = time.monotonic() - drain0
    except BaseException:
        session.abort()
        raise
    out = session.stop()
    counted = (
        family.collect({k: v for k, v in out.maps.items() if k.startswith("@cap_")}, {}).metrics["events"]
        if not isinstance(family, _Printer)
        else session.parsed
    )
    return {
        "events_seen": counted,
        "lost": out.lost_events,
        "generator_wall_s": wall,
        "bpftrace_cpu_s": bpf_cpu,
        "python_cpu_s_incl_generator": time.process_time() - cpu0,
        "drain_s": drain,
        "attach_s": session.output.attach_s,
    }


def interleaved(n: int, rounds: int, ready: engine.Readiness) -> dict[str, list[dict[str, Any]]]:
    """Untraced, engine and empty-program runs of the generator in `rounds` rotating rounds."""
    kinds = ["untraced", "engine", "empty"]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds[r % 3 :] + kinds[: r % 3]:
            if kind == "untraced":
                runs[kind].append({"generator_wall_s": _generate(n)})
            else:
                runs[kind].append(_traced(_Counter() if kind == "engine" else _Empty(), n, ready))
    return runs


@dataclass(frozen=True)
class Ratios:
    """Engine against floor from the medians of one interleaved run: `added_per_event`, the ns the
    engine adds to each event over the untraced generator divided by the ns the floor adds (the
    programs' own costs; None, with `added_reason`, when the floor added nothing measurable);
    `total_time`, the generator's whole wall time traced by the engine over traced by the floor,
    which puts the untraced syscall's ns on both sides and so reads closer to 1."""

    engine_added_ns: float
    floor_added_ns: float
    added_per_event: float | None
    added_reason: str | None
    total_time: float


def ratios(n: int, untraced_s: float, floor_s: float, engine_s: float) -> Ratios:
    """The two engine/floor ratios of `n` events from the median generator wall times."""
    engine_added = (engine_s - untraced_s) / n * 1e9
    floor_added = (floor_s - untraced_s) / n * 1e9
    measurable = floor_added > 0
    return Ratios(
        engine_added_ns=engine_added,
        floor_added_ns=floor_added,
        added_per_event=engine_added / floor_added if measurable else None,
        added_reason=None if measurable else "the floor program added no time over the untraced generator",
        total_time=engine_s / floor_s,
    )


def _median_wall(runs: list[dict[str, Any]]) -> float:
    return statistics.median(r["generator_wall_s"] for r in runs)


def bare_bpftrace_s(ready: engine.Readiness, repeats: int) -> float:
    """Median wall time of `bpftrace -e 'BEGIN { exit(); }'`: bpftrace's own start and exit."""
    import subprocess

    times = []
    for _ in range(repeats):
        t0 = time.monotonic()
        subprocess.run(
            [*(ready.prefix or []), ready.bpftrace or "bpftrace", "-e", "BEGIN { exit(); }"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def attach_stop_times(ready: engine.Readiness, repeats: int) -> dict[str, Any]:
    """Median start→ready and stop→exit of the full --ebpf-trace program."""
    attach, stop = [], []
    for _ in range(repeats):
        program = engine.make_program(True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version)
        session = engine.start_session(program, ready)
        attach.append(session.output.attach_s)
        out = session.stop()
        stop.append(out.stop_s)
    return {
        "attach_s": attach,
        "stop_s": stop,
        "attach_median_s": statistics.median(attach),
        "stop_median_s": statistics.median(stop),
    }


def ratio_lines(ratio: Ratios) -> str:
    """The two engine/floor ratios, each labelled with what it divides."""
    if ratio.added_per_event is None:
        added = f"null ({ratio.added_reason})"
    else:
        verdict = "met" if ratio.added_per_event <= 1.2 else "not met"
        added = (
            f"{ratio.engine_added_ns:.0f} / {ratio.floor_added_ns:.0f} ns = {ratio.added_per_event:.2f}x "
            f"(goal ≤ 1.2x: {verdict})"
        )
    return (
        f"  engine / floor, ns added per event over untraced: {added}\n"
        f"  engine / floor, total generator wall time: {ratio.total_time:.2f}x "
        "(the untraced syscall's ns on both sides dilute it)\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved untraced/engine/floor rounds")
    parser.add_argument("--repeats", type=int, default=5, help="attach/stop measurements")
    parser.add_argument("--json", dest="json_out", help="also write the numbers here")
    args = parser.parse_args()
    if args.json_out:
        check_output_path(args.json_out)
    ready = engine.check_readiness()
    if not ready.ok:
        print(f"eBPF unavailable: {ready.reason}", file=sys.stderr)
        return 2
    threading.current_thread().name = "bench"
    n = args.events
    runs = interleaved(n, args.rounds, ready)
    base = _median_wall(runs["untraced"])
    eng = min(runs["engine"], key=lambda r: abs(r["generator_wall_s"] - _median_wall(runs["engine"])))
    floor_s = _median_wall(runs["empty"])
    eng_s = _median_wall(runs["engine"])
    naive = _traced(_Printer(), n, ready)
    times = attach_stop_times(ready, args.repeats)
    times["floor_attach_median_s"] = statistics.median(r["attach_s"] for r in runs["empty"])
    times["bare_bpftrace_median_s"] = bare_bpftrace_s(ready, args.repeats)
    ratio = ratios(n, base, floor_s, eng_s)
    print(
        f"N = {n:,} getppid() events at full speed; medians of {args.rounds} interleaved rounds:\n"
        f"  untraced generator       {base:.3f} s ({base / n * 1e9:.0f} ns/event)\n"
        f"  empty program (floor)    {floor_s:.3f} s (+{ratio.floor_added_ns:.0f} ns/event)\n"
        f"  engine (in-kernel count) {eng_s:.3f} s (+{ratio.engine_added_ns:.0f} ns/event)\n"
        f"{ratio_lines(ratio)}"
        f"  engine / untraced, total generator time = {eng_s / base:.2f}x; "
        f"floor / untraced = {floor_s / base:.2f}x\n"
    )
    print(f"{'':34}{'engine (in-kernel count)':>26}{'naive (printf + Python)':>26}")
    rows = [
        ("events counted", f"{eng['events_seen']:,}", f"{naive['events_seen']:,}"),
        ("equals N", str(eng["events_seen"] == n), str(naive["events_seen"] == n)),
        ("lost (bpftrace-reported)", f"{eng['lost']:,}", f"{naive['lost']:,}"),
        ("generator wall s", f"{eng['generator_wall_s']:.3f}", f"{naive['generator_wall_s']:.3f}"),
        (
            "slowdown vs untraced",
            f"{eng['generator_wall_s'] / base:.2f}x",
            f"{naive['generator_wall_s'] / base:.2f}x",
        ),
        ("bpftrace CPU s", f"{eng['bpftrace_cpu_s']}", f"{naive['bpftrace_cpu_s']}"),
        (
            "python CPU s (incl. generator)",
            f"{eng['python_cpu_s_incl_generator']:.3f}",
            f"{naive['python_cpu_s_incl_generator']:.3f}",
        ),
        ("drain after window s", f"{eng['drain_s']:.2f}", f"{naive['drain_s']:.2f}"),
    ]
    for label, a, b in rows:
        print(f"{label:<34}{a:>26}{b:>26}")
    print(
        f"\nattach (start→ready) median of {args.repeats}: {times['attach_median_s']:.3f} s "
        f"(goal ≤ 0.3 s); stop median: {times['stop_median_s']:.3f} s (target ≤ 1 s)\n"
        f"  for scale: floor program attach {times['floor_attach_median_s']:.3f} s, bare "
        f"`bpftrace -e 'BEGIN{{exit()}}'` start to exit {times['bare_bpftrace_median_s']:.3f} s"
    )
    ok = all(r["events_seen"] == n and r["lost"] == 0 for r in runs["engine"])
    print(f"engine capacity check: {'PASS' if ok else 'FAIL'}")
    if args.json_out:
        atomic_write_json(
            args.json_out,
            {
                "n": n,
                "untraced_s": base,
                "floor_s": floor_s,
                "engine_s": eng_s,
                "engine_added_ns_per_event": ratio.engine_added_ns,
                "floor_added_ns_per_event": ratio.floor_added_ns,
                "engine_over_floor_added_per_event": ratio.added_per_event,
                "engine_over_floor_added_per_event_reason": ratio.added_reason,
                "engine_over_floor_total_time": ratio.total_time,
                "rounds": runs,
                "naive": naive,
                "times": times,
            },
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

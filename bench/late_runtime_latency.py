"""Late-loaded runtimes: mapped → probes live on the real libcudart and libnccl, and the mmap probes' cost.

Latency: each round starts tests/late_load_child.py, attaches `ebpf-attach --pid` to it for
--duration, and has it dlopen the real library (tests/vendor_libs.py: the pinned wheels) --delay
seconds into the window, making no calls. From the result's late_runtimes row: mapped → found
(the kernel's mapping time to the re-scan that saw it), found → live (rendering the late program
and bpftrace's start-up until its handshake), live → counted (its gate opening) and mapped →
counted, the span whose calls are not counted; found → live split into rendering (reading the
file's symbols) and bpftrace's start until its handshake. Median, min and max over the rounds,
per library.

Cost: the two syscall tracepoints that time every executable mapping of the traced processes
(probes/gpu_runtime_loads) fire on every mmap on the machine. Rounds (order alternating) time an
anonymous 4 KiB mmap + munmap from this process under a program holding only those probes and
under the same program without them (its gate's prctl tracepoint already puts every syscall on
the kernel's tracing path), with this process traced (the pid lookup hits, the flags test rejects
it) and with another pid traced (the lookup misses: every other process on the machine). The
headline is the median over rounds of the difference, ns per mmap + munmap.

Usage: sudo PYTHONPATH=src:tests python bench/late_runtime_latency.py [--rounds 5] [--duration 8]
       [--delay 2] [--calls 20000] [--skip-latency] [--skip-cost]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

SPANS = (
    ("mapped → found", "mapped_at_ms", "found_at_ms"),
    ("found → live", "found_at_ms", "probes_live_at_ms"),
    ("live → counted", "probes_live_at_ms", "counted_from_ms"),
    ("mapped → counted (not counted)", "mapped_at_ms", "counted_from_ms"),
)


def one_round(lib: Path, duration: float, delay: float, folder: Path) -> dict[str, Any]:
    """One late dlopen of `lib` into an attach: its late_runtimes row."""
    child = subprocess.Popen(
        [sys.executable, "-I", str(HERE.parent / "tests" / "late_load_child.py"), str(lib), str(delay), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        out = folder / "late.json"
        command = ["ebpf-attach", "--pid", str(child.pid), "--duration", f"{duration:g}s", "-o", str(out)]
        attach = subprocess.Popen(
            [sys.executable, "-m", "aorta.hw_queue_eval", *command, "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert attach.stderr is not None
        line = attach.stderr.readline()
        while line and not line.startswith("tracing pid"):
            line = attach.stderr.readline()
        child.stdin.write("go\n")
        child.stdin.flush()
        child.stdout.readline()
        attach.communicate(timeout=300)
        report = json.loads(out.read_text())["late_runtimes"]
    finally:
        child.kill()
        child.wait()
    row = next(r for r in report["libraries"] if r["library"] == str(lib))
    program = next(p for p in report["programs"] if str(lib) in p["libraries"])
    return {**row, "render_ms": program["render_s"] * 1e3, "attach_ms": program["attach_s"] * 1e3}


def latency(args: argparse.Namespace) -> None:
    import vendor_libs

    for key in ("cudart", "nccl"):
        lib = vendor_libs.library(key)
        if lib is None:
            raise SystemExit(f"{key} not fetched: run python tests/vendor_libs.py {key}")
        spans: dict[str, list[float]] = {}
        with tempfile.TemporaryDirectory(prefix="aorta-late-") as folder:
            for r in range(args.rounds):
                row = one_round(lib, args.duration, args.delay, Path(folder))
                got = {name: row[b] - row[a] for name, a, b in SPANS if None not in (row[a], row[b])}
                got.update({"of which render": row["render_ms"], "of which bpftrace start": row["attach_ms"]})
                print(f"{lib.name} round {r + 1}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in got.items()))
                for name, value in got.items():
                    spans.setdefault(name, []).append(value)
        for name, values in spans.items():
            if values:
                print(
                    f"{lib.name} {name}: median {statistics.median(values):.1f} ms "
                    f"(min {min(values):.1f}, max {max(values):.1f}, {len(values)} rounds)"
                )


def _mmap_once() -> None:
    mmap.mmap(-1, 4096).close()


def _timed_under(program: Any, ready: Any, calls: int) -> float:
    """ns per mmap + munmap while `program` runs, its window open."""
    from aorta.ebpf import engine
    from uprobe_cost import _time_calls

    session = engine.start_session(program, ready)
    try:
        session.window_start()
        return _time_calls(_mmap_once, calls)
    finally:
        session.window_stop()
        session.stop()


def cost(args: argparse.Namespace) -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily

    ready = engine.check_readiness()
    if not ready.ok or ready.tracefs is None:
        raise SystemExit(f"eBPF unavailable: {ready.reason}")
    for who, pid in (("this process traced", os.getpid()), ("another process traced", 1)):
        programs = {
            # no runtime: the mapping probes only, and the same program without them (the gate's
            # prctl tracepoint already sends syscalls down the kernel's tracing path)
            watch: engine.make_program(
                True,
                False,
                TraceTarget((pid,)),
                ready.tracefs,
                ready.version,
                families=[GpuRuntimeFamily(libraries=[], watch_loads=watch)],
            )
            for watch in (True, False)
        }
        assert "sys_exit_mmap" in programs[True].text and "sys_exit_mmap" not in programs[False].text
        deltas = []
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            got = {watch: _timed_under(programs[watch], ready, args.calls) for watch in order}
            deltas.append(got[True] - got[False])
            print(
                f"mmap+munmap, {who}, round {r + 1}: gate only {got[False]:.0f} ns, "
                f"with the mapping probes {got[True]:.0f} ns"
            )
        print(f"mmap+munmap, {who}: +{statistics.median(deltas):.0f} ns (median of {len(deltas)} rounds)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--delay", type=float, default=2.0)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("late_runtime_latency: needs root (bpftrace); run with sudo")
    if not args.skip_latency:
        latency(args)
    if not args.skip_cost:
        cost(args)


if __name__ == "__main__":
    main()

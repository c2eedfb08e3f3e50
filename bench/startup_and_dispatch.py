"""Benchmark: CLI start-up and the CPU backend's per-op dispatch overhead, side by side.

Prints ratios measured in one run (the machine is shared and noisy; never compare across runs):
  1. `aorta-hwq list` vs `python -c pass` (bench/cli_startup.py's interleaved samples, median of
     N ≥ 10; that bench also times --help and info); target: list ≤ 0.35 s.
  2. an empty op through a CPU stream vs a direct call: amortised host+worker cost per op
     (10 000 ops per sample, median of 15 samples), the worker-side gap between consecutive
     ops (median of 10 000 samples), and one op + host wait on an idle queue (median of 10 000);
     target ≤ 20 µs per op.
Usage: python bench/startup_and_dispatch.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import cli_startup  # bench/ is this script's folder, first on sys.path

OPS = 10_000


def bench_startup(repeats: int) -> tuple[float, float]:
    """Median seconds of `list` and of a bare interpreter (cli_startup.py's interleaved samples)."""
    samples = cli_startup.measure(repeats, commands=(("list",),))
    return statistics.median(samples["list"]), statistics.median(samples["bare"])


def bench_dispatch(repeats: int) -> tuple[float, float, float]:
    from aorta.hw_queue_eval.backends.cpu import CpuBackend

    def empty() -> None:
        return None

    backend = CpuBackend(1, pool_size=1)
    stream = backend.streams[0]
    through_stream, direct = [], []
    gaps: list[float] = []
    try:
        for _ in range(repeats):
            backend.start_window()
            backend.begin_iteration(0)
            start = time.perf_counter_ns()
            for _ in range(OPS):
                stream.launch(empty, "empty")
            backend.synchronize()
            through_stream.append((time.perf_counter_ns() - start) / OPS / 1e3)
            ops = backend.stop_window()
            gaps = [(b.start_ns - a.end_ns) / 1e3 for a, b in itertools.pairwise(ops)]
            start = time.perf_counter_ns()
            for _ in range(OPS):
                empty()
            direct.append((time.perf_counter_ns() - start) / OPS / 1e3)
        round_trips = []
        for _ in range(OPS):
            start = time.perf_counter_ns()
            stream.launch(empty, "empty")
            backend.synchronize()
            round_trips.append((time.perf_counter_ns() - start) / 1e3)
    finally:
        backend.close()
    return (
        statistics.median(through_stream),
        statistics.median(direct),
        statistics.median(gaps),
        statistics.median(round_trips),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    repeats = max(10, args.repeats)

    cli, bare = bench_startup(repeats)
    print(
        f"start-up   list {cli:.3f} s | python -c pass {bare:.3f} s | ratio {cli / bare:.2f}x "
        f"| aorta's own cost {cli - bare:.3f} s | target list <= 0.35 s: "
        f"{'OK' if cli <= 0.35 else 'MISSED'}"
    )
    per_op, direct, gap, round_trip = bench_dispatch(repeats)
    overhead = per_op - direct
    print(
        f"dispatch   via stream {per_op:.2f} us/op | direct call {direct:.3f} us/op | "
        f"overhead {overhead:.2f} us/op (ratio {per_op / direct:.0f}x) | worker gap between ops "
        f"(median of {OPS}) {gap:.2f} us | target <= 20 us: "
        f"{'OK' if overhead <= 20 else 'MISSED'}"
    )
    print(f"idle       one op + wait for it (wakes a sleeping worker; median of {OPS}) {round_trip:.1f} us")


if __name__ == "__main__":
    main()

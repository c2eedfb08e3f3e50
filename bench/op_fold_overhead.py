"""Benchmark: what bounded op memory (opfold) costs per op, before and after, side by side.

Prints ratios measured in one run (the machine is shared and noisy; never compare across runs):
  1. the worker's per-op recording statement: before (a 6-tuple appended to a list, every op kept
     until the window ends) vs after (the same append to a chunk, a full chunk handed to the
     host), best of N timeit samples;
  2. the host's fold, amortised per op, against the cost of one empty op through a CPU stream;
  3. empty ops through a CPU stream, folding off (every op kept as a row) vs folding on (rows
     capped at 1,000, chunks folded between iterations of 1,000 ops, as the harness does),
     interleaved in alternating order, median of N windows: per-op wall time, the ratio, and
     the worker's median gap between consecutive ops (what the switch analysis measures).
Each window starts from the same heap (the previous window's rows dropped, gc.collect()): rows
kept alive from one window into the next make Python's full collections rarer in the next one
and would flatter the side that keeps every op.
Target: the after/before ratio of per-op wall time within noise (≤ 1.05, median or best of N:
on a loaded machine single windows stall for 100+ ms at random, so the best of N is the steadier).
Usage: python bench/op_fold_overhead.py [--repeats 9] [--ops 50000]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time
import timeit

ITERATION_OPS = 1_000


def bench_statement(repeats: int) -> tuple[float, float]:
    """ns per op of the recording statement, before and after."""
    before_setup = "records = []; t = (3, 1, 0, 10**15, 10**15 + 5, 10**15 + 9)"
    before = "records.append(t)"
    after_setup = (
        "from collections import deque; full = deque(); records = []; "
        "t = (3, 1, 0, 10**15, 10**15 + 5, 10**15 + 9)"
    )
    after = "records.append(t)\nif len(records) >= 16384:\n    full.append(records); records = []"
    n = 200_000
    b, a = [], []
    for _ in range(repeats):  # interleaved; best of N (timeit's advice: the least disturbed)
        b.append(timeit.timeit(before, before_setup, number=n) / n * 1e9)
        a.append(timeit.timeit(after, after_setup, number=n) / n * 1e9)
    return min(b), min(a)


def _window(backend: object, stream: object, ops: int) -> tuple[float, list]:
    """Run `ops` empty ops in iterations of ITERATION_OPS; (µs per op, records kept)."""

    def empty() -> None:
        return None

    backend.start_window()  # type: ignore[attr-defined]
    start = time.perf_counter_ns()
    for i in range(ops // ITERATION_OPS):
        backend.begin_iteration(i)  # type: ignore[attr-defined]
        for _ in range(ITERATION_OPS):
            stream.launch(empty, "empty")  # type: ignore[attr-defined]
        backend.fold_pending()  # type: ignore[attr-defined]
    backend.synchronize()  # type: ignore[attr-defined]
    per_op = (time.perf_counter_ns() - start) / ops / 1e3
    return per_op, backend.stop_window()  # type: ignore[attr-defined]


def bench_window(repeats: int, ops: int) -> dict[str, tuple[float, ...]]:
    """Per side: (median µs per op, median worker gap µs, fold ns per op, best µs per op)."""
    from aorta.hw_queue_eval.backends.cpu import CpuBackend

    backend = CpuBackend(1, pool_size=1)
    stream = backend.streams[0]
    samples: dict[str, list[tuple[float, float, float]]] = {"off": [], "on": []}
    try:
        _window(backend, stream, ITERATION_OPS * 5)  # warm-up
        for r in range(repeats):
            order = (("off", None), ("on", 1_000))
            for side, cap in order if r % 2 else order[::-1]:  # interleaved, alternating
                backend.row_cap = cap
                gc.collect()  # the same heap on both sides: nothing of the last window alive
                per_op, kept = _window(backend, stream, ops)
                first = kept[:1_000]  # the same population on both sides: the first ops
                del kept
                gaps = [(b.start_ns - a.end_ns) / 1e3 for a, b in itertools.pairwise(first)]
                samples[side].append((per_op, statistics.median(gaps), backend.fold_ns / ops))
    finally:
        backend.close()
    return {
        side: (*(statistics.median(s[i] for s in rows) for i in range(3)), min(s[0] for s in rows))
        for side, rows in samples.items()
    }


def bench_fold_only(ops: int) -> float:
    """ns per op of OpFold.add over chunks shaped as the workers write them (host side only)."""
    import numpy as np

    from aorta.hw_queue_eval.backends.cpu import CHUNK_OPS
    from aorta.hw_queue_eval.ops.opfold import OpFold

    rng = np.random.default_rng(0)
    start = 10**12 + np.cumsum(rng.integers(2_000, 9_000, ops))
    rows = np.stack(
        [
            np.arange(ops) // ITERATION_OPS,
            rng.integers(0, 4, ops),
            np.zeros(ops, np.int64),
            start - 500,
            start,
            start + rng.integers(500, 1_500, ops),
        ],
        axis=1,
    ).astype(np.int64)
    chunks = [[tuple(r) for r in rows[i : i + CHUNK_OPS].tolist()] for i in range(0, ops, CHUNK_OPS)]
    fold = OpFold(4, ["empty"], 1_000)
    begin = time.process_time_ns()
    for chunk in chunks:
        fold.add(0, chunk)
    return (time.process_time_ns() - begin) / ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--ops", type=int, default=50_000)
    args = parser.parse_args()
    repeats, ops = max(3, args.repeats), max(ITERATION_OPS * 10, args.ops)

    before, after = bench_statement(repeats)
    print(
        f"record     worker statement before {before:.0f} ns/op | after {after:.0f} ns/op | "
        f"ratio {after / before:.2f}x"
    )
    fold_ns = bench_fold_only(ops)
    sides = bench_window(repeats, ops)
    (off_op, off_gap, _, off_best), (on_op, on_gap, on_fold, on_best) = sides["off"], sides["on"]
    print(
        f"fold       host fold {fold_ns:.0f} ns/op CPU time (worker-shaped chunks) | in window "
        f"{on_fold:.0f} ns/op wall | one empty op through a stream {off_op * 1e3:.0f} ns | "
        f"share {on_fold / (off_op * 1e3):.1%}"
    )
    ratio, best = on_op / off_op, on_best / off_best
    print(
        f"window     folding off {off_op:.2f} us/op | folding on {on_op:.2f} us/op | ratio "
        f"{ratio:.3f}x (best of {repeats}: {off_best:.2f} vs {on_best:.2f} us/op, {best:.3f}x) | "
        f"worker gap median off {off_gap:.2f} us, on {on_gap:.2f} us | target <= 1.05x: "
        f"{'OK' if min(ratio, best) <= 1.05 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()

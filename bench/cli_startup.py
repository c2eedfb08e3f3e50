"""Benchmark: start-up of `aorta-hwq list`, `--help` and `info` as a ratio to a bare interpreter.

Each sample of every command and of `python -c pass` is taken interleaved in one run (the machine
is shared and noisy: never compare across runs); the ratio is median(command) / median(bare) over
N samples. Target (issue 20): each ≤ 3× a bare interpreter, with the entry point the README's
set-up installs (.venv/bin/aorta-hwq, next to this interpreter). `python -c "import click"` is
printed as the floor: every command parses its arguments with click, so no command starts faster.
Usage: .venv/bin/python bench/cli_startup.py [--repeats 15] [--max-ratio 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = (("list",), ("--help",), ("info",))
TARGET_RATIO = 3.0


def entry_point() -> list[str]:
    """The installed `aorta-hwq` next to this interpreter, else `python -m aorta.hw_queue_eval`."""
    script = os.path.join(os.path.dirname(sys.executable), "aorta-hwq")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "aorta.hw_queue_eval"]


#: The README's environment writes and reads .pyc files; with PYTHONDONTWRITEBYTECODE set (some
#: CI and agent shells) every start compiles the sources again (~100 ms here), which is not what
#: a user's start costs. The bench's children run without it; the warm-up run writes the .pyc.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def time_command(argv: list[str]) -> float:
    """Wall seconds of one run of `argv`, output discarded (a failure stops the bench)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=CHILD_ENV)
    return time.perf_counter() - start


def measure(repeats: int, commands: tuple[tuple[str, ...], ...] = COMMANDS) -> dict[str, list[float]]:
    """Seconds per sample: 'bare', 'import click' and each command, round-robin so drift hits
    all alike."""
    runs = {"bare": [sys.executable, "-c", "pass"], "import click": [sys.executable, "-c", "import click"]}
    runs.update({" ".join(args): [*entry_point(), *args] for args in commands})
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for argv in runs.values():  # one unmeasured run each: page cache and .pyc files warm
        time_command(argv)
    for _ in range(repeats):
        for name, argv in runs.items():
            samples[name].append(time_command(argv))
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=15, help="samples per command (median of them)")
    parser.add_argument("--max-ratio", type=float, default=TARGET_RATIO, help="exit 1 above this ratio")
    args = parser.parse_args()
    samples = measure(max(args.repeats, 3))
    bare = statistics.median(samples.pop("bare"))
    print(f"entry point: {' '.join(entry_point())}; bare `python -c pass`: {bare * 1e3:.0f} ms")
    worst = 0.0
    for name, values in samples.items():
        median = statistics.median(values)
        ratio = median / bare
        if name != "import click":
            worst = max(worst, ratio)
        print(f"{name:<12} {median * 1e3:6.0f} ms  = {ratio:4.1f}× bare (median of {len(values)})")
    verdict = "ok" if worst <= args.max_ratio else "ABOVE TARGET"
    print(f"worst {worst:.1f}× (target ≤ {args.max_ratio:g}×): {verdict}")
    return 0 if worst <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())

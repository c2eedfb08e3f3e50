"""Benchmark: the diagnosis's confusion table — inject each documented cause into a CPU sweep and
see which cause the sweep's `analysis.diagnosis` names first.

Every case is the same sweep (`sweep WORKLOAD --streams LIST -d cpu --repeats R`), run SWEEPS
times as its own process, with one cause injected:

- sync:     every launch on stream k > 0 first waits on stream k-1 (tests/cli_with_fakes.py
            --points-extra-waits: a dependency the workload does not declare, so the streams
            serialise; the stream order check's needless-serialisation edges are the evidence);
- race:     graph_subgraphs on --race-streams, its join never waiting on the last branch
            (tests/cli_with_fakes.py --points-dropped-join-wait: a declared dependency removed;
            the stream order check's missing-synchronisation edge is the evidence);
- none:     the unmodified catalogue workload;
- launch:   every launch preceded by a known host spin (tests/cli_with_fakes.py
            --points-host-delay-us: each point's child runs with that collaborator);
- copy:     async_dataload (its loader streams copy host→device) on --copy-streams, every copy
            op holding one shared copy engine that sleeps --copy-delay-us first
            (tests/cli_with_fakes.py --points-copy-delay-us: a throttled copy path that more
            streams cannot widen; the ops' busy time in copies is the evidence);
- collective: comms_compute_overlap under torchrun (--nproc-per-node 2, gloo) on
            --collective-streams, rank 1 sleeping --collective-delay-us before every all-reduce
            (tests/cli_with_fakes.py --points-collective-delay-us: a late rank; its peer's wait
            inside the collective is the evidence);
- mux:      GPU_MAX_HW_QUEUES=1 (every stream on one hardware queue);
- saturate: --cpus 0 (the host thread and every queue on one CPU: fewer cores than queues);
- memory:   the sweep under `python -I -m aorta.tools.memory_pressure --limit LIMIT`, with
            --ebpf-memory-trace (root; the reclaim episodes are the evidence), its points' ops
            each writing KIB KiB of freshly mapped memory first (tests/cli_with_fakes.py
            --points-fresh-memory-kib): the catalogue's workloads allocate before the window and
            touch no new memory inside it, so a limit alone leaves nothing to reclaim there.

A sweep *recovers* its injected cause when the diagnosis names it first with confidence high or
medium; the unmodified case recovers when no cause is named at all. The table counts, per
injected case, the cause named first ("none" when none is). Pass: every injected cause recovered
in ≥ PASS_SHARE of its sweeps, "none" in all of them. Exit 1 when that fails, 2 on bad input.

    .venv/bin/python bench/diagnosis_confusion.py [--sweeps 5] [--repeats 3] [--cases LIST]
        [--workload large_gemm_only] [--size small] [--streams 1,2] [--iterations 20]
        [--host-delay-us 5000] [--memory-limit 512M] [--fresh-memory-kib 8192]
        [--copy-streams 4,8] [--copy-delay-us 3000] [--collective-streams 2,4]
        [--collective-delay-us 3000] [--race-streams 4,8] [--json OUT] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAKES = ROOT / "tests" / "cli_with_fakes.py"
CASES = {
    "none": "none",
    "launch": "host_launch_bound",
    "mux": "queue_multiplexing",
    "saturate": "device_saturated",
    "memory": "memory_pressure",
    "sync": "synchronisation",
    "race": "synchronisation",
    "copy": "copy_bound",
    "collective": "collective_bound",
}
COPY_WORKLOAD = "async_dataload"  # the catalogue's host→device copy pipeline (4..12 streams)
COLLECTIVE_WORKLOAD = "comms_compute_overlap"  # GEMM buckets all-reduced on a comms stream
RACE_WORKLOAD = "graph_subgraphs"  # fork/join: the join declares a wait on every branch
NAMED = [
    "none",
    "host_launch_bound",
    "queue_multiplexing",
    "device_saturated",
    "memory_pressure",
    "synchronisation",
    "copy_bound",
    "collective_bound",
    "other",
]
PASS_SHARE = 0.8  # ≥ 4 of 5 sweeps


def sweep_command(
    case: str, args: argparse.Namespace, out: str, seed: int
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) of one sweep with `case` injected."""
    copying, collective, race = case == "copy", case == "collective", case == "race"
    workload, streams = {
        "copy": (COPY_WORKLOAD, args.copy_streams),
        "collective": (COLLECTIVE_WORKLOAD, args.collective_streams),
        "race": (RACE_WORKLOAD, args.race_streams),
    }.get(case, (args.workload, args.streams))
    sweep = [
        "sweep",
        workload,
        "--streams",
        streams,
        "-d",
        "cpu",
        "-i",
        str(args.iterations),
        "-w",
        "2",
        "--size",
        args.size,
        "--repeats",
        str(args.repeats),
        "--seed",
        str(seed),
        "-o",
        out,
    ]
    module = [sys.executable, "-I", "-m", "aorta.hw_queue_eval"]
    env: dict[str, str] = {}
    if case == "launch":
        return [
            sys.executable,
            "-I",
            str(FAKES),
            "--points-host-delay-us",
            str(args.host_delay_us),
            "--",
            *sweep,
        ], env
    if copying:
        fake = ["--points-copy-delay-us", str(args.copy_delay_us)]
        return [sys.executable, "-I", str(FAKES), *fake, "--", *sweep], env
    if collective:
        fake = ["--points-collective-delay-us", str(args.collective_delay_us)]
        return [sys.executable, "-I", str(FAKES), *fake, "--", *sweep, "--nproc-per-node", "2"], env
    if case == "sync":
        return [sys.executable, "-I", str(FAKES), "--points-extra-waits", "1", "--", *sweep], env
    if race:
        return [sys.executable, "-I", str(FAKES), "--points-dropped-join-wait", "1", "--", *sweep], env
    if case == "mux":
        env["GPU_MAX_HW_QUEUES"] = "1"
    if case == "saturate":
        sweep += ["--cpus", "0"]
    if case == "memory":
        pressure = [
            sys.executable,
            "-I",
            "-m",
            "aorta.tools.memory_pressure",
            "--limit",
            args.memory_limit,
            "--",
        ]
        fresh = [str(FAKES), "--points-fresh-memory-kib", str(args.fresh_memory_kib), "--"]
        return [*pressure, sys.executable, "-I", *fresh, *sweep, "--ebpf-memory-trace"], env
    return [*module, *sweep], env


def first_named(diagnosis: dict[str, Any] | None) -> tuple[str, str | None, str]:
    """(cause named first or "none", its confidence, the diagnosis line)."""
    if not diagnosis:
        return "none", None, "no diagnosis (fewer than two points ok)"
    causes = diagnosis.get("causes") or []
    if not causes:
        return "none", None, diagnosis.get("text", "")
    top = causes[0]
    return top["cause"], top["confidence"], diagnosis.get("text", "")


def recovered(case: str, named: str, confidence: str | None) -> bool:
    """Whether one sweep recovered its injected cause."""
    if case == "none":
        return named == "none"
    return named == CASES[case] and confidence in ("high", "medium")


def _run_group(
    argv: list[str], env: dict[str, str], cwd: str, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run one sweep in its own process group; a timeout, Ctrl+C or a kill of this bench
    (SIGTERM) ends the whole group, so no sweep or torchrun rank is left behind."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run_case(case: str, args: argparse.Namespace, index: int, folder: str) -> dict[str, Any]:
    """One sweep of `case`: what it named, how long it took."""
    out = os.path.join(folder, f"{case}-{index}.json")
    argv, extra = sweep_command(case, args, out, 1234 + index)
    started = time.monotonic()
    proc = _run_group(argv, {**os.environ, **extra}, folder, timeout_s=1800)
    elapsed = time.monotonic() - started
    # exit 1 with the file written: the sweep ran and some point failed (a race's wrong output
    # fails verification): its diagnosis over the points that ran still counts
    if proc.returncode not in (0, 1) or not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {
            "case": case,
            "sweep": index,
            "named": "failed",
            "confidence": None,
            "error": tail[0],
            "s": elapsed,
        }
    with open(out) as fh:
        data = json.load(fh)
    diagnosis = (data.get("analysis") or {}).get("diagnosis")
    named, confidence, text = first_named(diagnosis)
    return {
        "case": case,
        "sweep": index,
        "named": named if named in NAMED else "other",
        "confidence": confidence,
        "text": text,
        "recovered": recovered(case, named, confidence),
        "causes": [[c["cause"], c["confidence"]] for c in (diagnosis or {}).get("causes") or []],
        "points_failed": sum(1 for p in data.get("points") or [] if p.get("status") != "ok"),
        "s": elapsed,
    }


def table(rows: list[dict[str, Any]], cases: list[str]) -> tuple[list[str], bool]:
    """The confusion table (injected × named first) as lines, and whether it passes."""
    columns = [*NAMED, "failed"]
    lines = ["injected \\ named first  " + "  ".join(f"{c[:18]:>18}" for c in columns) + "  recovered"]
    ok = True
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        counts = [sum(r["named"] == c for r in mine) for c in columns]
        hits = sum(bool(r.get("recovered")) for r in mine)
        need = len(mine) if case == "none" else math.ceil(PASS_SHARE * len(mine))
        ok = ok and hits >= need
        lines.append(
            f"{case + ' (' + CASES[case] + ')':<24}"
            + "  ".join(f"{n:>18}" for n in counts)
            + f"  {hits}/{len(mine)} (need {need})"
        )
    return lines, ok


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--workload", default="large_gemm_only")
    parser.add_argument("--size", default="small")
    parser.add_argument("--streams", default="1,2")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--host-delay-us", type=int, default=5000)
    parser.add_argument("--memory-limit", default="512M")
    parser.add_argument("--fresh-memory-kib", type=int, default=8192)
    parser.add_argument("--copy-streams", default="4,8")
    parser.add_argument("--copy-delay-us", type=int, default=3000)
    parser.add_argument("--collective-streams", default="2,4")
    parser.add_argument("--collective-delay-us", type=int, default=3000)
    parser.add_argument("--race-streams", default="4,8")
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", default=None, help="folder to keep the sweep files in (must exist)")
    args = parser.parse_args(argv)
    bad = [c for c in args.cases.split(",") if c not in CASES]
    if bad or args.sweeps < 1 or args.repeats < 1 or args.fresh_memory_kib < 4:
        what = (
            f"unknown case {bad[0]!r} (use {', '.join(CASES)})"
            if bad
            else "--sweeps/--repeats must be ≥ 1, --fresh-memory-kib ≥ 4"
        )
        print(f"error: {what}", file=sys.stderr)
        raise SystemExit(2)
    if args.keep and not os.path.isdir(args.keep):
        print(f"error: --keep {args.keep}: no such folder: create it first", file=sys.stderr)
        raise SystemExit(2)
    if "memory" in args.cases.split(",") and os.geteuid() != 0:
        print(
            "error: the memory case needs root (cgroup and eBPF): run as root or drop it from --cases",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ends the running sweep's group too
    cases = args.cases.split(",")
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="aorta-confusion-") as temp:
        folder = args.keep or temp
        for index in range(args.sweeps):  # rounds: every case once per round, drift hits all alike
            for case in cases:
                row = run_case(case, args, index, folder)
                rows.append(row)
                print(
                    f"sweep {index + 1} {case:<9} named {row['named']:<20} {row.get('confidence') or '':<7}"
                    f" {row['s']:5.0f} s  {row.get('text') or row.get('error', '')}"
                    + (f" [{row['points_failed']} point run(s) failed]" if row.get("points_failed") else ""),
                    flush=True,
                )
    lines, ok = table(rows, cases)
    print()
    print("\n".join(lines))
    elapsed = time.monotonic() - started
    print(
        f"\n{args.sweeps} sweep(s) per case, {args.repeats} run(s) per point, streams {args.streams}, "
        f"{args.workload} --size {args.size} -i {args.iterations}; {elapsed:.0f} s; 1-min load "
        f"{load:.2f} → {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {'PASS' if ok else 'FAIL'}"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "table": lines, "pass": ok, "elapsed_s": elapsed}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

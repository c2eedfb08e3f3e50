"""The gpu_runtime views part of bench/gpu_check.py: exact counts of graph launches, copies,
cross-stream waits and all-reduces on the real runtime torch loaded, and the cost per call.

_gpu_view_driver.py makes known numbers of calls (GRAPHS graph replays, COPIES host→device copies
of BYTES each, WAITS cross-stream waits, ALL_REDUCES all-reduces of BYTES each through a
world-size-1 NCCL/RCCL process group) on two streams whose handles it prints;
`ebpf-attach --pid DRIVER --ebpf-gpu-runtime` traces it from before the first call to its exit.
Printed, one JSON line each: per view what the driver made, what the family saw on those streams,
and equal or not (`gpu_runtime_views`); the ncclAllReduce calls and bytes on the producer stream
against ALL_REDUCES (`gpu_runtime_collectives`); and the cost per call (`gpu_runtime_view_cost`):
the driver's host time per call untraced (before attach) and traced, their difference, beside
what the result's probe_cost charges the window's calls of each kind. Two ranks under torchrun
(one GPU each) are not part of this script: the line says so. Needs what the eBPF points need
(root or `sudo -n`, bpftrace, bpf()): without them, or on the CPU, each line says why it did not
run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).resolve().with_name("_gpu_view_driver.py")
GRAPHS, COPIES, WAITS, BYTES, ALL_REDUCES = 40, 30, 20, 1 << 20, 25
# the result's probe_cost kinds each driver call pays for (a wait_stream is a record and a wait;
# a pinned host→device copy may record an event for the host allocator)
COST_KINDS = {
    "graph_launches": ("graph_launches",),
    "copies": ("copies",),
    "waits": ("event_records_and_waits",),
    "all_reduces": ("collectives", "collective_groups"),
}
ATTACH_TIMEOUT_S = 60.0


def seen_counts(metrics: dict[str, Any], producer: str, consumer: str) -> dict[str, Any]:
    """What the gpu_runtime family's metrics hold for the driver's two streams."""
    streams = {r.get("handle"): r for r in metrics.get("streams") or []}
    copies = [
        r for r in metrics.get("copies") or [] if r.get("stream") == producer and r.get("direction") == "H2D"
    ]
    edges = (metrics.get("stream_graph") or {}).get("edges") or []
    pair = [
        e.get("waits") or 0 for e in edges if (e.get("producer"), e.get("consumer")) == (producer, consumer)
    ]
    return {
        "graph_launches": (streams.get(producer) or {}).get("graph_launches"),
        "copies": sum(r.get("calls") or 0 for r in copies) if copies else None,
        "copy_bytes": sum(r.get("bytes") or 0 for r in copies) if copies else None,
        "waits": sum(pair) if edges else None,
    }


def expected_counts() -> dict[str, int]:
    """What the driver makes inside the window."""
    return {"graph_launches": GRAPHS, "copies": COPIES, "copy_bytes": COPIES * BYTES, "waits": WAITS}


def _attach(pid: int, path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "ebpf-attach",
            "--pid",
            str(pid),
            "--ebpf-gpu-runtime",
            "--duration",
            f"{int(ATTACH_TIMEOUT_S)}s",
            "-o",
            str(path),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def _wait_for_tracing(attach: subprocess.Popen[str]) -> str | None:
    """Read ebpf-attach's stderr until it says it is tracing; the reason when it never does."""
    assert attach.stderr is not None
    deadline = time.monotonic() + ATTACH_TIMEOUT_S
    lines = []
    while time.monotonic() < deadline:
        line = attach.stderr.readline()
        if not line:
            return "ebpf-attach ended before tracing: " + " ".join(lines[-2:])
        lines.append(line.strip())
        if line.startswith("tracing pid"):
            return None
    return "ebpf-attach did not start tracing in time"


def not_run(reason: str) -> list[dict[str, Any]]:
    """The three lines, each saying it did not run and why."""
    checks = ("gpu_runtime_views", "gpu_runtime_collectives", "gpu_runtime_view_cost")
    return [{"check": check, "ran": False, "reason": reason} for check in checks]


def run_view_points(device: str, out: Path, env: dict[str, str], ebpf: tuple[bool, str] = (True, "")) -> int:
    """Trace the driver, print one JSON line for the views, one for collectives and one for the
    cost per call; failures. `ebpf`: _gpu_ebpf_gate.py's verdict (without eBPF the lines say why)."""
    if not device.startswith("cuda"):
        for skipped in not_run(f"device {device}: needs a GPU (the driver's calls, NCCL's all-reduce)"):
            print(json.dumps(skipped))
        return 0
    if not ebpf[0]:
        for skipped in not_run(f"no eBPF here: {ebpf[1]}"):
            print(json.dumps(skipped))
        return 0
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), str(GRAPHS), str(COPIES), str(WAITS), str(BYTES), str(ALL_REDUCES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert driver.stdin is not None and driver.stdout is not None
    line: dict[str, Any] = {"check": "gpu_runtime_views", "ran": True, "expected": expected_counts()}
    path = out / "gpu_runtime_views.json"
    attach = None
    try:
        ready = json.loads(driver.stdout.readline() or "{}")
        if not ready.get("ready"):
            for failed in not_run("the driver did not set up (no CUDA/HIP device?)"):
                print(json.dumps(failed))
            return 1
        attach = _attach(ready["pid"], path, env)
        problem = _wait_for_tracing(attach)
        if problem:
            for failed in not_run(problem):
                print(json.dumps(failed))
            return 1
        driver.stdin.write("go\n")
        driver.stdin.flush()
        done = json.loads(driver.stdout.readline() or "{}")
        line["driver"] = {k: v for k, v in done.items() if k != "timing_us"}
        driver.wait(timeout=ATTACH_TIMEOUT_S)
        attach.wait(timeout=ATTACH_TIMEOUT_S + 30)
    finally:
        for proc in (driver, attach):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    if not path.exists():
        for failed in not_run(f"ebpf-attach wrote no result (exit {attach.returncode})"):
            print(json.dumps(failed))
        return 1
    data = json.loads(path.read_text())
    family = ((data.get("ebpf_queue_metrics") or {}).get("families") or {}).get("gpu_runtime") or {}
    metrics = family.get("metrics") or {}
    line["seen"] = seen_counts(metrics, ready["producer"], ready["consumer"])
    line["exact"] = line["seen"] == line["expected"]
    print(json.dumps(line))
    colls = collectives_line(ready.get("all_reduce") or {}, metrics, ready["producer"])
    print(json.dumps(colls))
    print(json.dumps(cost_line(done.get("timing_us") or {}, metrics)))
    return 0 if line["exact"] and colls.get("exact") is not False else 1


def seen_collectives(metrics: dict[str, Any], producer: str) -> dict[str, Any]:
    """ncclAllReduce calls and bytes the family saw on the producer stream, and on other streams
    (where c10d's internal stream would put them); null when collectives were not probed."""
    rows = metrics.get("collectives")
    if rows is None:
        return {"all_reduces": None, "bytes": None, "all_reduces_other_streams": None}
    mine = [r for r in rows if r.get("op") == "ncclAllReduce" and r.get("stream") == producer]
    other = [r for r in rows if r.get("op") == "ncclAllReduce" and r.get("stream") != producer]
    known = all(r.get("bytes") is not None for r in mine)
    return {
        "all_reduces": sum(r.get("calls") or 0 for r in mine),
        "bytes": sum(r["bytes"] for r in mine) if known else None,
        "all_reduces_other_streams": sum(r.get("calls") or 0 for r in other),
    }


def expected_collectives(bytes_per_call: int) -> dict[str, int]:
    """What the driver's all-reduces must show on the producer stream."""
    return {"all_reduces": ALL_REDUCES, "bytes": ALL_REDUCES * bytes_per_call, "all_reduces_other_streams": 0}


def two_ranks_note() -> dict[str, Any]:
    """Why two torchrun ranks are not checked (NCCL needs one GPU per rank, and this script
    traces one driver process)."""
    import torch

    gpus = torch.cuda.device_count()
    why = (
        "not part of this script (it traces one driver process by pid)"
        if gpus >= 2
        else "NCCL needs one GPU per rank"
    )
    return {"ran": False, "reason": f"{gpus} GPU(s): an all-reduce under torchrun with 2 ranks: {why}"}


def collectives_line(state: dict[str, Any], metrics: dict[str, Any], producer: str) -> dict[str, Any]:
    """The all-reduce check: ALL_REDUCES ncclAllReduce calls of the right bytes on the producer
    stream, through the driver's world-size-1 process group (its reason when it could not set up)."""
    line: dict[str, Any] = {"check": "gpu_runtime_collectives", "two_ranks": two_ranks_note()}
    if not state.get("ran"):
        reason = state.get("reason") or "the driver reported no process group"
        return {**line, "ran": False, "reason": f"no world-size-1 NCCL/RCCL process group: {reason}"}
    expected = expected_collectives(int(state["bytes_per_call"]))
    seen = seen_collectives(metrics, producer)
    return {
        **line,
        "ran": True,
        "process_group": f"{state.get('backend')}, world size {state.get('world_size')} (FileStore)",
        "expected": expected,
        "seen": seen,
        "exact": seen == expected,
    }


def cost_line(timing: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """Per kind of driver call: host µs per call untraced and traced, the difference (the measured
    cost), and what the result's probe_cost charges the window's calls of that kind per driver
    call (`reported_us`); the totals over every kind and their ratio. Null where unmeasured."""
    untraced, traced = timing.get("untraced") or {}, timing.get("traced") or {}
    by_kind = (metrics.get("probe_cost") or {}).get("by_kind") or {}
    counts = {"graph_launches": GRAPHS, "copies": COPIES, "waits": WAITS, "all_reduces": ALL_REDUCES}
    kinds: dict[str, Any] = {}
    measured_total: float | None = 0.0
    reported_total: float | None = 0.0
    for kind, calls in counts.items():
        plain, slow = untraced.get(kind), traced.get(kind)
        added = slow - plain if plain is not None and slow is not None else None
        charged = [(by_kind.get(k) or {}).get("probe_time_ms") for k in COST_KINDS[kind]]
        known = [c for c in charged if c is not None]
        reported = sum(known) * 1e3 / calls if known and plain is not None else None
        kinds[kind] = {"untraced_us": plain, "traced_us": slow, "added_us": added, "reported_us": reported}
        if plain is None:  # not run (no process group): left out of the totals
            continue
        measured_total = None if added is None or measured_total is None else measured_total + added * calls
        reported_total = (
            None if reported is None or reported_total is None else reported_total + reported * calls
        )
    ratio = reported_total / measured_total if reported_total is not None and measured_total else None
    return {
        "check": "gpu_runtime_view_cost",
        "ran": bool(untraced),
        "per_call": kinds,
        "measured_added_ms": measured_total / 1e3 if measured_total is not None else None,
        "reported_ms": reported_total / 1e3 if reported_total is not None else None,
        "reported_over_measured": ratio,
        "per_launch_us": (metrics.get("probe_cost") or {}).get("per_launch_us"),
        "note": "one untraced and one traced round of each kind (noisy at these counts); reported = the "
        "probe time probe_cost charges the window's calls of that kind, per driver call",
    }

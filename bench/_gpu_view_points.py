"""The gpu_runtime views part of bench/gpu_check.py: exact counts of graph launches, copies and
cross-stream waits on the real runtime torch loaded, and whether an all-reduce can be seen.

_gpu_view_driver.py makes known numbers of calls (GRAPHS graph replays, COPIES host→device copies
of BYTES each, WAITS cross-stream waits) on two streams whose handles it prints;
`ebpf-attach --pid DRIVER --ebpf-gpu-runtime` traces it from before the first call to its exit.
Printed: per view what the driver made, what the family saw on those streams, and equal or not.
An all-reduce under torchrun needs one GPU per NCCL rank (NCCL refuses two ranks on one device):
with fewer than 2 GPUs a line says it did not run. Needs what the eBPF points need (root or
`sudo -n`, bpftrace, bpf()): gpu_check runs it after _gpu_ebpf_gate.py said yes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).resolve().with_name("_gpu_view_driver.py")
GRAPHS, COPIES, WAITS, BYTES = 40, 30, 20, 1 << 20
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


def run_view_points(device: str, out: Path, env: dict[str, str]) -> int:
    """Trace the driver, print one JSON line for the views and one for collectives; failures."""
    if not device.startswith("cuda"):
        print(
            json.dumps(
                {"check": "gpu_runtime_views", "ran": False, "reason": f"device {device}: needs a GPU"}
            )
        )
        return 0
    driver = subprocess.Popen(
        [sys.executable, str(DRIVER), str(GRAPHS), str(COPIES), str(WAITS), str(BYTES)],
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
            line.update(ran=False, reason="the driver did not set up (no CUDA/HIP device?)")
            print(json.dumps(line))
            return 1
        attach = _attach(ready["pid"], path, env)
        problem = _wait_for_tracing(attach)
        if problem:
            line.update(ran=False, reason=problem)
            print(json.dumps(line))
            return 1
        driver.stdin.write("go\n")
        driver.stdin.flush()
        line["driver"] = json.loads(driver.stdout.readline() or "{}")
        driver.wait(timeout=ATTACH_TIMEOUT_S)
        attach.wait(timeout=ATTACH_TIMEOUT_S + 30)
    finally:
        for proc in (driver, attach):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    if not path.exists():
        line.update(ran=False, reason=f"ebpf-attach wrote no result (exit {attach.returncode})")
        print(json.dumps(line))
        return 1
    data = json.loads(path.read_text())
    family = ((data.get("ebpf_queue_metrics") or {}).get("families") or {}).get("gpu_runtime") or {}
    line["seen"] = seen_counts(family.get("metrics") or {}, ready["producer"], ready["consumer"])
    line["exact"] = line["seen"] == line["expected"]
    print(json.dumps(line))
    print(json.dumps(collectives_line()))
    return 0 if line["exact"] else 1


def collectives_line() -> dict[str, Any]:
    """Whether the all-reduce check can run here (NCCL needs a GPU per rank)."""
    import torch

    gpus = torch.cuda.device_count()
    why = "not part of this script yet" if gpus >= 2 else "NCCL needs one GPU per rank"
    return {
        "check": "gpu_runtime_collectives",
        "ran": False,
        "reason": f"{gpus} GPU(s): an all-reduce under torchrun with 2 ranks: {why}",
    }

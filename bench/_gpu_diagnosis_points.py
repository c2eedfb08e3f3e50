"""The diagnosis part of bench/gpu_check.py: issue 25's multiplexing and launch-bound cases on a GPU.

Two sweeps of tiny_kernel_stress (tiny kernels: host launch-bound on a GPU by construction) over
1, 4, 16 streams with --repeats 3, each point a fresh process:

- unmodified: the runtime's own hardware-queue count;
- mux: the runtime limited to one hardware queue (GPU_MAX_HW_QUEUES=1 for HIP,
  CUDA_DEVICE_MAX_CONNECTIONS=1 for CUDA; both set, each runtime reads its own), so every stream
  shares one queue.

Printed per sweep: the knee, the causes named (cause, confidence) and every cause not measured
with its reason: what the diagnosis can see on this machine's GPU backend. Not a pass/fail check
of the causes (on the GPU backend host on-CPU and queue waits are partly unmeasured, and says so);
a sweep that fails counts as failed. `--quick` (the CPU dry run): 1, 2 streams, 2 repeats.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WORKLOAD = "tiny_kernel_stress"
ONE_QUEUE = {"GPU_MAX_HW_QUEUES": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
CASES = {"unmodified": {}, "mux": ONE_QUEUE}


def summarize(case: str, data: dict[str, Any]) -> dict[str, Any]:
    """One line per sweep: knee, causes named, causes not measured (with why)."""
    analysis = data.get("analysis") or {}
    diagnosis = analysis.get("diagnosis") or {}
    checked = diagnosis.get("checked") or []
    return {
        "check": "diagnosis",
        "case": case,
        "streams": sorted({(p.get("key") or {}).get("streams") for p in data.get("points") or []} - {None}),
        "knee_streams": analysis.get("knee_streams"),
        "scaling_confidence": analysis.get("confidence"),
        "named": [[c.get("cause"), c.get("confidence")] for c in diagnosis.get("causes") or []],
        "text": diagnosis.get("text"),
        "not_measured": {c["cause"]: c.get("reason") for c in checked if c.get("status") == "not_measured"},
    }


def run_diagnosis_points(device: str, iterations: str, quick: bool, out: Path, env: dict[str, str]) -> int:
    """Run both sweeps (children get `env` plus the case's), print one JSON line each; failures."""
    streams, repeats = ("1,2", "2") if quick else ("1,4,16", "3")
    failed = 0
    for case, extra in CASES.items():
        path = out / f"diagnosis_{case}.json"
        command = [sys.executable, "-m", "aorta.hw_queue_eval", "sweep", WORKLOAD, "--streams", streams]
        command += ["-d", device, "-i", iterations, "--repeats", repeats, "-o", str(path)]
        proc = subprocess.run(command, capture_output=True, text=True, env={**env, **extra}, check=False)
        if proc.returncode != 0 or not path.exists():
            failed += 1
            error = proc.stderr.strip().splitlines()[-3:]
            print(json.dumps({"check": "diagnosis", "case": case, "status": "failed", "error": error}))
            continue
        print(json.dumps({**summarize(case, json.loads(path.read_text())), "status": "ok"}))
    return failed

"""GPU check for policies: policy-sweep (baseline vs an env policy), then a power-limit apply/restore.

Meant for one short session on a machine with a GPU. Step 1 runs `policy-sweep hetero_kernels`
with baseline and high_queue on the GPU backend and prints each policy's figures and settings in
effect. Step 2, only as root with NVIDIA's pynvml (or AMD's rocm-smi) present, runs `run
--power-limit` 50 W below the current cap and checks, independently through NVML when importable,
that the cap was applied during the run and is back to its prior value afterwards. Prints JSON lines;
exits non-zero if a step failed. Usage: python bench/policy_gpu_check.py [--device cuda:0] [--out DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _gpu_check_args import parse_check_args


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aorta.hw_queue_eval", *args], capture_output=True, text=True, check=False
    )


def _nvml_cap(index: int) -> float | None:
    """The power cap in W read straight from NVML (None without pynvml)."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetPowerManagementLimit(pynvml.nvmlDeviceGetHandleByIndex(index)) / 1e3


def policy_step(device: str, out: Path, iterations: str) -> bool:
    path = out / "policies.json"
    proc = _cli(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "8",
        "--policies",
        "baseline,high_queue",
        "-d",
        device,
        "-i",
        iterations,
        "-o",
        str(path),
    )
    if not path.exists():
        print(
            json.dumps(
                {"step": "policy-sweep", "status": "failed", "error": proc.stderr.strip().splitlines()[-1:]}
            )
        )
        return False
    for row in json.loads(path.read_text())["summary"]["rows"]:
        lat = row.get("latency_ms") or {}
        vs = row.get("vs_baseline") or {}
        print(
            json.dumps(
                {
                    "step": "policy-sweep",
                    "policy": row["policy"],
                    "status": row.get("status"),
                    "throughput": row.get("throughput"),
                    "unit": row.get("throughput_unit"),
                    "p50_ms": lat.get("p50"),
                    "p99_ms": lat.get("p99"),
                    "delta_latency": (vs.get("latency") or {}).get("change_pct"),
                    "verdict": (vs.get("latency") or {}).get("verdict"),
                    "in_effect": row.get("in_effect"),
                }
            )
        )
    return proc.returncode == 0


def power_step(device: str, out: Path) -> bool:
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    before = _nvml_cap(index)
    if os.geteuid() != 0 or before is None:
        print(
            json.dumps(
                {"step": "power-limit", "status": "skipped", "reason": "needs root and pynvml (NVIDIA)"}
            )
        )
        return True
    target = max(round(before - 50), 100)
    path = out / "power.json"
    proc = _cli(
        "run",
        "hetero_kernels",
        "--streams",
        "8",
        "-d",
        device,
        "-i",
        "20",
        "--power-limit",
        str(target),
        "-o",
        str(path),
    )
    after = _nvml_cap(index)
    report = json.loads(path.read_text()).get("gpu_control") if path.exists() else None
    ok = (
        proc.returncode == 0
        and report is not None
        and report.get("verified") is True
        and after is not None
        and abs(after - before) <= 1.0
    )
    print(
        json.dumps(
            {
                "step": "power-limit",
                "status": "ok" if ok else "failed",
                "cap_before_w": before,
                "requested_w": target,
                "in_effect": (report or {}).get("in_effect"),
                "status_after": (report or {}).get("status"),
                "cap_after_w": after,
                "error": None if ok else proc.stderr.strip().splitlines()[-2:],
            }
        )
    )
    return ok


def main() -> int:
    args, out = parse_check_args(__doc__.splitlines()[0], "aorta-policy-check-")
    ok = policy_step(args.device, out, args.iterations)
    ok = power_step(args.device, out) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

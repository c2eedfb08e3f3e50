"""The bounded-memory part of bench/gpu_check.py: GPU windows with more ops than rows.

tiny_kernel_stress, 16 streams, large preset (16 × 128 = 2,048 ops per iteration) for N and 3N
iterations (N = 120: 245,760 ops, past the 200,000-row cap) in per_iteration mode, and N in
end_only mode with op timing, each in a fresh process (`python -I`). The child watches every
`fold_pending` and prints: the most op event objects held (`max_live_events`: the first read,
once the window passes the cap, takes the 200,000 ops held until then; and after it), the most
ops left pending after a read (`max_pending_after_read`), the most op records held in host memory, peak
RSS, the op count the result reports (must be iterations × 2,048) and how its figures were made
(`ops.statistics`), and `op_fold_ms` (host time spent reading events and folding, inside the
window) beside the window. Pass: exact op count, folded, never more events than the cap's ops
(+ a chunk + an iteration), after the first read far fewer than the window's ops, not growing
with the run (3N holds at most 1.5 × N's + one chunk);
per_iteration: nothing pending after a read, and from the first read on at most one chunk + one
iteration of ops held as events (all complete after each host wait).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

OPS_PER_ITERATION = 16 * 128
ITERATIONS = 120

_CHILD = textwrap.dedent("""
    import json, os, resource, sys
    sys.path[:0] = sys.argv.pop(1).split(os.pathsep)  # -I ignores PYTHONPATH: the parent's folders
    from aorta.hw_queue_eval.backends import gpu
    from aorta.hw_queue_eval.run import harness
    from aorta.hw_queue_eval.config.run_config import RunConfig

    device, mode, iterations = sys.argv[1], sys.argv[2], int(sys.argv[3])
    seen = {"max_live_events": 0, "max_live_events_after_first_read": 0, "max_pending_after_read": 0,
            "max_held_op_records": 0, "folds": 0, "reads": 0}
    fold_pending = gpu.GpuBackend.fold_pending

    def watched(self):
        live, before = self.live_events(), self.pending_ops
        seen["max_live_events"] = max(seen["max_live_events"], live)
        if seen["reads"]:
            seen["max_live_events_after_first_read"] = max(seen["max_live_events_after_first_read"], live)
        seen["max_held_op_records"] = max(seen["max_held_op_records"], self.held_op_records())
        fold_pending(self)
        seen["folds"] += 1
        if self.pending_ops < before:  # ops were read
            seen["reads"] += 1
            seen["max_pending_after_read"] = max(seen["max_pending_after_read"], self.pending_ops)

    gpu.GpuBackend.fold_pending = watched
    config = RunConfig(workload="tiny_kernel_stress", streams=16, iterations=iterations, warmup=2,
                       device=device, size="large", sync_mode=mode)
    result = harness.run_benchmark(config).to_dict()
    inst = result["instrumentation"]
    print(json.dumps({
        **seen,
        "ops": result["ops"]["count"],
        "rows": len(result["op_intervals"]["rows"]),
        "statistics_source": result["ops"]["statistics"]["source"],
        "percentile_relative_error": result["ops"]["statistics"]["percentile_relative_error"],
        "switch_count": result["switch_latency"]["switch_count"],
        "op_fold_ms": inst["op_fold_ms"],
        "window_ms": inst["instrumented_window_ms"],
        "plain_window_ms": inst["plain_window_ms"],
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "status": result["status"],
    }))
""")


def _point(device: str, mode: str, iterations: int, paths: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _CHILD, os.pathsep.join(paths), device, mode, str(iterations)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=False,
    )
    if proc.returncode != 0:
        return {"status": "failed", "error": proc.stderr.strip().splitlines()[-3:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_memory_points(device: str, paths: list[str], env: dict[str, str]) -> int:
    """Print one JSON line per window and one verdict line; the number of failed checks.

    The children import from `paths` (the carried tree, the installed wheels) with `env`. The CPU
    backend holds no op events (nothing to bound): on `cpu` one line says the points were skipped.
    """
    if device.startswith("cpu"):
        reason = "the CPU backend holds no GPU op events: the bounded-memory points need a GPU"
        print(json.dumps({"check": "bounded_memory", "ran": False, "reason": reason}))
        return 0
    from aorta.hw_queue_eval.ops.opfold import CHUNK_OPS
    from aorta.hw_queue_eval.run.harness import MAX_STORED_OPS

    points = {}
    failed = 0
    for mode, iterations in (
        ("per_iteration", ITERATIONS),
        ("per_iteration", 3 * ITERATIONS),
        ("end_only", ITERATIONS),
    ):
        point = _point(device, mode, iterations, paths, env)
        expected = iterations * OPS_PER_ITERATION
        ok = (
            point.get("status") == "ok"
            and point["ops"] == expected
            and point["percentile_relative_error"] > 0  # folded: more ops than rows
            and point["max_live_events"]
            <= 2 * (MAX_STORED_OPS + CHUNK_OPS + OPS_PER_ITERATION) + 2 * 1024 + 2
            and point["max_live_events_after_first_read"] < expected / 4  # not every op's events
        )
        if ok and mode == "per_iteration":  # after each host wait every op is complete: none
            # pending after a read; from the first read on, at most a chunk + an iteration
            # pending (2 events each) and ≤ 1,024 iterations' event pairs
            ok = (
                point["reads"] > 0
                and point["max_pending_after_read"] == 0
                and point["max_live_events_after_first_read"]
                <= 2 * (CHUNK_OPS + OPS_PER_ITERATION) + 2 * 1024 + 2
            )
        failed += not ok
        points[(mode, iterations)] = point
        print(
            json.dumps(
                {
                    "check": "bounded_memory",
                    "mode": mode,
                    "iterations": iterations,
                    "expected_ops": expected,
                    "ok": ok,
                    **point,
                }
            )
        )
    short, long = points[("per_iteration", ITERATIONS)], points[("per_iteration", 3 * ITERATIONS)]
    if "max_live_events" in short and "max_live_events" in long:
        flat = all(
            long[key] <= 1.5 * short[key] + 2 * CHUNK_OPS
            for key in ("max_live_events", "max_live_events_after_first_read")
        )
        ratio = long["max_live_events"] / max(short["max_live_events"], 1)
        rss = long["maxrss_mib"] - short["maxrss_mib"]
    else:
        flat, ratio, rss = False, None, None
    failed += not flat
    print(
        json.dumps(
            {
                "check": "bounded_memory_flat",
                "ok": flat,
                "live_events_3N_over_N": ratio,
                "maxrss_growth_mib_3N_minus_N": rss,
            }
        )
    )
    return failed

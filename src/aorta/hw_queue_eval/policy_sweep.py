"""Policy sweep: each policy's point in a fresh child run, the settings in effect read back.

A point's env reaches the child before any runtime starts (childrun); clock/power are changed by
this (parent) process around the child and restored after it (gpu_control). What a point
records as `in_effect` comes from read-backs — the child's own view of its environment, the queue
pool its backend built, the clock/power read after applying — never from the request.
No torch import here.
"""

from __future__ import annotations

import contextlib
import random
import statistics
from collections.abc import Sequence
from typing import Any

from aorta.hw_queue_eval import metrics
from aorta.hw_queue_eval.childrun import run_point
from aorta.hw_queue_eval.compare import point_from_result, pool_repeats, throughput_samples
from aorta.hw_queue_eval.config import RunConfig
from aorta.hw_queue_eval.gpu_control import CPU_NOT_APPLICABLE, GpuControl, GpuRequest, GpuTarget
from aorta.hw_queue_eval.policies import Policy
from aorta.hw_queue_eval.stats import compare_samples

KIND = "policy-sweep"
BASELINE = "baseline"
THRESHOLD_PCT = 5.0  # compare's default


def schedule(policies: Sequence[Policy], repeats: int, seed: int) -> list[list[str]]:
    """Policy order per repeat: as listed for one repeat, else shuffled (seeded) every repeat."""
    names = [p.name for p in policies]
    if repeats == 1:
        return [names]
    rng = random.Random(seed)
    rounds = []
    for _ in range(repeats):
        order = list(names)
        rng.shuffle(order)
        rounds.append(order)
    return rounds


def child_run_args(config: RunConfig, flags: Sequence[str] = ()) -> list[str]:
    """`run` arguments that reproduce `config` (plus on/off `flags`) in a child process."""
    args = [config.workload, "--streams", str(config.streams), "-i", str(config.iterations),
            "-w", str(config.warmup), "-d", config.device, "--sync-mode", config.sync_mode,
            "--seed", str(config.seed), "--threads-per-queue", str(config.threads_per_queue)]
    if config.size:
        args += ["--size", config.size]
    return [*args, *flags]


def point_request(policy: Policy, base: GpuRequest) -> GpuRequest:
    """The clock/power to apply for a policy: its own settings over the command-line ones."""
    return GpuRequest(
        clock_level=policy.clock_level if policy.clock_level is not None else base.clock_level,
        power_limit_w=(policy.power_limit_w if policy.power_limit_w is not None
                       else base.power_limit_w))


def in_effect(policy: Policy, result: dict[str, Any] | None,
              gpu_report: dict[str, Any] | None) -> dict[str, Any]:
    """Settings as read back: env seen by the child, queue pool built, clock/power read."""
    environment = (result or {}).get("environment") or {}
    env_seen = {**(environment.get("env_knobs") or {}), **(environment.get("runtime_env") or {})}
    names = sorted(set(policy.env) | {"GPU_MAX_HW_QUEUES"})
    mismatch = sorted(n for n, v in policy.env.items() if env_seen.get(n) != v)
    qmap = (result or {}).get("queue_mapping") or {}
    effect: dict[str, Any] = {
        "env": {n: env_seen.get(n) for n in names} if result else None,
        "env_as_requested": (not mismatch) if result else None,
        "env_mismatch": mismatch if result else None,
        "queue_pool_size": qmap.get("pool_size"),
        "queue_pool_note": qmap.get("reason") or qmap.get("source"),
    }
    if gpu_report is None:
        effect.update({"clock_level": None, "clock_mhz": None, "power_limit_w": None,
                       "gpu_note": "clocks and power not changed: left as found (not read)"})
    else:
        got = gpu_report.get("in_effect") or {}
        effect.update({"clock_level": got.get("clock_level"), "clock_mhz": got.get("clock_mhz"),
                       "power_limit_w": got.get("power_limit_w"),
                       "gpu_verified": gpu_report.get("verified"),
                       "gpu_tool": gpu_report.get("tool"),
                       "gpu_device": gpu_report.get("device"),
                       "gpu_status_after": gpu_report.get("status")})
    return effect


def run_policy_point(policy: Policy, repeat: int, config: RunConfig, base: GpuRequest,
                     target: GpuTarget | None, timeout_s: float | None,
                     flags: Sequence[str] = (),
                     nproc_per_node: int | None = None) -> dict[str, Any]:
    """One policy once: apply clock/power (if any), run the child with the env, restore."""
    key = {"workload": config.workload, "streams": config.streams, "policy": policy.name,
           "repeat": repeat}
    request = point_request(policy, base)
    point: dict[str, Any] = {"key": key, "policy": policy.to_dict(), "request": request.to_dict()}
    if not request.empty and target is None:
        point.update({"status": "not_applicable", "error": CPU_NOT_APPLICABLE, "result": None,
                      "duration_s": 0.0, "returncode": None, "gpu_control": None,
                      "in_effect": None})
        return point
    control: Any = contextlib.nullcontext(None)
    if not request.empty:
        assert target is not None
        control = GpuControl(target, request)
    with control as gpu_report:
        outcome = run_point(child_run_args(config, flags), env_overrides=dict(policy.env),
                            timeout_s=timeout_s, nproc_per_node=nproc_per_node)
    point.update(outcome.to_dict())
    point.update({"result": outcome.result, "gpu_control": gpu_report,
                  "in_effect": in_effect(policy, outcome.result, gpu_report)})
    return point


def _median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def _policy_row(name: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [p for p in points if p.get("status") == "ok" and p.get("result")]
    na = [p for p in points if p.get("status") == "not_applicable"]
    failed = [p for p in points if p.get("status") not in ("ok", "not_applicable")]
    row: dict[str, Any] = {"policy": name, "points": len(points), "ok": len(ok)}
    if na and not ok:
        row.update({"status": "not_applicable", "reason": na[0]["error"]})
        return row
    if not ok:
        row.update({"status": "failed",
                    "reason": failed[0].get("error") if failed else "no point ran"})
        return row
    results = [p["result"] for p in ok]
    latencies = [t for r in results for t in (r.get("iteration_times_ms") or [])]
    pools = sorted({p["in_effect"]["queue_pool_size"] for p in ok
                    if p["in_effect"]["queue_pool_size"] is not None})
    effect = dict(ok[0]["in_effect"])
    if len(pools) > 1:
        effect["queue_pool_size"] = None
        effect["queue_pool_note"] = f"differed between repeats: {pools}"
    row.update({
        "status": "ok" if not failed else "partial",
        "reason": failed[0].get("error") if failed else None,
        "throughput_unit": results[0].get("throughput_unit"),
        "throughput_per_repeat": [r.get("throughput") for r in results],
        "throughput": _median([r.get("throughput") for r in results]),
        "latency_ms": metrics.summarize(latencies),
        "switch_overhead_ms": _median([(r.get("switch_latency") or {}).get("switch_overhead_ms")
                                       for r in results]),
        "concurrency": _median([(r.get("concurrency") or {}).get("achieved") for r in results]),
        "in_effect": effect,
    })
    return row


def summarize(points: list[dict[str, Any]], policies: Sequence[Policy]) -> dict[str, Any]:
    """Per-policy rows (aggregated over repeats), deltas vs baseline, best lines."""
    rows = [_policy_row(p.name, [pt for pt in points if pt["key"]["policy"] == p.name])
            for p in policies]
    # compare's own view of each policy: repeats pooled into one point (compare.pool_repeats)
    pooled = {}
    for row in rows:
        ok = [pt for pt in points if pt["key"]["policy"] == row["policy"]
              and pt.get("status") == "ok" and pt.get("result")]
        if ok:
            pooled[row["policy"]] = pool_repeats([point_from_result(pt["result"], pt["key"])
                                                  for pt in ok])[0]
    base = pooled.get(BASELINE)
    for row in rows:
        test = pooled.get(row["policy"])
        if test is None or row["policy"] == BASELINE:
            row["vs_baseline"] = None
            continue
        if base is None:
            row["vs_baseline"] = {"reason": "no baseline policy ran ok in this sweep"}
            continue
        b_tp, t_tp = throughput_samples(base), throughput_samples(test)
        row["vs_baseline"] = {
            "latency": compare_samples(base.iteration_ms, test.iteration_ms, THRESHOLD_PCT,
                                       higher_is_better=False).to_dict()
            if base.iteration_ms and test.iteration_ms else None,
            "throughput": compare_samples(b_tp, t_tp, THRESHOLD_PCT,
                                          higher_is_better=True).to_dict()
            if b_tp and t_tp else None,
        }
    measured = [r for r in rows if r.get("throughput") is not None]
    with_p99 = [r for r in measured if r.get("latency_ms")]
    best_tput = max(measured, key=lambda r: r["throughput"], default=None)
    best_p99 = min(with_p99, key=lambda r: r["latency_ms"]["p99"], default=None)
    pools = {r["policy"]: r["in_effect"]["queue_pool_size"] for r in measured}
    return {
        "rows": rows,
        "best_throughput": None if best_tput is None else
        {"policy": best_tput["policy"], "throughput": best_tput["throughput"],
         "unit": best_tput["throughput_unit"]},
        "best_p99": None if best_p99 is None else
        {"policy": best_p99["policy"], "p99_ms": best_p99["latency_ms"]["p99"]},
        "queue_pools": pools,
        "queue_pool_changed": len({v for v in pools.values() if v is not None}) > 1,
        "verdict_rule": (f"as `compare`: Mann–Whitney U on per-iteration times and per-iteration "
                         f"throughput, all repeats pooled; |change| ≥ {THRESHOLD_PCT:g}% and "
                         "p < 0.05 for better/worse"),
    }

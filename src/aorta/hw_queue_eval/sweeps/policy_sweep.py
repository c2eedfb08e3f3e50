"""Policy sweep: each policy's point in a fresh child run, the settings in effect read back.

A point's env reaches the child before any runtime starts (childrun); clock/power are changed by
this (parent) process around the child and restored after it (gpu_control). What a point
records as `in_effect` comes from read-backs — the child's own view of its environment, the queue
pool its backend built, the clock/power read after applying — never from the request.
`run_policy_sweep` walks the schedule (every policy once per round, rounds shuffled), one child
per point, the checkpoint (`checkpoint.CheckpointFile`, kind "policy-sweep") rewritten after
every point, as `stream_sweep.run_sweep` does for stream counts. No torch import here.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aorta.common.interrupts import commit
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.exact_u import ALPHA, MIN_RUNS_TO_DETECT
from aorta.hw_queue_eval.analysis.stats import MIN_RUNS, compare_runs, median_ci
from aorta.hw_queue_eval.analysis.summaries import run_summary
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.gpu.control import CPU_NOT_APPLICABLE, GpuControl, GpuRequest, GpuTarget
from aorta.hw_queue_eval.gpu.drivers.base import GpuDriver
from aorta.hw_queue_eval.gpu.policies import Policy, cpu_ignored_env, not_applicable_reason
from aorta.hw_queue_eval.run.cpupin import format_cpu_list
from aorta.hw_queue_eval.sweeps.checkpoint import CheckpointFile, fingerprint, open_or_resume
from aorta.hw_queue_eval.sweeps.childrun import run_point
from aorta.hw_queue_eval.sweeps.repeats import conditions, interleaved_schedule

KIND = "policy-sweep"
BASELINE = "baseline"
THRESHOLD_PCT = 5.0  # compare's default


def schedule(policies: Sequence[Policy], repeats: int, seed: int) -> list[list[str]]:
    """Policy order per repeat: as listed for one repeat, else shuffled (seeded) every repeat."""
    return interleaved_schedule([p.name for p in policies], repeats, seed)


def child_run_args(config: RunConfig, flags: Sequence[str] = ()) -> list[str]:
    """`run` arguments that reproduce `config` (plus on/off `flags`) in a child process."""
    args = [
        config.workload,
        "--streams",
        str(config.streams),
        "-i",
        str(config.iterations),
        "-w",
        str(config.warmup),
        "-d",
        config.device,
        "--sync-mode",
        config.sync_mode,
        "--seed",
        str(config.seed),
        "--threads-per-queue",
        str(config.threads_per_queue),
    ]
    if config.size:
        args += ["--size", config.size]
    if config.cpus:
        args += ["--cpus", format_cpu_list(config.cpus)]
    return [*args, *flags]


def point_request(policy: Policy, base: GpuRequest) -> GpuRequest:
    """The clock/power to apply for a policy: its own settings over the command-line ones."""
    return GpuRequest(
        clock_level=policy.clock_level if policy.clock_level is not None else base.clock_level,
        power_limit_w=(policy.power_limit_w if policy.power_limit_w is not None else base.power_limit_w),
    )


def in_effect(policy: Policy, result: JsonObject | None, gpu_report: JsonObject | None) -> JsonObject:
    """Settings as read back: env seen by the child, queue pool built, clock/power read."""
    environment = (result or {}).get("environment") or {}
    env_seen = {**(environment.get("env_knobs") or {}), **(environment.get("runtime_env") or {})}
    names = sorted(set(policy.env) | {"GPU_MAX_HW_QUEUES"})
    mismatch = sorted(n for n, v in policy.env.items() if env_seen.get(n) != v)
    qmap = (result or {}).get("queue_mapping") or {}
    effect: JsonObject = {
        "env": {n: env_seen.get(n) for n in names} if result else None,
        "env_as_requested": (not mismatch) if result else None,
        "env_mismatch": mismatch if result else None,
        "queue_pool_size": qmap.get("pool_size"),
        "queue_pool_note": qmap.get("reason") or qmap.get("source"),
        "stream_priority": qmap.get("stream_priority") if result else None,
    }
    if gpu_report is None:
        effect.update(
            {
                "clock_level": None,
                "clock_mhz": None,
                "power_limit_w": None,
                "gpu_note": "clocks and power not changed: left as found (not read)",
            }
        )
    else:
        got = gpu_report.get("in_effect") or {}
        effect.update(
            {
                "clock_level": got.get("clock_level"),
                "clock_mhz": got.get("clock_mhz"),
                "power_limit_w": got.get("power_limit_w"),
                "gpu_verified": gpu_report.get("verified"),
                "gpu_tool": gpu_report.get("tool"),
                "gpu_device": gpu_report.get("device"),
                "gpu_status_after": gpu_report.get("status"),
            }
        )
    return effect


def run_policy_point(
    policy: Policy,
    repeat: int,
    config: RunConfig,
    base: GpuRequest,
    target: GpuTarget | None,
    timeout_s: float | None,
    flags: Sequence[str] = (),
    nproc_per_node: int | None = None,
    open_driver: Callable[[GpuTarget], GpuDriver] | None = None,
    *,
    state_dir: str | None,
) -> JsonObject:
    """One policy once: apply clock/power (if any), run the child with the env, restore.

    `open_driver` opens the driver of `target` (default: its vendor library or tool);
    `state_dir`: the --state-dir option (None: the default folder)."""
    key = {"workload": config.workload, "streams": config.streams, "policy": policy.name, "repeat": repeat}
    request = point_request(policy, base)
    point: JsonObject = {"key": key, "policy": policy.to_dict(), "request": request.to_dict()}
    backend = "cpu" if config.device == "cpu" else "gpu"
    reason = (
        CPU_NOT_APPLICABLE if not request.empty and target is None else not_applicable_reason(policy, backend)
    )
    if reason is not None:
        point.update(
            {
                "status": "not_applicable",
                "error": reason,
                "result": None,
                "duration_s": 0.0,
                "returncode": None,
                "gpu_control": None,
                "in_effect": None,
            }
        )
        return point
    if backend == "cpu" and cpu_ignored_env(policy):
        point["ignored_env"] = cpu_ignored_env(policy)
    control: Any = contextlib.nullcontext(None)
    if not request.empty:
        assert target is not None
        control = GpuControl(target, request, open_driver=open_driver, state_dir=state_dir)
    point["conditions"] = conditions()
    with control as gpu_report:
        outcome = run_point(
            [*child_run_args(config, flags), *policy.child_args()],
            env_overrides=dict(policy.env),
            timeout_s=timeout_s,
            nproc_per_node=nproc_per_node,
        )
    point.update(outcome.to_dict())
    point.update(
        {
            "result": outcome.result,
            "gpu_control": gpu_report,
            "in_effect": in_effect(policy, outcome.result, gpu_report),
        }
    )
    return point


def _median(values: Sequence[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return statistics.median(clean) if clean else None


def _ci(values: list[float]) -> JsonObject | None:
    return median_ci(values).to_dict() if values else None


def _policy_row(name: str, points: list[JsonObject]) -> JsonObject:
    ok = [p for p in points if p.get("status") == "ok" and p.get("result")]
    na = [p for p in points if p.get("status") == "not_applicable"]
    failed = [p for p in points if p.get("status") not in ("ok", "not_applicable")]
    row: JsonObject = {"policy": name, "points": len(points), "ok": len(ok)}
    if na and not ok:
        row.update({"status": "not_applicable", "reason": na[0]["error"]})
        return row
    if not ok:
        row.update({"status": "failed", "reason": failed[0].get("error") if failed else "no point ran"})
        return row
    results = [p["result"] for p in ok]
    runs = [run_summary(r) for r in results]
    pools = sorted(
        {p["in_effect"]["queue_pool_size"] for p in ok if p["in_effect"]["queue_pool_size"] is not None}
    )
    effect = dict(ok[0]["in_effect"])
    if len(pools) > 1:
        effect["queue_pool_size"] = None
        effect["queue_pool_note"] = f"differed between repeats: {pools}"
    tputs = [r["throughput"] for r in runs if r["throughput"] is not None]
    row.update(
        {
            "status": "ok" if not failed else "partial",
            "reason": failed[0].get("error") if failed else None,
            "throughput_unit": results[0].get("throughput_unit"),
            "runs": runs,
            "throughput_per_repeat": tputs,
            "throughput": _median(tputs),
            "throughput_ci": _ci(tputs),
            "latency_ms": {k: _median([r[f"latency_{k}_ms"] for r in runs]) for k in ("p50", "p95", "p99")},
            "latency_statistic": "median over repeats of each repeat's percentile",
            "switch_overhead_ms": _median(
                [(r.get("switch_latency") or {}).get("switch_overhead_ms") for r in results]
            ),
            "concurrency": _median([(r.get("concurrency") or {}).get("achieved") for r in results]),
            "in_effect": effect,
            "ignored_env": ok[0].get("ignored_env") or [],
        }
    )
    return row


def _values(row: JsonObject, name: str) -> list[float]:
    return [r[name] for r in row.get("runs") or [] if r.get(name) is not None]


def reference_policy(names: Sequence[str]) -> JsonObject:
    """The policy every other is compared against: baseline when listed, else the first listed
    (a sweep of `--policies a,b` still compares b with a), and why it was chosen."""
    if BASELINE in names:
        return {"policy": BASELINE, "why": "listed in the sweep"}
    return {
        "policy": names[0] if names else None,
        "why": f"first listed; the sweep has no {BASELINE} policy",
    }


def _best(
    rows: list[JsonObject], metric: str, baseline: JsonObject | None, repeats: int, ref: str
) -> JsonObject:
    """The applicable policy that beats the reference policy `ref` beyond noise on `metric`
    (vs_baseline key), or why none is named."""
    if baseline is None:
        return {"policy": None, "text": f"the reference policy {ref} did not run ok: nothing to rank against"}
    others = [
        r
        for r in rows
        if r["policy"] != ref and r.get("vs_baseline") and (r["vs_baseline"] or {}).get(metric)
    ]
    if not others:
        return {"policy": None, "text": "no other applicable policy ran ok"}
    if repeats < MIN_RUNS:
        return {
            "policy": None,
            "text": f"not ranked: {repeats} run(s) per policy, run-to-run noise unknown — "
            f"use --repeats {MIN_RUNS_TO_DETECT} or more (the fewest per side that can reach "
            f"p < {ALPHA:g})",
        }
    better = [r for r in others if r["vs_baseline"][metric]["verdict"] == "improvement"]
    if better:
        higher = metric == "throughput"
        best = max(better, key=lambda r: r["vs_baseline"][metric]["change_pct"] * (1 if higher else -1))
        cmp = best["vs_baseline"][metric]
        ci = cmp.get("change_ci_pct")
        ci_text = f" [{ci[0]:+.1f}, {ci[1]:+.1f}] at {cmp['change_ci_level']:.0%}" if ci else ""
        return {
            "policy": best["policy"],
            "change_pct": cmp["change_pct"],
            "change_ci_pct": ci,
            "p_value": cmp["p_value"],
            "text": f"{best['policy']} ({cmp['change_pct']:+.1f}%{ci_text} vs {ref}, "
            f"p={cmp['p_value']:.3g}, {cmp['base_n']} vs {cmp['test_n']} runs)",
        }
    if all(r["vs_baseline"][metric]["verdict"] == "regression" for r in others):
        return {"policy": ref, "text": f"{ref} (every other applicable policy is worse beyond noise)"}
    return {"policy": None, "text": f"no policy differs beyond noise from {ref}"}


def summarize(points: list[JsonObject], policies: Sequence[Policy]) -> JsonObject:
    """Per-policy rows (run-level statistics over repeats), deltas vs the reference policy
    (reference_policy) from the same per-repeat values, and best lines over applicable policies
    beyond noise."""
    rows = [_policy_row(p.name, [pt for pt in points if pt["key"]["policy"] == p.name]) for p in policies]
    by_name = {r["policy"]: r for r in rows}
    reference = reference_policy([p.name for p in policies])
    ref = reference["policy"]
    base = by_name.get(ref) if by_name.get(ref, {}).get("runs") else None
    for row in rows:
        if not row.get("runs") or row["policy"] == ref:
            row["vs_baseline"] = None
            continue
        if base is None:
            row["vs_baseline"] = {"reason": f"the reference policy {ref} did not run ok in this sweep"}
            continue
        vs: JsonObject = {}
        for label, name, higher in (
            ("throughput", "throughput", True),
            ("latency", "latency_p50_ms", False),
            ("p99", "latency_p99_ms", False),
        ):
            b, t = _values(base, name), _values(row, name)
            vs[label] = (
                compare_runs(b, t, THRESHOLD_PCT, higher_is_better=higher).to_dict() if b and t else None
            )
        row["vs_baseline"] = vs
    repeats = min((len(r.get("runs") or []) for r in rows if r.get("runs")), default=0)
    measured = [r for r in rows if r.get("throughput") is not None]
    pools = {r["policy"]: r["in_effect"]["queue_pool_size"] for r in measured}
    return {
        "rows": rows,
        "reference": reference,
        "best_throughput": _best(rows, "throughput", base, repeats, ref),
        "best_p99": _best(rows, "p99", base, repeats, ref),
        "not_applicable": [r["policy"] for r in rows if r.get("status") == "not_applicable"],
        "queue_pools": pools,
        "queue_pool_changed": len({v for v in pools.values() if v is not None}) > 1,
        "verdict_rule": (
            f"as `compare`: runs are the samples — Mann–Whitney U over the "
            f"per-repeat values (window throughput; each repeat's P50 and P99), "
            f"|change of the medians| ≥ {THRESHOLD_PCT:g}% and p < {ALPHA:g} for "
            f"better/worse, the change's CI inside ±{THRESHOLD_PCT:g}% for same, n.s. "
            f"otherwise; ≥ {MIN_RUNS} repeats per policy; not-applicable "
            "policies are never ranked"
        ),
    }


#: header fields a resumed policy-sweep file must match (its --resume fingerprint)
FINGERPRINTED = (
    "workload",
    "streams",
    "device",
    "repeats",
    "policies",
    "gpu_control_request",
    "run_config",
    "run_flags",
)


@dataclass
class PolicySweepSpec:
    """Everything a policy sweep needs, validated by the CLI (`config.device` resolved)."""

    policies: list[Policy]
    config: RunConfig
    base: GpuRequest  # the command line's --lock-clocks/--power-limit, under each policy's own
    target: GpuTarget | None  # the GPU behind config.device (None: the CPU backend)
    repeats: int
    output: str
    timeout_s: float | None = None
    flags: list[str] = field(default_factory=list)  # passthrough flags (--ebpf-trace, --state-dir …)
    nproc_per_node: int | None = None  # run each point under torchrun with this many ranks
    open_driver: Callable[[GpuTarget], GpuDriver] | None = None  # opens target's driver
    state_dir: str | None = None  # the --state-dir option (None: the default folder)

    def schedule(self) -> list[list[str]]:
        """Policy names per round (`schedule`)."""
        return schedule(self.policies, self.repeats, self.config.seed)

    def key(self, name: str, repeat: int) -> JsonObject:
        """Checkpoint key of a point: the one `run_policy_point` gives it."""
        return {
            "workload": self.config.workload,
            "streams": self.config.streams,
            "policy": name,
            "repeat": repeat,
        }

    def header(self) -> JsonObject:
        header = {
            "workload": self.config.workload,
            "streams": self.config.streams,
            "device": self.config.device,
            "backend": "cpu" if self.config.device == "cpu" else "gpu",
            "repeats": self.repeats,
            "policies": [p.to_dict() for p in self.policies],
            "gpu_control_request": self.base.to_dict(),
            "gpu_control_target": None if self.target is None else self.target.describe(),
            "run_config": self.config.to_dict(),
            "run_flags": self.flags,
            "schedule": self.schedule(),
            "nproc_per_node": self.nproc_per_node,
        }
        fingerprinted = list(FINGERPRINTED)
        if self.nproc_per_node is not None:  # absent otherwise: earlier files still resume
            fingerprinted.append("nproc_per_node")
        header["fingerprint"] = fingerprint({k: header[k] for k in fingerprinted})
        return header


def preflight(spec: PolicySweepSpec) -> None:
    """Check every clock/power setting the sweep will apply (tools present, device readable,
    watts in range) before any point runs; nothing is changed. No-op without a GPU target."""
    if spec.target is None:
        return
    for request in {point_request(p, spec.base) for p in spec.policies} - {GpuRequest()}:
        control = GpuControl(spec.target, request, open_driver=spec.open_driver, state_dir=spec.state_dir)
        try:
            control.preflight()
        finally:
            control.close()


def open_checkpoint(spec: PolicySweepSpec, resume: bool) -> CheckpointFile:
    """A fresh policy-sweep file, or the earlier one when resuming (same settings required)."""
    return open_or_resume(spec.output, KIND, spec.header(), resume)


#: on_point(policy, repeat, point_or_None_if_kept, done, total), after each point
PolicyPointCallback = Callable[[str, int, JsonObject | None, int, int], None]
#: on_start(policy, repeat, done, total), before a point's child starts
PolicyStartCallback = Callable[[str, int, int, int], None]


def run_policy_sweep(
    spec: PolicySweepSpec,
    file: CheckpointFile,
    on_point: PolicyPointCallback = lambda name, repeat, point, done, total: None,
    on_start: PolicyStartCallback = lambda name, repeat, done, total: None,
) -> JsonObject:
    """Run every pending point, recording each one as it ends; returns the summary saved with
    the completed file.

    A point already done ok in `file` (kept by --resume) is reported as `on_point(..., None, ...)`
    and not run again. KeyboardInterrupt / Terminated propagate after the child is stopped;
    every finished point is already on disk.
    """
    plan = [(repeat, name) for repeat, names in enumerate(spec.schedule(), start=1) for name in names]
    total = len(plan)
    by_name = {p.name: p for p in spec.policies}
    file.save(state="running")
    for done, (repeat, name) in enumerate(plan, start=1):
        if file.done(spec.key(name, repeat)):
            on_point(name, repeat, None, done, total)
            continue
        on_start(name, repeat, done, total)
        point = run_policy_point(
            by_name[name],
            repeat,
            spec.config,
            spec.base,
            spec.target,
            spec.timeout_s,
            spec.flags,
            nproc_per_node=spec.nproc_per_node,
            open_driver=spec.open_driver,
            state_dir=spec.state_dir,
        )
        file.record(point, state="running")
        on_point(name, repeat, point, done, total)
    commit()  # every point is measured: the file is completed whatever signal comes now
    summary = summarize(file.points, spec.policies)
    file.save(state="complete", summary=summary)
    return summary

"""The "driver job" summary shared by the DRM job families (amdgpu, gpu_scheduler)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import CollectContext, ProbeCode, RenderContext
from aorta.ebpf.probes.common import both


def counts(maps: JsonObject, name: str) -> dict[str, int]:
    """A printed keyed count map as {key: int}, so each family reads its per-ring counters alike."""
    return {k: int(v) for k, v in hist.keyed(maps.get(name)).items()}


def avg_us(st: tuple[int, int] | None) -> float | None:
    """Mean in µs of a stats() (count, total ns) pair; None when it has no samples."""
    return st[1] / st[0] / 1e3 if st and st[0] else None


def job_summary(
    source: str,
    submits: dict[str, int],
    dispatches: dict[str, int],
    s2d: tuple[int, int] | None,
    s2d_dist: hist.Distribution,
    *,
    submissions_meaning: str,
    dispatches_meaning: str,
    hw_rings_meaning: str,
    submit_to_dispatch_meaning: str,
    not_measured: str | None = None,
) -> JsonObject:
    """The summary dict (same keys, same order) that every driver-job family reports.

    `not_measured`: why the family's job events were not attached; the counts are then null
    with that reason (`summary_reason`), never zeros."""
    p99 = hist.quantile(s2d_dist, 0.99)
    measured = not_measured is None
    return {
        "source": source,
        "total_submissions": sum(submits.values()) if measured else None,
        "submissions_meaning": submissions_meaning,
        "total_dispatches": sum(dispatches.values()) if measured else None,
        "dispatches_meaning": dispatches_meaning,
        "hw_rings_used": sorted(dispatches) if measured else None,
        "hw_rings_meaning": hw_rings_meaning,
        "submit_to_dispatch_avg_us": avg_us(s2d),
        "submit_to_dispatch_p99_us": p99["value"] / 1e3 if p99 else None,
        "submit_to_dispatch_p99": p99,
        "submit_to_dispatch_meaning": submit_to_dispatch_meaning,
        **({} if measured else {"summary_reason": f"not measured: {not_measured}"}),
    }


def not_attached(context: CollectContext, events: list[str], missing: str) -> str | None:
    """Why a job family measured nothing (none of `events` attached), or None when it did."""
    attached = set(context.attached)
    return None if attached & set(events) else missing


def measured_or_none(value: Any, not_measured: str | None) -> Any:
    """A per-ring table or count the family reports, or None when its events were not attached."""
    return value if not_measured is None else None


@dataclass(frozen=True)
class JobChain:
    """One driver family's job chain (submit → run → done) and the names of the maps it keeps.

    Every map is `@<family>_<name>`; the chain's code is the same for amdgpu and drm_sched,
    only the events, the join keys and these names differ."""

    family: str
    submit_event: str  # fires in the submitting process: the pid filter applies
    run_event: str  # fires in a scheduler worker: joined to traced submissions only
    submit_stage: str  # `<stage>_ts` / `<stage>_rank` remember a submission until it runs
    submitted: str  # count per ring of traced submissions
    latency: str  # submit → run: stats, and a log-linear recorder `<latency>_d`
    dispatched: str  # count per ring of traced jobs that ran
    untraced: str  # count per ring of jobs that ran with no traced submission
    done_latency: str  # run → done stats (and `<done_latency>_hist` when done_hist)
    done_hist: bool = False

    def map(self, name: str) -> str:
        return f"@{self.family}_{name}"


@dataclass(frozen=True)
class JobKeys:
    """bpftrace expressions of one kernel generation: the join keys and ring names."""

    submit: str  # job identity at submission
    run: str  # the same identity at run
    ring_submit: str
    ring_run: str
    run_done: str | None  # identity at run that the done event carries too (None: no join)
    done: str | None  # that identity at done (None: done event absent or without it)


def render_chain(
    ctx: RenderContext, code: ProbeCode, chain: JobChain, keys: JobKeys, done_event: str
) -> None:
    """Append the chain's three probes (done only when run and done share an identity) to `code`.
    In a node program (torchrun) maps are keyed by the submitter's rank, carried to the workers."""
    m, node, k = chain.map, ctx.rank is not None, ctx.key
    ts, rank = m(f"{chain.submit_stage}_ts"), m(f"{chain.submit_stage}_rank")
    code.used_events += [chain.submit_event, chain.run_event]
    code.probes.append(
        f"tracepoint:{chain.submit_event}\n/{both(ctx.pid_filter, ctx.gate)}/\n{{\n"
        f"  {ts}[{keys.submit}] = nsecs;\n"
        + (f"  {rank}[{keys.submit}] = {ctx.rank};\n" if node else "")
        + f"  {m(chain.submitted)}{k(keys.ring_submit)} = count();\n}}"
    )
    joined = keys.run_done is not None and keys.done is not None
    remember = f"    {m('run_ts')}[{keys.run_done}] = nsecs;\n" if joined else ""
    if node and joined:
        remember += f"    {m('run_rank')}[{keys.run_done}] = $rk;\n"
    code.probes.append(
        f"tracepoint:{chain.run_event}\n/{ctx.gate}/\n{{\n"
        f"  $t = {ts}[{keys.run}];\n"
        "  if ($t) {\n"
        + (f"    $rk = {rank}[{keys.run}];\n    delete({rank}[{keys.run}]);\n" if node else "")
        + f"{hist.record_code(f'{chain.family}_{chain.latency}_d', 'nsecs - $t', prefix=ctx.prefix('$rk'))}\n"
        f"    {m(chain.latency)}{k(rank='$rk')} = stats(nsecs - $t);\n"
        f"    {m(chain.dispatched)}{k(keys.ring_run, rank='$rk')} = count();\n"
        f"    delete({ts}[{keys.run}]);\n{remember}"
        "  } else {\n"
        f"    {m(chain.untraced)}[{keys.ring_run}] = count();\n"
        "  }\n}"
    )
    code.end += [f"clear({ts});", f"clear({m('run_ts')});"]
    if node:
        code.end += [f"clear({rank});", f"clear({m('run_rank')});"]
    if not joined:
        return
    code.used_events.append(done_event)
    done = m(chain.done_latency)
    code.probes.append(
        f"tracepoint:{done_event}\n/{ctx.gate}/\n{{\n"
        f"  $r = {m('run_ts')}[{keys.done}];\n"
        "  if ($r) {\n"
        + (
            f"    $rk = {m('run_rank')}[{keys.done}];\n    delete({m('run_rank')}[{keys.done}]);\n"
            if node
            else ""
        )
        + (f"    {done}_hist{k(rank='$rk')} = hist(nsecs - $r);\n" if chain.done_hist else "")
        + f"    {done}{k(rank='$rk')} = stats(nsecs - $r);\n"
        f"    delete({m('run_ts')}[{keys.done}]);\n  }}\n}}"
    )

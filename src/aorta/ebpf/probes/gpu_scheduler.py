"""Generic DRM GPU scheduler (any driver using drm_sched): job queued → run → done.

Two naming generations, probed at start-up: drm_sched_job / drm_run_job / drm_sched_process_job
(join: sched job id, then the fence pointer as an identity) and, on ~6.17+, drm_sched_job_queue /
drm_sched_job_run / drm_sched_job_done (join: fence_context, fence_seqno). Queueing fires in the
submitting process (pid filter applies); run and done fire in scheduler workers (no pid filter:
joined to traced jobs only, the rest counted apart).
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes import jobs
from aorta.ebpf.probes.base import CollectContext, FamilyResult, ProbeCode, ProbeFamily, RenderContext
from aorta.ebpf.probes.common import KERNEL_BYPASS, int_key, ptr_key, text

OLD = ("drm_sched_job", "drm_run_job", "drm_sched_process_job")
NEW = ("drm_sched_job_queue", "drm_sched_job_run", "drm_sched_job_done")


class GpuSchedulerFamily(ProbeFamily):
    """Queue → run → done of drm_sched jobs, per ring name."""

    name = "gpu_scheduler"
    section = "queue"
    description = "generic DRM scheduler jobs (old and new tracepoint names)"
    rank_keyed_maps = (
        "@gpu_scheduler_queued",
        "@gpu_scheduler_q2r",
        "@gpu_scheduler_run",
        "@gpu_scheduler_r2d",
        *hist.recorder_maps("gpu_scheduler_q2r_d"),
    )

    def wanted_events(self) -> list[str]:
        return [f"gpu_scheduler:{e}" for e in (*NEW, *OLD)]

    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        for names in (NEW, OLD):
            fmts = [ctx.event("gpu_scheduler", n) for n in names]
            if fmts[0] is not None and fmts[1] is not None:
                self._render(ctx, code, names, fmts)
                other = OLD if names is NEW else NEW
                for n in other:
                    code.missing[f"gpu_scheduler:{n}"] = "other naming generation (not on this kernel)"
                return code
        for n in (*NEW, *OLD):
            code.missing[f"gpu_scheduler:{n}"] = "tracepoint absent (no drm_sched driver loaded)"
        return code

    def _render(self, ctx: RenderContext, code: ProbeCode, names: tuple[str, ...], fmts: list[Any]) -> None:
        queue_fmt, run_fmt, done_fmt = fmts
        if names is NEW:
            key_q = int_key(ctx, queue_fmt, "fence_context", "fence_seqno", mask32=False)
            key_r = int_key(ctx, run_fmt, "fence_context", "fence_seqno", mask32=False)
            done_key_r = key_r
            done_key = (
                int_key(ctx, done_fmt, "fence_context", "fence_seqno", mask32=False)
                if done_fmt is not None
                else None
            )
        else:
            key_q = int_key(ctx, queue_fmt, "id", mask32=False)
            key_r = int_key(ctx, run_fmt, "id", mask32=False)
            done_key_r = ptr_key(ctx, run_fmt, "fence")
            done_key = ptr_key(ctx, done_fmt, "fence") if done_fmt is not None else None
        if key_q is None or key_r is None:
            code.missing[f"gpu_scheduler:{names[0]}"] = "no job identity field to join on"
            return
        chain = jobs.JobChain(
            family="gpu_scheduler",
            submit_event=f"gpu_scheduler:{names[0]}",
            run_event=f"gpu_scheduler:{names[1]}",
            submit_stage="queue",
            submitted="queued",
            latency="q2r",
            dispatched="run",
            untraced="untraced_jobs",
            done_latency="r2d",
        )
        keys = jobs.JobKeys(
            submit=key_q,
            run=key_r,
            ring_submit=text(ctx, queue_fmt, "name"),
            ring_run=text(ctx, run_fmt, "name"),
            run_done=done_key_r,
            done=done_key,
        )
        jobs.render_chain(ctx, code, chain, keys, f"gpu_scheduler:{names[2]}")
        if done_key_r is None or done_key is None:
            code.missing[f"gpu_scheduler:{names[2]}"] = "absent or no fence identity to join"

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        queued = jobs.counts(maps, "@gpu_scheduler_queued")
        run = jobs.counts(maps, "@gpu_scheduler_run")
        untraced = jobs.counts(maps, "@gpu_scheduler_untraced_jobs")
        r2d = hist.stats(maps.get("@gpu_scheduler_r2d"))
        q2r = hist.distribution(maps, "gpu_scheduler_q2r_d")
        absent = jobs.not_attached(
            context,
            [f"gpu_scheduler:{n}" for n in (*NEW, *OLD)],
            "drm_sched job tracepoints not attached (see events_missing)",
        )
        summary = jobs.job_summary(
            "gpu_scheduler",
            queued,
            run,
            hist.stats(maps.get("@gpu_scheduler_q2r")),
            q2r,
            submissions_meaning="drm_sched jobs queued by the traced processes",
            dispatches_meaning="those jobs handed to the hardware ring (run)",
            hw_rings_meaning="scheduler (ring) names of dispatched traced jobs",
            submit_to_dispatch_meaning="job queued → job run, same job identity",
            not_measured=absent,
        )
        metrics = {
            "summary": summary,
            "queued_per_ring": jobs.measured_or_none(queued, absent),
            "run_per_ring": jobs.measured_or_none(run, absent),
            "jobs_without_traced_submission": jobs.measured_or_none(untraced, absent),
            "submit_to_dispatch_hist_ns": hist.as_records(q2r.hist),
            "histogram_kind": hist.LOGLINEAR_KIND,
            "run_to_done_avg_us": jobs.avg_us(r2d),
        }
        coverage = {
            "source": "gpu_scheduler tracepoints",
            "covered": "drm_sched jobs of the traced processes (any DRM driver)",
            "statement": f"{KERNEL_BYPASS}; drm_sched sees only kernel-submitted jobs.",
        }
        return FamilyResult(self.name, self.section, metrics, coverage)

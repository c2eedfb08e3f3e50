"""AMD DRM command-submission path: amdgpu_cs_ioctl → amdgpu_sched_run_job → fence signalled.

Joined by the scheduler fence (context, seqno) when both events carry them (all known kernels),
else by sched_job_id; never by thread id (run_job fires in the scheduler's thread) and never by
arrival order. Rings are names (str()); on ≤5.4 kernels the ring is a `char *` and is reported as
"n/a". run_job events with no traced submission are counted apart (kernel-internal SDMA work such
as buffer moves and clears, or other processes).
"""

from __future__ import annotations

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes import jobs
from aorta.ebpf.probes.base import CollectContext, FamilyResult, ProbeCode, ProbeFamily, RenderContext
from aorta.ebpf.probes.common import KERNEL_BYPASS, int_key, text

CHAIN = jobs.JobChain(
    family="amdgpu",
    submit_event="amdgpu:amdgpu_cs_ioctl",
    run_event="amdgpu:amdgpu_sched_run_job",
    submit_stage="submit",
    submitted="submits",
    latency="s2d",
    dispatched="dispatches",
    untraced="internal_jobs",
    done_latency="d2c",
    done_hist=True,
)


class AmdgpuFamily(ProbeFamily):
    """Submissions, dispatches and submit→dispatch→done latency of amdgpu DRM jobs."""

    name = "amdgpu"
    section = "queue"
    description = "amdgpu DRM jobs: cs_ioctl → sched_run_job → dma_fence_signaled"
    rank_keyed_maps = (
        "@amdgpu_submits",
        "@amdgpu_s2d",
        "@amdgpu_dispatches",
        "@amdgpu_d2c_hist",
        "@amdgpu_d2c",
        *hist.recorder_maps("amdgpu_s2d_d"),
    )

    def wanted_events(self) -> list[str]:
        return ["amdgpu:amdgpu_cs_ioctl", "amdgpu:amdgpu_sched_run_job", "dma_fence:dma_fence_signaled"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        code = ProbeCode()
        cs, run = ctx.event("amdgpu", "amdgpu_cs_ioctl"), ctx.event("amdgpu", "amdgpu_sched_run_job")
        if cs is None or run is None:
            for ev, fmt in (("amdgpu:amdgpu_cs_ioctl", cs), ("amdgpu:amdgpu_sched_run_job", run)):
                code.missing[ev] = (
                    "tracepoint absent (no amdgpu driver loaded)"
                    if fmt is None
                    else "unused: its partner event is absent"
                )
            code.missing["dma_fence:dma_fence_signaled"] = "unused without amdgpu events"
            return code
        key_cs, key_run = int_key(ctx, cs, "context", "seqno"), int_key(ctx, run, "context", "seqno")
        if key_cs is None or key_run is None:
            key_cs, key_run = (
                int_key(ctx, cs, "sched_job_id", mask32=False),
                int_key(ctx, run, "sched_job_id", mask32=False),
            )
        if key_cs is None or key_run is None:
            code.missing["amdgpu:amdgpu_cs_ioctl"] = "no join key (context/seqno or sched_job_id)"
            return code
        fence = ctx.event("dma_fence", "dma_fence_signaled")
        keys = jobs.JobKeys(
            submit=key_cs,
            run=key_run,
            ring_submit=text(ctx, cs, "ring", "ring_name"),
            ring_run=text(ctx, run, "ring", "ring_name"),
            run_done=int_key(ctx, run, "context", "seqno"),
            done=int_key(ctx, fence, "context", "seqno") if fence is not None else None,
        )
        jobs.render_chain(ctx, code, CHAIN, keys, "dma_fence:dma_fence_signaled")
        if keys.run_done is None or keys.done is None:
            code.missing["dma_fence:dma_fence_signaled"] = (
                "tracepoint absent" if fence is None else "no (context, seqno) to join completions"
            )
        return code

    def collect(self, maps: JsonObject, context: CollectContext) -> FamilyResult:
        submits = jobs.counts(maps, "@amdgpu_submits")
        dispatches = jobs.counts(maps, "@amdgpu_dispatches")
        internal = jobs.counts(maps, "@amdgpu_internal_jobs")
        d2c = hist.stats(maps.get("@amdgpu_d2c"))
        s2d = hist.distribution(maps, "amdgpu_s2d_d")
        absent = jobs.not_attached(
            context, ["amdgpu:amdgpu_cs_ioctl"], "amdgpu job tracepoints not attached (see events_missing)"
        )
        summary = jobs.job_summary(
            "amdgpu",
            submits,
            dispatches,
            hist.stats(maps.get("@amdgpu_s2d")),
            s2d,
            submissions_meaning="amdgpu_cs_ioctl of the traced processes (DRM command submission)",
            dispatches_meaning="amdgpu_sched_run_job joined to a traced submission by fence",
            hw_rings_meaning="ring names of dispatched traced jobs",
            submit_to_dispatch_meaning="amdgpu_cs_ioctl → amdgpu_sched_run_job, same fence",
            not_measured=absent,
        )
        metrics = {
            "summary": summary,
            "submissions_per_ring": jobs.measured_or_none(submits, absent),
            "dispatches_per_ring": jobs.measured_or_none(dispatches, absent),
            "jobs_without_traced_submission": jobs.measured_or_none(internal, absent),
            "submit_to_dispatch_hist_ns": hist.as_records(s2d.hist),
            "histogram_kind": hist.LOGLINEAR_KIND,
            "dispatch_to_done_avg_us": jobs.avg_us(d2c),
            "dispatch_to_done_count": jobs.measured_or_none(d2c[0] if d2c else 0, absent),
        }
        coverage = {
            "source": "amdgpu tracepoints (amdgpu_cs_ioctl, amdgpu_sched_run_job) + dma_fence_signaled",
            "covered": "DRM command submissions (graphics, video, libdrm) of the traced processes",
            "statement": (
                f"{KERNEL_BYPASS}. amdgpu_cs_ioctl sees only DRM submissions; jobs "
                "without a traced submission (kernel SDMA work, other processes) are "
                "counted apart."
            ),
        }
        return FamilyResult(self.name, self.section, metrics, coverage)

"""The "driver job" summary shared by the DRM job families (amdgpu, gpu_scheduler)."""

from __future__ import annotations

from typing import Any

from aorta.ebpf import hist


def counts(maps: dict[str, Any], name: str) -> dict[str, int]:
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
    s2d_dist: dict[str, Any],
    *,
    submissions_meaning: str,
    dispatches_meaning: str,
    hw_rings_meaning: str,
    submit_to_dispatch_meaning: str,
    not_measured: str | None = None,
) -> dict[str, Any]:
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


def not_attached(context: dict[str, Any], events: list[str], missing: str) -> str | None:
    """Why a job family measured nothing (none of `events` attached), or None when it did."""
    attached = set(context.get("attached") or [])
    return None if attached & set(events) else missing


def measured_or_none(value: Any, not_measured: str | None) -> Any:
    """A per-ring table or count the family reports, or None when its events were not attached."""
    return value if not_measured is None else None

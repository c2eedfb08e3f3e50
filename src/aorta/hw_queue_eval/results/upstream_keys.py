"""Upstream AORTA's result keys in our results, so dashboards built on its files keep working.

Where our quantity is upstream's, its name is an alias holding our value; where upstream's
quantity differs (its switch overhead, efficiencies, inflection point), its name holds upstream's
figure computed upstream's way, ours stays under our name; what we do not measure is null. Each
section carries `upstream_keys`: {upstream name: what it holds, or why it is null}.
docs/results-schema.md has the mapping table.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from aorta.common.finite import ratio
from aorta.common.jsontypes import JsonObject

INFLECTION_DROP = 0.8  # upstream: efficiency below 80 % of the previous point's

SWITCH_MEANING = {
    "inter_stream_gap_ms": "upstream's formula: mean of the positive gaps between ops consecutive "
    "by end time (all streams of one iteration together) whose streams differ",
    "intra_stream_gap_ms": "upstream's formula: the same mean where both ops are on one stream",
    "estimated_switch_overhead_ms": "upstream's figure: max(0, inter_stream_gap_ms - "
    "intra_stream_gap_ms), not like for like; ours is switch_overhead_ms",
    "inter_stream_samples": "gaps in inter_stream_gap_ms",
    "intra_stream_samples": "gaps in intra_stream_gap_ms",
}


def upstream_switch(ops: Sequence[Any]) -> JsonObject:
    """Upstream's switch figures from op records (iteration, stream, start_ns, end_ns): within
    each iteration, ops in end order; each positive gap to the next op's start is inter-stream
    when the two streams differ, intra-stream when not."""
    by_iteration: dict[int, list[Any]] = defaultdict(list)
    for op in ops:
        by_iteration[op.iteration].append(op)
    inter: list[float] = []
    intra: list[float] = []
    for iteration_ops in by_iteration.values():
        ordered = sorted(iteration_ops, key=lambda o: o.end_ns)
        for prev, nxt in itertools.pairwise(ordered):
            gap = (nxt.start_ns - prev.end_ns) / 1e6
            if gap > 0:
                (intra if prev.stream == nxt.stream else inter).append(gap)
    if not inter and not intra:
        reason = "no ops recorded" if not ops else "no positive gap between ops consecutive by end time"
        return unmeasured_upstream_switch(reason)
    inter_ms = sum(inter) / len(inter) if inter else 0.0
    intra_ms = sum(intra) / len(intra) if intra else 0.0
    return {
        "inter_stream_gap_ms": inter_ms if inter else None,
        "intra_stream_gap_ms": intra_ms if intra else None,
        "estimated_switch_overhead_ms": max(0.0, inter_ms - intra_ms) if inter and intra else None,
        "inter_stream_samples": len(inter),
        "intra_stream_samples": len(intra),
        "upstream_keys": {
            **SWITCH_MEANING,
            **({} if inter else {"inter_stream_gap_ms": "null: no positive gap between streams"}),
            **({} if intra else {"intra_stream_gap_ms": "null: no positive gap on one stream"}),
        },
    }


def unmeasured_upstream_switch(reason: str) -> JsonObject:
    """Upstream's switch keys, every one null with the reason."""
    return {
        **dict.fromkeys(SWITCH_MEANING),
        "upstream_keys": {name: f"null: {reason}" for name in SWITCH_MEANING},
    }


def add_queue_keys(section: Any) -> None:
    """Upstream's names in a traced `ebpf_queue_metrics` section (in place; untraced ones keep
    status and error only)."""
    if not isinstance(section, dict) or "families" not in section:
        return
    meaning: dict[str, str] = {}
    for up, ours in (
        ("avg_submit_to_dispatch_us", "submit_to_dispatch_avg_us"),
        ("p99_submit_to_dispatch_us", "submit_to_dispatch_p99_us"),
        ("rings_used", "hw_rings_used"),
    ):
        meaning[up] = _alias(section, up, ours, "summary_reason")
    dispatches = section.get("total_dispatches")
    window_ms = (section.get("window") or {}).get("duration_ms")
    if isinstance(dispatches, int) and isinstance(window_ms, (int, float)) and window_ms > 0:
        section["dispatch_rate_per_sec"] = dispatches / (window_ms / 1e3)
        meaning["dispatch_rate_per_sec"] = "total_dispatches / window.duration_ms (traced window), per second"
    else:
        section["dispatch_rate_per_sec"] = None
        meaning["dispatch_rate_per_sec"] = "null: no dispatch count or no traced window length"
    for name in ("avg_inter_dispatch_gap_us", "p99_inter_dispatch_gap_us"):
        section[name] = None
        meaning[name] = (
            "null: not measured: aorta times each dispatch from its own submission "
            "(submit_to_dispatch_*), not the gaps between successive dispatches"
        )
    source = section.get("source")
    family = (section.get("families") or {}).get(source) or {}
    metrics: JsonObject = family["metrics"] if isinstance(family.get("metrics"), dict) else {}
    summary: JsonObject = metrics["summary"] if isinstance(metrics.get("summary"), dict) else {}
    for up, kind in (("per_ring_submissions", "submissions"), ("per_ring_dispatches", "dispatches")):
        found = None
        for where, name in ((metrics, f"{kind}_per_ring"), (summary, f"{kind}_per_queue")):
            if isinstance(where.get(name), dict):
                found = (name, where[name])
                break
        section[up] = found[1] if found else None
        meaning[up] = (
            f"copy of families.{source}.metrics…{found[0]}"
            if found
            else f"null: the {source or 'summary'} family does not count {kind} per ring"
        )
    section["upstream_keys"] = meaning


def _alias(section: JsonObject, up: str, ours: str, why: str) -> str:
    """Copy our value to upstream's name; its meaning, or why it is null."""
    section[up] = section.get(ours)
    if section[up] is not None:
        return f"alias of {ours}"
    return f"null: alias of {ours}, null here ({section.get(why) or 'not measured in this run'})"


def add_memory_keys(section: Any) -> None:
    """Upstream's names in a traced `ebpf_memory_metrics` section (in place)."""
    if not isinstance(section, dict) or "families" not in section:
        return
    meaning: dict[str, str] = {}
    for up, ours in (
        ("total_bo_moves", "bo_moves"),
        ("migration_bytes", "migration_volume_bytes"),
        ("total_eviction_restore_pairs", "evict_restore_pairs"),
    ):
        meaning[up] = _alias(section, up, ours, "gpu_memory_reason")
    section["pages_prefetched"] = None
    meaning["pages_prefetched"] = (
        "null: not measured: no prefetch event is traced (upstream's field was never set: always 0)"
    )
    section["upstream_keys"] = meaning


def metadata_keys(environment: JsonObject) -> JsonObject:
    """metadata.device_info / rocm_info / driver_info / multi_gpu: upstream's places for facts
    our `environment` holds (copies of its values, null where it has none)."""
    env = environment or {}
    pci = {k: env.get(k) for k in ("pci_bus_id", "pci_device_id", "pci_domain_id") if k in env}
    return {
        "device_info": {"name": env.get("device_name"), "device": env.get("device"), **pci},
        "rocm_info": {
            "rocm_version": env.get("rocm_version"),
            "cuda_version": env.get("cuda_version"),
            "torch_version": env.get("torch"),
            "env_vars": env.get("env_knobs"),
        },
        "driver_info": env.get("gpu_driver"),
        "multi_gpu": {"enabled": False, "devices": [env.get("device")], "num_gpus": 1},
        "upstream_keys": {
            "device_info": "copy of environment.device_name / device / pci_*",
            "rocm_info": "copy of environment.rocm_version / cuda_version / torch / env_knobs",
            "driver_info": "copy of environment.gpu_driver (version null with its reason on the CPU)",
            "multi_gpu": "always one device: aorta never spreads streams over GPUs",
        },
    }


def scaling_keys(stream_counts: list[int], throughputs: list[float], peak_streams: int | None) -> JsonObject:
    """The sweep analysis keys of upstream: `throughputs` and `peak_stream_count` alias ours;
    `efficiencies` and `inflection_point` are upstream's formulas (linear in the stream count
    from the first point; the first point whose efficiency falls below 80 % of the previous)."""
    base = ratio(throughputs[0], stream_counts[0]) if throughputs else None
    eff = [ratio(t, base * n) if base else None for n, t in zip(stream_counts, throughputs, strict=True)]
    inflection = None
    for i in range(1, len(eff)):
        prev, cur = eff[i - 1], eff[i]
        if prev is not None and cur is not None and cur < INFLECTION_DROP * prev:
            inflection = stream_counts[i]
            break
    return {
        "throughputs": list(throughputs),
        "efficiencies": eff,
        "inflection_point": inflection,
        "peak_stream_count": peak_streams,
        "upstream_keys": {
            "throughputs": "alias: the points' throughputs (median over repeats), stream_counts order",
            "efficiencies": "upstream's formula: throughput / (first throughput / first streams x "
            "streams), linear in the stream count whatever the work; ours is `efficiency` (ideal "
            "growth from the work per iteration)",
            "inflection_point": "upstream's formula: first stream count whose efficiencies value is "
            "below 80 % of the previous point's (null: none is); ours is knee_streams",
            "peak_stream_count": "alias of peak_streams",
        },
    }

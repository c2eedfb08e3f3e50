"""The v1 reader: upgrade a schema-v1 run (or a sweep of them) to the v2 layout on load.

v2 renamed or redefined three things (docs/results-schema.md, "Reading older files"):
- `verification.max_abs_error` held a relative error: it is `max_rel_error` now;
- `switch_latency` compared unlike gaps (median(inter) − median(intra)); v2 compares like for
  like. A v1 file with `op_intervals` gets the v2 figure recomputed from its own ops; without
  them the switch overhead is null with the reason (the v1 number is kept under `v1`);
- `concurrency` gained the on-CPU figure, which a v1 file never measured (null with the reason);
- `ebpf_vs_cuda_comparison` compared different populations: a v1 block is kept under `v1` and
  shown as not available.
v2 files written before launch waits were split out of the switch overhead (no
`switch_latency.gap_readiness`) compared every gap, launch waits included: the figure is
recomputed from a complete `op_intervals` table, else null with the reason (the old block is kept
under `before_split`). Files without `schema_version` (the upstream tool's layout) are left as
they are.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results.models import SwitchLatency

V1 = 1
V2 = 2


def upgrade(data: JsonObject) -> JsonObject:
    """A v2 view of `data` (a run, sweep or policy sweep); current and foreign files come back as is."""
    version = data.get("schema_version")
    if version == V1:
        # copies only what changes: op tables and samples are shared with `data`, never modified
        out = {**data, "schema_version": V2, "upgraded_from": V1}
        if out.get("kind") == "run":
            _upgrade_run(out)
    elif version == V2 and _before_split(data):
        out = {**data}
        if out.get("kind") == "run":
            _split_switch(out)
    else:
        return data
    if isinstance(out.get("points"), list):
        out["points"] = [
            {**p, "result": upgrade(p["result"])}
            if isinstance(p, dict) and isinstance(p.get("result"), dict)
            else p
            for p in out["points"]
        ]
    return out


def _upgrade_run(run: JsonObject) -> None:
    ver = run.get("verification")
    if isinstance(ver, dict) and "max_abs_error" in ver:
        ver = dict(ver)
        ver["max_rel_error"] = ver.pop("max_abs_error")
        run["verification"] = ver
    old = run.get("switch_latency") or {}
    switch = _recomputed_switch(
        run, "recomputed like for like from this v1 file's op_intervals"
    ) or metrics.unmeasured_switch_analysis(
        "v1 file without op intervals: its switch overhead compared unlike gaps and cannot be recomputed"
    )
    switch["v1"] = old
    run["switch_latency"] = switch
    conc = run.get("concurrency")
    if isinstance(conc, dict):
        run["concurrency"] = {"on_cpu_queues": None, "on_cpu_reason": "not measured by schema v1", **conc}
    comparison = run.get("ebpf_vs_cuda_comparison")
    if isinstance(comparison, dict):
        run["ebpf_vs_cuda_comparison"] = {
            "status": "v1",
            "v1": comparison,
            "error": "written by schema v1, whose comparison mixed populations; re-run to compare",
        }


def _before_split(data: JsonObject) -> bool:
    """Whether a v2 run, or a point of a v2 sweep, has a switch section from before the split."""
    if data.get("kind") == "run":
        switch = data.get("switch_latency")
        return isinstance(switch, dict) and "gap_readiness" not in switch
    points = data.get("points")
    return isinstance(points, list) and any(
        isinstance(p, dict) and isinstance(p.get("result"), dict) and _before_split(p["result"])
        for p in points
    )


def _split_switch(run: JsonObject) -> None:
    """The switch section over ready gaps, from a complete op table; else null with the reason."""
    old = run["switch_latency"]
    table = run.get("op_intervals")
    complete = isinstance(table, dict) and not table.get("truncated")
    note = "recomputed from this file's op_intervals: it was written before launch waits were split out"
    switch = _recomputed_switch(run, note) if complete else None
    if switch is None:
        switch = metrics.unmeasured_switch_analysis(
            "written before launch waits were split out of the switch overhead, without a complete "
            "op table to split them: its figure (all_gaps) includes them"
        )
        gaps = switch["all_gaps"]
        gaps["switch_overhead_ms"] = old.get("switch_overhead_ms")
        gaps["spread_ms"] = old.get("spread_ms")
        gaps["matched_switch_count"] = old.get("matched_switch_count")
    switch["before_split"] = old
    run["switch_latency"] = switch


def _recomputed_switch(run: JsonObject, note: str) -> SwitchLatency | None:
    """The switch section recomputed from the run's own op rows; None without usable rows."""
    table = run.get("op_intervals")
    ops = ops_from_intervals(table)
    if not ops:
        return None
    waits = table.get("waits") if isinstance(table, dict) else None
    total = waits.get("total") if isinstance(waits, dict) else None
    window = run.get("total_time_ms")
    switch = metrics.switch_analysis(
        ops,
        window if isinstance(window, (int, float)) else None,
        total if isinstance(total, int) else None,
    )
    switch["upgrade_note"] = note
    return switch


def ops_from_intervals(table: Any) -> list[OpRecord]:
    """OpRecords (ns from the window start) from a result's `op_intervals` table."""
    if not isinstance(table, dict):
        return []
    columns, labels = table.get("columns") or [], table.get("labels") or []
    wanted = ("iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us")
    if any(c not in columns for c in wanted):
        return []
    idx = [columns.index(c) for c in wanted]
    ops = []
    try:
        for row in table.get("rows") or []:
            it, stream, queue, label, ready, start, end = (row[i] for i in idx)
            ops.append(
                OpRecord(
                    int(it),
                    int(stream),
                    queue,
                    str(labels[label]),
                    None if ready is None else round(ready * 1e3),
                    round(start * 1e3),
                    round(end * 1e3),
                )
            )
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        return []  # a malformed table: the figure cannot be recomputed (null with the reason)
    return ops

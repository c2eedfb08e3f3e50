"""The upstream tool's files (AORTA 0.2.0-0.3.0) seen in our layouts, for the readers (report).

Upstream writes a run with `HarnessResult.to_json`, a sweep with `save_sweep_results`
({timestamp, workload, results: [run, ...], environment, analysis}) and a policy comparison as
{workload, stream_count, timestamp, results: [{policy, result}]}. Its files carry no repeats and
no schema_version; validation.py checks them against upstream's own types before this runs.
"""

from __future__ import annotations

from aorta.common.jsontypes import JsonObject

NOTE = (
    "written by the upstream tool (AORTA 0.2-0.3): no repeats, one run per point; its switch "
    "overhead, per-stream times and eBPF accuracy were never measured by it"
)


def is_upstream(data: JsonObject) -> bool:
    """Whether a loaded file is the upstream tool's (it has neither kind nor schema_version)."""
    return "kind" not in data and "schema_version" not in data


def as_points(data: JsonObject) -> JsonObject:
    """An upstream `{"results": [...]}` file as our sweep / policy-sweep layout (points with
    key, status and result); the runs themselves are shared, not copied."""
    points = []
    policy = False
    for entry in data.get("results") or []:
        if not isinstance(entry, dict):
            continue
        run = entry.get("result") if isinstance(entry.get("policy"), dict) else entry
        if not isinstance(run, dict):
            continue
        key: JsonObject = {"workload": run.get("workload_name"), "streams": run.get("stream_count")}
        if run is not entry:
            policy = True
            key["policy"] = entry["policy"].get("name")
        points.append({"key": key, "status": "ok", "result": run})
    return {
        "kind": "policy-sweep" if policy else "sweep",
        "workload": data.get("workload"),
        "created": data.get("timestamp"),
        "points": points,
        "upstream_note": NOTE,
    }

"""Validate result files read as input (compare, report, --resume) against the JSON schema.

One validator for every reader, run before any work: a file that does not match is a one-line
UsageError naming the file, where in it the problem is and what was expected. Shapes:

* a run result: the types of the current run schema, schema/run_result.v2.json (only
  workload_name and stream_count required: older files and the upstream tool's runs lack the rest);
* sweep / policy-sweep files: their header keys typed, every point `{key, status, result}` with
  `result` a run result (or null); a point with status "ok" must carry one;
* the upstream tool's layouts (AORTA 0.2.0-0.3.0: a run from `HarnessResult.to_json`, a sweep
  `{"results": [...]}` from `save_sweep_results`, a policy comparison `{"results": [{policy,
  result}]}`, `{"policies": {name: run}}`): upstream's own types and timestamps (local time with
  microseconds), never ours.

Every number must be finite (the JSON reader refuses NaN and Infinity) and every integer fit in
64 bits (numpy cannot hold more), and nesting is bounded.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.results.schema import SCHEMA_VERSION, run_result_schema

INT64_MIN = -(1 << 63)
MAX_DEPTH = 64  # our files nest about 10 deep; deeper input only serves to exhaust recursion
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_OBJ_OR_NULL = {"type": ["object", "null"]}


@functools.cache
def _run_schema() -> JsonObject:
    """The run schema as readers apply it: every type, const and enum of the current schema, but
    only workload_name and stream_count required (older and upstream files lack the rest, and the
    readers show what is missing as n/a)."""
    schema: JsonObject = _drop_required(copy.deepcopy(run_result_schema()))
    schema.pop("$schema", None)
    schema.pop("$id", None)
    schema["required"] = ["workload_name", "stream_count"]
    # every layout this aorta reads: older versions go through the v1 reader (upgrade.py) after
    schema["properties"]["schema_version"] = {"type": "integer", "enum": list(range(1, SCHEMA_VERSION + 1))}
    per_label = schema["properties"]["ops"]["properties"]["per_label"]["additionalProperties"]
    per_label["oneOf"][1]["required"] = ["count", "p50", "p99"]
    schema["properties"]["latency"] = {"type": ["object", "null"], "additionalProperties": _NUM_OR_NULL}
    return schema


def _drop_required(node: Any) -> Any:
    """Drop `required`, except what readers index directly: p50/p99 of statistics (and count
    of per-label ones), and the op table's columns."""
    if isinstance(node, dict):
        required = node.get("required") or ()
        if "p50" in required:
            node["required"] = [k for k in ("p50", "p99") if k in required]
        elif "rows" not in required:
            node.pop("required", None)
        for value in node.values():
            _drop_required(value)
    elif isinstance(node, list):
        for value in node:
            _drop_required(value)
    return node


def _point_schema(key: JsonObject) -> JsonObject:
    return {
        "type": "object",
        "required": ["key", "status"],
        "properties": {
            "key": key,
            "status": {"type": "string"},
            "error": _STR_OR_NULL,
            "duration_s": _NUM_OR_NULL,
            "returncode": _INT_OR_NULL,
            "result": {"oneOf": [{"type": "null"}, _run_schema()]},
        },
        "if": {"properties": {"status": {"const": "ok"}}},
        "then": {"required": ["result"], "properties": {"result": {"type": "object"}}},
    }


_SWEEP_KEY = {
    "type": "object",
    "required": ["workload", "streams"],
    "properties": {"workload": {"type": "string"}, "streams": {"type": "integer", "minimum": 1}},
}
_POLICY_KEY = {
    "type": "object",
    "required": ["workload", "streams", "policy"],
    "properties": {
        "workload": {"type": "string"},
        "streams": {"type": "integer", "minimum": 1},
        "policy": {"type": "string"},
        "repeat": {"type": "integer", "minimum": 1},
    },
}
_CAUSE_NAMES = [
    "host_launch_bound",
    "queue_multiplexing",
    "device_saturated",
    "copy_bound",
    "collective_bound",
    "synchronisation",
    "memory_pressure",
]
_DIAGNOSIS = {  # analysis/diagnosis.py; docs/sweep-compare-report.md#diagnosis
    "type": ["object", "null"],
    "required": ["subject", "text", "causes", "checked"],
    "properties": {
        "subject": {"enum": ["scales", "scaling_uncertain", "knee", "no_scaling"]},
        "text": {"type": "string"},
        "knee_streams": _INT_OR_NULL,
        "examined_streams": _INT_OR_NULL,
        "rules": {"type": "string"},
        "causes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["cause", "confidence", "evidence", "text"],
                "properties": {
                    "cause": {"enum": _CAUSE_NAMES},
                    "label": {"type": "string"},
                    "confidence": {"enum": ["high", "medium", "low"]},
                    "confidence_reason": {"type": "string"},
                    "primary_figure": {"type": "string"},
                    "threshold": {"type": "number"},
                    "runs": {"type": "integer", "minimum": 1},
                    "runs_holding": {"type": "integer", "minimum": 0},
                    "score": {"type": "number"},
                    "evidence": {"type": "object", "additionalProperties": _NUM_OR_NULL},
                    "text": {"type": "string"},
                },
            },
        },
        "checked": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["cause", "status"],
                "properties": {
                    "cause": {"enum": _CAUSE_NAMES},
                    "status": {"enum": ["supported", "not_supported", "not_measured"]},
                    "reason": _STR_OR_NULL,
                },
            },
        },
    },
}
_ANALYSIS = {
    "type": ["object", "null"],
    "properties": {
        "stream_counts": {"type": "array", "items": {"type": "integer"}},
        "efficiency": {"type": "array", "items": _NUM_OR_NULL},
        "peak_streams": _INT_OR_NULL,
        "peak_throughput": _NUM_OR_NULL,
        "knee_streams": _INT_OR_NULL,
        "latency_jump_streams": _INT_OR_NULL,
        "dispatch_jump_streams": _INT_OR_NULL,
        "pool_size": _INT_OR_NULL,
        "pool_source": _STR_OR_NULL,
        "cpu_cores": _INT_OR_NULL,
        "backend": _STR_OR_NULL,
        "verdict": _STR_OR_NULL,
        "knee_reason": _STR_OR_NULL,
        "steps": {"type": "array", "items": {"type": "object"}},
        # upstream AORTA's names (results/upstream_keys.py)
        "throughputs": {"type": "array", "items": _NUM_OR_NULL},
        "efficiencies": {"type": "array", "items": _NUM_OR_NULL},
        "inflection_point": _INT_OR_NULL,
        "peak_stream_count": _INT_OR_NULL,
        "diagnosis": _DIAGNOSIS,
    },
}
_STRINGS_OR_NULL = {"type": ["array", "null"], "items": {"type": "string"}}
_NUMBERS_OR_NULL = {"type": ["object", "null"], "additionalProperties": _NUM_OR_NULL}
_CHANGE = {  # one metric of a row's vs_baseline (analysis/stats.py's comparison as a dict)
    "type": ["object", "null"],
    "properties": {
        "verdict": _STR_OR_NULL,
        "change_pct": _NUM_OR_NULL,
        "change_ci_pct": {"type": ["array", "null"], "items": _NUM_OR_NULL, "minItems": 2},
        "change_ci_level": _NUM_OR_NULL,
    },
}
#: Every field of a policy-sweep summary row that a reader shows (report, the console table)
_POLICY_ROW = {
    "type": "object",
    "required": ["policy"],
    "properties": {
        "policy": {"type": "string"},
        "status": _STR_OR_NULL,
        "reason": _STR_OR_NULL,
        "throughput": _NUM_OR_NULL,
        "throughput_unit": _STR_OR_NULL,
        "throughput_ci": _NUMBERS_OR_NULL,
        "latency_ms": _NUMBERS_OR_NULL,
        "switch_overhead_ms": _NUM_OR_NULL,
        "concurrency": _NUM_OR_NULL,
        "ignored_env": _STRINGS_OR_NULL,
        "runs": {"type": ["array", "null"], "items": _NUMBERS_OR_NULL},
        "in_effect": {
            "type": ["object", "null"],
            "properties": {
                "env": {"type": ["object", "null"], "additionalProperties": _STR_OR_NULL},
                "env_mismatch": _STRINGS_OR_NULL,
                "queue_pool_size": _INT_OR_NULL,
                "clock_level": _INT_OR_NULL,
                "clock_mhz": _NUM_OR_NULL,
                "power_limit_w": _NUM_OR_NULL,
                "gpu_verified": {"type": ["boolean", "null"]},
            },
        },
        "vs_baseline": {
            "type": ["object", "null"],
            "properties": {"throughput": _CHANGE, "latency": _CHANGE, "reason": _STR_OR_NULL},
        },
    },
}
_BEST = {"type": ["object", "null"], "properties": {"text": _STR_OR_NULL}}
_POLICY_SUMMARY = {
    "type": ["object", "null"],
    "properties": {
        "rows": {"type": "array", "items": _POLICY_ROW},
        "best_throughput": _BEST,
        "best_p99": _BEST,
        "not_applicable": {"type": "array", "items": {"type": "string"}},
        "queue_pools": _OBJ_OR_NULL,
        "verdict_rule": _STR_OR_NULL,
    },
}
_CHECKPOINT_HEADER = {
    "schema_version": {"type": "integer", "enum": list(range(1, SCHEMA_VERSION + 1))},
    "tool": _OBJ_OR_NULL,
    "created": {"type": "string"},
    "updated": {"type": "string"},
    "fingerprint": {"type": "string"},
    "state": {"type": "string"},
    "workload": {"type": "string"},
    "throughput_unit": _STR_OR_NULL,
    "run_options": {"type": "object"},
    "settings": _OBJ_OR_NULL,
    "flags": {"type": "array"},
    "stream_counts": {"type": "array", "items": {"type": "integer"}},
}
SWEEP_SCHEMA = {
    "type": "object",
    "required": ["kind"],
    "properties": {
        **_CHECKPOINT_HEADER,
        "kind": {"const": "sweep"},
        "points": {"type": "array", "items": _point_schema(_SWEEP_KEY)},
        "analysis": _ANALYSIS,
    },
}
POLICY_SWEEP_SCHEMA = {
    "type": "object",
    "required": ["kind"],
    "properties": {
        **_CHECKPOINT_HEADER,
        "kind": {"enum": ["policy_sweep", "policy-sweep"]},
        "streams": {"type": "integer", "minimum": 1},
        "repeats": {"type": "integer", "minimum": 1},
        "summary": _POLICY_SUMMARY,
        "points": {"type": "array", "items": _point_schema(_POLICY_KEY)},
    },
}


#: the timestamp upstream writes: `datetime.now().isoformat()` (local time, microseconds, no
#: zone), or with a zone; ours are UTC to the second (the run schema)
_UPSTREAM_TIMESTAMP = {
    "type": "string",
    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)?$",
}
_NUMBERS = {"type": ["object", "null"], "additionalProperties": _NUM_OR_NULL}
_INT_MAP = {"type": "object", "additionalProperties": {"type": "integer"}}


@functools.cache
def _upstream_run_schema() -> JsonObject:
    """A run as upstream AORTA 0.2.0-0.3.0 writes it (`HarnessResult.to_json`): its own types
    (its switch, memory and eBPF sections are not ours), latency under `latency_ms` or, in older
    files, `latency` {p50_ms, ...}."""
    return {
        "type": "object",
        "required": ["workload_name", "stream_count"],
        "properties": {
            "workload_name": {"type": "string"},
            "stream_count": {"type": "integer", "minimum": 1},
            "timestamp": _UPSTREAM_TIMESTAMP,
            "throughput": _NUM_OR_NULL,
            "throughput_unit": _STR_OR_NULL,
            "total_time_ms": _NUM_OR_NULL,
            "latency_ms": _NUMBERS,
            "latency": _NUMBERS,
            "iteration_times_ms": {"type": ["array", "null"], "items": {"type": "number"}},
            "per_stream_times_ms": {"type": ["array", "null"], "items": {"type": "number"}},
            "switch_latency": _NUMBERS,
            "memory": _NUMBERS,
            "ebpf_queue_metrics": {
                "type": ["object", "null"],
                "properties": {
                    "total_submissions": {"type": "integer"},
                    "total_dispatches": {"type": "integer"},
                    "per_ring_submissions": _INT_MAP,
                    "per_ring_dispatches": _INT_MAP,
                    "rings_used": {"type": "array", "items": {"type": "integer"}},
                },
                "additionalProperties": _NUM_OR_NULL,
            },
            "ebpf_memory_metrics": {
                "type": ["object", "null"],
                "properties": {"bpftrace_stderr": _STR_OR_NULL},
                "additionalProperties": _NUM_OR_NULL,
            },
            "ebpf_vs_cuda": {
                "type": ["object", "null"],
                "properties": {"ebpf_rings_used": {"type": "array", "items": {"type": "integer"}}},
                "additionalProperties": _NUM_OR_NULL,
            },
            "metadata": _OBJ_OR_NULL,
        },
    }


def _upstream(kind: str) -> JsonObject:
    """The upstream tool's files: `save_sweep_results` ({timestamp, workload, results[],
    environment, analysis}), its policy comparison ({workload, stream_count, timestamp,
    results: [{policy, result}]}), and `{"policies": {name: run}}`; runs as upstream writes them."""
    run = _upstream_run_schema()
    named = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    if kind == "results":
        policy_entry = {
            "type": "object",
            "required": ["policy", "result"],
            "properties": {
                "policy": named,
                "result": run,
            },
        }
        return {
            "type": "object",
            "required": ["results"],
            "properties": {
                "timestamp": _UPSTREAM_TIMESTAMP,
                "workload": _STR_OR_NULL,
                "results": {
                    "type": "array",
                    "items": {"if": {"required": ["policy"]}, "then": policy_entry, "else": run},
                },
                "environment": _OBJ_OR_NULL,
                "analysis": _OBJ_OR_NULL,
            },
        }
    return {
        "type": "object",
        "required": ["policies"],
        "properties": {"policies": {"type": "object", "additionalProperties": run}},
    }


def schema_for(data: Any) -> tuple[str, JsonObject]:
    """(what the file is, its schema) from its kind; UsageError when it is no result at all."""
    if not isinstance(data, dict):
        raise UsageError("top level is not a JSON object: not an aorta result")
    kind = data.get("kind")
    if kind == "run" or (kind is None and "schema_version" in data and "stream_count" in data):
        return "run result", _run_schema()
    if kind == "sweep":
        return "sweep file", SWEEP_SCHEMA
    if kind in ("policy_sweep", "policy-sweep"):
        return "policy-sweep file", POLICY_SWEEP_SCHEMA
    if kind is not None:
        raise UsageError(
            f"unknown result kind {str(kind)[:40]!r}: run, sweep and policy-sweep files are read"
        )
    if "schema_version" not in data:
        if "results" in data:
            return "upstream sweep", _upstream("results")
        if "policies" in data:
            return "upstream policy evaluation", _upstream("policies")
        if "workload_name" in data:
            return "upstream run result", _upstream_run_schema()
    raise UsageError(
        "not an aorta result (no kind, schema_version or workload_name): was it "
        "written by `run`, `sweep` or `policy-sweep`?"
    )


def problem(data: Any, schema: JsonObject) -> str | None:
    """The most relevant schema violation of `data` as 'where: what', or None when valid."""
    import jsonschema

    depth, huge = _walk(data)
    if depth > MAX_DEPTH:
        return f"nested {depth} levels deep (at most {MAX_DEPTH})"
    if huge is not None:
        return f"integer {str(huge)[:24]}… does not fit in 64 bits"
    validator = _strict_validator()(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{where.lstrip('.') or 'top level'}: {message}"


@functools.cache
def _strict_validator() -> Any:
    """Draft 2020-12, except that "integer" means a JSON integer: 1.0 and 1e308 are numbers
    (the spec counts them as integers, but the readers index lists and count with them)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)


def check_input(path: str | os.PathLike[str], data: Any) -> str:
    """Validate a file read as input; returns what it is, UsageError (one line) when invalid."""
    try:
        what, schema = schema_for(data)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    found = None  # copies of a point first: they are cheap to find, and costly to validate
    if what in ("sweep file", "policy-sweep file") and isinstance(data.get("points"), list):
        found = duplicate_point(data["points"])
    found = found or problem(data, schema)
    if found is not None:
        raise UsageError(f"{path}: invalid {what}: {found}; regenerate it with aorta or fix that field")
    return what


def duplicate_point(points: list[Any]) -> str | None:
    """'points[j]: …' when two points share a key (a checkpoint holds each point once: a new
    measurement replaces the old), else None. Thousands of copies of one point are no repeats."""
    import json

    seen: dict[str, int] = {}
    for index, point in enumerate(points):
        key = point.get("key") if isinstance(point, dict) else None
        if not isinstance(key, dict):
            continue
        text = json.dumps(key, sort_keys=True)
        if text in seen:
            return f"points[{index}]: the key {text[:80]} appears twice (also points[{seen[text]}])"
        seen[text] = index
    return None


def point_problem(point: Any, kind: str) -> str | None:
    """Why one checkpoint point of a `kind` file cannot be trusted (None: valid)."""
    key = _POLICY_KEY if kind in ("policy_sweep", "policy-sweep") else _SWEEP_KEY
    return problem(point, _point_schema(key))


def nesting_depth(data: Any) -> int:
    """Depth of nested lists/objects (iterative: deep input cannot exhaust the stack here)."""
    return _walk(data)[0]


def _walk(data: Any) -> tuple[int, int | None]:
    """(nesting depth, first integer beyond 64 bits or None), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item < 1 << 64:
                return deepest, item
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth, None
        stack.extend((child, depth + 1) for child in children)
    return deepest, None

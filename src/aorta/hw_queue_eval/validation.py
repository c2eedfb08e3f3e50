"""Validate result files read as input (compare, report, --resume) against the JSON schema.

One validator for every reader, run before any work: a file that does not match is a one-line
UsageError naming the file, where in it the problem is and what was expected. Shapes:

* our run result: schema/run_result.v1.json, as written by `run`;
* sweep / policy-sweep files: their header keys typed, every point `{key, status, result}` with
  `result` a run result (or null); a point with status "ok" must carry one;
* the upstream tool's layouts (a run, `{"results": [...]}`, `{"policies": {name: run}}`): the
  fields compare reads, typed.

Every number must be finite (the JSON reader refuses NaN and Infinity), and nesting is bounded.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any

from aorta.common.errors import UsageError

MAX_DEPTH = 64  # our files nest about 10 deep; deeper input only serves to exhaust recursion
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_OBJ_OR_NULL = {"type": ["object", "null"]}


@functools.cache
def _run_schema() -> dict[str, Any]:
    from aorta.hw_queue_eval.results import run_result_schema

    schema = copy.deepcopy(run_result_schema())
    schema.pop("$schema", None)
    schema.pop("$id", None)
    return schema


def _point_schema(key: dict[str, Any]) -> dict[str, Any]:
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


_SWEEP_KEY = {"type": "object", "required": ["workload", "streams"],
              "properties": {"workload": {"type": "string"},
                             "streams": {"type": "integer", "minimum": 1}}}
_POLICY_KEY = {"type": "object", "required": ["workload", "streams", "policy"],
               "properties": {"workload": {"type": "string"},
                              "streams": {"type": "integer", "minimum": 1},
                              "policy": {"type": "string"},
                              "repeat": {"type": "integer", "minimum": 1}}}
_ANALYSIS = {
    "type": ["object", "null"],
    "properties": {
        "stream_counts": {"type": "array", "items": {"type": "integer"}},
        "efficiency": {"type": "array", "items": _NUM_OR_NULL},
        "peak_streams": _INT_OR_NULL, "peak_throughput": _NUM_OR_NULL,
        "knee_streams": _INT_OR_NULL, "latency_jump_streams": _INT_OR_NULL,
        "dispatch_jump_streams": _INT_OR_NULL, "pool_size": _INT_OR_NULL,
        "pool_source": _STR_OR_NULL, "cpu_cores": _INT_OR_NULL, "backend": _STR_OR_NULL,
        "verdict": _STR_OR_NULL,
        "steps": {"type": "array", "items": {"type": "object"}},
    },
}
_CHECKPOINT_HEADER = {
    "schema_version": {"const": 1},
    "created": {"type": "string"}, "updated": {"type": "string"},
    "fingerprint": {"type": "string"}, "state": {"type": "string"},
    "workload": {"type": "string"}, "throughput_unit": _STR_OR_NULL,
    "run_options": {"type": "object"}, "settings": _OBJ_OR_NULL, "flags": {"type": "array"},
    "stream_counts": {"type": "array", "items": {"type": "integer"}},
}
SWEEP_SCHEMA = {
    "type": "object", "required": ["schema_version", "kind", "points"],
    "properties": {**_CHECKPOINT_HEADER, "kind": {"const": "sweep"},
                   "points": {"type": "array", "items": _point_schema(_SWEEP_KEY)},
                   "analysis": _ANALYSIS},
}
POLICY_SWEEP_SCHEMA = {
    "type": "object", "required": ["schema_version", "kind", "points"],
    "properties": {**_CHECKPOINT_HEADER, "kind": {"enum": ["policy_sweep", "policy-sweep"]},
                   "streams": {"type": "integer", "minimum": 1},
                   "repeats": {"type": "integer", "minimum": 1},
                   "policies": {"type": "array", "items": {"type": "object"}},
                   "summary": _OBJ_OR_NULL,
                   "points": {"type": "array", "items": _point_schema(_POLICY_KEY)}},
}
_UPSTREAM_RUN = {
    "type": "object", "required": ["workload_name", "stream_count"],
    "properties": {
        "workload_name": {"type": "string"},
        "stream_count": {"type": "integer", "minimum": 1},
        "status": {"type": "string"}, "error": _STR_OR_NULL,
        "iteration_times_ms": {"type": ["array", "null"], "items": {"type": "number"}},
        "throughput": _NUM_OR_NULL, "throughput_unit": _STR_OR_NULL,
        "latency_ms": {"type": ["object", "null"], "additionalProperties": _NUM_OR_NULL},
        "latency": {"type": ["object", "null"], "additionalProperties": _NUM_OR_NULL},
        "config": _OBJ_OR_NULL,
        "metadata": {"type": ["object", "null"],
                     "properties": {"work_per_iteration": _NUM_OR_NULL, "config": _OBJ_OR_NULL}},
        "switch_latency": {"type": ["object", "null"],
                           "properties": {"switch_overhead_ms": _NUM_OR_NULL}},
        "concurrency": {"type": ["object", "null"], "properties": {"achieved": _NUM_OR_NULL}},
        "policy": {"type": "string"}, "policy_name": {"type": "string"},
        "ebpf_queue_metrics": _OBJ_OR_NULL, "ebpf_memory_metrics": _OBJ_OR_NULL,
        "ebpf_vs_cuda_comparison": _OBJ_OR_NULL, "ebpf_vs_cuda": _OBJ_OR_NULL,
    },
}
UPSTREAM_SWEEP_SCHEMA = {"type": "object", "required": ["results"],
                         "properties": {"results": {"type": "array", "items": _UPSTREAM_RUN}}}
UPSTREAM_POLICIES_SCHEMA = {"type": "object", "required": ["policies"],
                            "properties": {"policies": {"type": "object",
                                                        "additionalProperties": _UPSTREAM_RUN}}}


def schema_for(data: Any) -> tuple[str, dict[str, Any]]:
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
        raise UsageError(f"unknown result kind {str(kind)[:40]!r}: run, sweep and policy-sweep "
                         "files are read")
    if "schema_version" not in data:
        if "results" in data:
            return "upstream sweep", UPSTREAM_SWEEP_SCHEMA
        if "policies" in data:
            return "upstream policy evaluation", UPSTREAM_POLICIES_SCHEMA
        if "workload_name" in data:
            return "upstream run result", _UPSTREAM_RUN
    raise UsageError("not an aorta result (no kind, schema_version or workload_name): was it "
                     "written by `run`, `sweep` or `policy-sweep`?")


def problem(data: Any, schema: dict[str, Any]) -> str | None:
    """The most relevant schema violation of `data` as 'where: what', or None when valid."""
    import jsonschema

    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        return f"nested {depth} levels deep (at most {MAX_DEPTH})"
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{where.lstrip('.') or 'top level'}: {message}"


def check_input(path: str | os.PathLike[str], data: Any) -> str:
    """Validate a file read as input; returns what it is, UsageError (one line) when invalid."""
    try:
        what, schema = schema_for(data)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None
    found = problem(data, schema)
    if found is not None:
        raise UsageError(f"{path}: invalid {what}: {found}; regenerate it with aorta or fix that "
                         "field")
    return what


def point_problem(point: Any, kind: str) -> str | None:
    """Why one checkpoint point of a `kind` file cannot be trusted (None: valid)."""
    key = _POLICY_KEY if kind in ("policy_sweep", "policy-sweep") else _SWEEP_KEY
    return problem(point, _point_schema(key))


def nesting_depth(data: Any) -> int:
    """Depth of nested lists/objects (iterative: deep input cannot exhaust the stack here)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest

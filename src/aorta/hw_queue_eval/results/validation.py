"""Validate result files read as input (compare, report, --resume) against the JSON schema.

One validator for every reader, run before any work: a file that does not match is a one-line
UsageError naming the file, where in it the problem is and what was expected. Shapes:

* a run result: the types of the current run schema, schema/run_result.v2.json (only
  workload_name and stream_count required: older files and the upstream tool's runs lack the rest);
* sweep / policy-sweep files: their header keys typed, every point `{key, status, result}` with
  `result` a run result (or null); a point with status "ok" must carry one;
* the upstream tool's layouts (`{"results": [...]}`, `{"policies": {name: run}}`): runs as above.

Every number must be finite (the JSON reader refuses NaN and Infinity) and every integer fit in
64 bits (numpy cannot hold more), and nesting is bounded.
"""

from __future__ import annotations

import copy
import functools
import os
from typing import Any

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.results.schema import SCHEMA_VERSION, run_result_schema

INT64_MIN = -(1 << 63)
MAX_DEPTH = 64  # our files nest about 10 deep; deeper input only serves to exhaust recursion
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_STR_OR_NULL = {"type": ["string", "null"]}
_OBJ_OR_NULL = {"type": ["object", "null"]}


@functools.cache
def _run_schema() -> dict[str, Any]:
    """The run schema as readers apply it: every type, const and enum of the current schema, but
    only workload_name and stream_count required (older and upstream files lack the rest, and the
    readers show what is missing as n/a)."""
    schema = _drop_required(copy.deepcopy(run_result_schema()))
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
        "steps": {"type": "array", "items": {"type": "object"}},
    },
}
_POLICY_SUMMARY = {
    "type": ["object", "null"],
    "properties": {
        "rows": {"type": "array", "items": {"type": "object"}},
        "best_throughput": _OBJ_OR_NULL,
        "best_p99": _OBJ_OR_NULL,
        "not_applicable": {"type": "array", "items": {"type": "string"}},
        "queue_pools": _OBJ_OR_NULL,
        "verdict_rule": _STR_OR_NULL,
    },
}
_CHECKPOINT_HEADER = {
    "schema_version": {"type": "integer", "enum": list(range(1, SCHEMA_VERSION + 1))},
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


def _upstream(kind: str) -> dict[str, Any]:
    """The upstream tool's layouts: runs typed as ours (its field names are the same)."""
    if kind == "results":
        return {
            "type": "object",
            "required": ["results"],
            "properties": {"results": {"type": "array", "items": _run_schema()}},
        }
    return {
        "type": "object",
        "required": ["policies"],
        "properties": {"policies": {"type": "object", "additionalProperties": _run_schema()}},
    }


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
        raise UsageError(
            f"unknown result kind {str(kind)[:40]!r}: run, sweep and policy-sweep files are read"
        )
    if "schema_version" not in data:
        if "results" in data:
            return "upstream sweep", _upstream("results")
        if "policies" in data:
            return "upstream policy evaluation", _upstream("policies")
        if "workload_name" in data:
            return "upstream run result", _run_schema()
    raise UsageError(
        "not an aorta result (no kind, schema_version or workload_name): was it "
        "written by `run`, `sweep` or `policy-sweep`?"
    )


def problem(data: Any, schema: dict[str, Any]) -> str | None:
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
    found = problem(data, schema)
    if found is not None:
        raise UsageError(f"{path}: invalid {what}: {found}; regenerate it with aorta or fix that field")
    return what


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

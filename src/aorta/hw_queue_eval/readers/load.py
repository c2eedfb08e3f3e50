"""Load a result file of any kind aorta writes, or the upstream tool's layout: validated, then upgraded."""

from __future__ import annotations

import os

from aorta.common.atomicio import read_json_file
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.readers.upgrade import upgrade
from aorta.hw_queue_eval.results.schema import SCHEMA_VERSION
from aorta.hw_queue_eval.results.validation import check_input


def load_result(path: str | os.PathLike[str]) -> JsonObject:
    """Read a JSON result file of any kind aorta writes (or the upstream tool's layout).

    The file is validated against the schema first (validation.py), then schema-v1 files come
    back upgraded to v2 (upgrade.py). Raises UsageError (one line) if unreadable, not a result at
    all, or invalid.
    """
    data = read_json_file(path, "result file")
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not an aorta result: top level is not a JSON object")
    if (
        "schema_version" in data
        or "workload_name" in data
        or "results" in data
        or "points" in data
        or "policies" in data
    ):
        version = data.get("schema_version")
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise UsageError(
                f"{path} has schema_version {version}, newer than this aorta reads "
                f"({SCHEMA_VERSION}): upgrade aorta"
            )
        check_input(path, data)
        return upgrade(data)
    raise UsageError(
        f"{path} is not an aorta result (no schema_version/workload_name): "
        "was it written by `run`, `sweep` or `policy-sweep`?"
    )

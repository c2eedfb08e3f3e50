"""The JSON Schema files of the result formats (package data) and the version they describe.

Its own module so the result model and the input validation both read it without importing
each other.
"""

from __future__ import annotations

import json
from pathlib import Path

from aorta.common.jsontypes import JsonObject

SCHEMA_VERSION = 2  # v1 files are upgraded on load (readers/upgrade.py)

SCHEMA_FILE = Path(__file__).parent / "run_result.v2.json"


def run_result_schema() -> JsonObject:
    """The JSON Schema of a run result (the documented contract, docs/results-schema.md)."""
    schema: JsonObject = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema

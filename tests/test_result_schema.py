"""A real run's JSON validates against the published JSON Schema, and the docs cover every key."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from aorta.hw_queue_eval.results.run_result import REQUIRED_KEYS, run_result_schema, validate_run_dict
from aorta.hw_queue_eval.run.config import RunConfig
from aorta.hw_queue_eval.run.harness import run_benchmark

DOC = Path(__file__).resolve().parents[1] / "docs" / "results-schema.md"


@pytest.fixture(scope="module")
def result_dict():
    return run_benchmark(RunConfig(workload="moe", streams=4, iterations=3, warmup=1, device="cpu")).to_dict()


def test_run_result_matches_json_schema(result_dict):
    jsonschema.validate(result_dict, run_result_schema())


@pytest.mark.slow
def test_schema_rejects_broken_results(result_dict):
    schema = run_result_schema()
    for mutate in (
        lambda d: d.pop("throughput"),
        lambda d: d.update(stream_count=0),
        lambda d: d.update(status="maybe"),
        lambda d: d["latency_ms"].pop("p99"),
    ):
        broken = {**result_dict, "latency_ms": dict(result_dict["latency_ms"])}
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)
        assert validate_run_dict(broken) != []


def test_every_key_is_documented():
    text = DOC.read_text()
    missing = [key for key in REQUIRED_KEYS if f"`{key}`" not in text]
    assert not missing, f"docs/results-schema.md does not describe: {missing}"

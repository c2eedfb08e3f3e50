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


def test_factory_fixtures_have_a_real_runs_layout(result_dict):
    """The test factory builds results through the same models: same top-level keys, in the same
    order, as a real run, and the same keys in every section it fills."""
    from factories import run_result

    fixture = run_result(workload="moe", streams=4)
    assert list(fixture) == list(result_dict)
    for section in ("switch_latency", "ops", "latency_ms", "verification", "metadata"):
        assert set(fixture[section]) == set(result_dict[section]), section
    assert set(fixture["concurrency"]) <= set(result_dict["concurrency"])
    assert set(fixture["config"]) == set(result_dict["config"])


def test_factory_fixtures_validate_and_never_layouts_the_tracer_does_not_write():
    from factories import InvalidFixture, queue_section, run_result, schema_problem

    traced = run_result(ebpf_queue_metrics=queue_section("cpu_sched", p99_us=12.5))
    assert schema_problem(traced) is None
    assert traced["ebpf_queue_metrics"]["submit_to_dispatch_p99_us"] == 12.5
    # a nested "submit_to_dispatch": {"p99_us": …} is no layout the engine writes: the summary's
    # documented keys are missing, so the published schema refuses it
    nested = {"status": "ok", "error": None, "families": {}, "submit_to_dispatch": {"p99_us": 12.5}}
    problem = schema_problem({**traced, "ebpf_queue_metrics": nested})
    assert problem is not None
    assert problem.startswith("ebpf_queue_metrics")
    with pytest.raises(InvalidFixture, match="ebpf_queue_metrics"):
        run_result(ebpf_queue_metrics=nested)
    # no status at all (a section without the engine's header) is refused too
    with pytest.raises(InvalidFixture):
        run_result(ebpf_queue_metrics={"total_submissions": 800, "latency": {"p99_us": 45.7}})
    # a wrong type where the summary's figure goes
    with pytest.raises(InvalidFixture):
        run_result(ebpf_queue_metrics={**queue_section(), "submit_to_dispatch_p99_us": "12 us"})
    with pytest.raises(InvalidFixture, match="not sections"):
        run_result(ebpf_queue_metric=None)  # a typo, not a section
    # an untraced section (no bpftrace) carries only its status and the reason
    untraced = {"status": "unavailable", "error": "bpftrace not found", "bpftrace": None}
    assert schema_problem({**traced, "ebpf_queue_metrics": untraced}) is None

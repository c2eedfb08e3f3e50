"""A real run's JSON validates against the published JSON Schema, and the docs cover every key."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.results.run_result import REQUIRED_KEYS, run_result_schema, validate_run_dict
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


def test_every_section_of_a_real_run_has_exactly_its_models_keys(result_dict):
    """The models describe what the producers write: a real run's section carries every required
    key of its model and no key the model does not declare (nested sections too)."""
    from aorta.hw_queue_eval.results import models

    def check(model, section, where):
        keys = set(section)
        assert model.__required_keys__ <= keys, (where, model.__required_keys__ - keys)
        declared = model.__required_keys__ | model.__optional_keys__
        assert keys <= declared, (where, keys - declared)

    for key, model in (
        ("latency_ms", models.Stats),
        ("switch_latency", models.SwitchLatency),
        ("concurrency", models.Concurrency),
        ("ops", models.Ops),
        ("op_intervals", models.OpIntervals),
        ("queue_mapping", models.QueueMapping),
        ("memory", models.Memory),
        ("verification", models.Verification),
        ("metadata", models.UpstreamMetadata),
        ("instrumentation", models.Instrumentation),
        ("tool", models.ToolInfo),
    ):
        check(model, result_dict[key], key)
    check(models.Handoffs, result_dict["ops"]["handoffs"], "ops.handoffs")
    check(models.OpWaits, result_dict["op_intervals"]["waits"], "op_intervals.waits")
    check(models.GcWindow, result_dict["instrumentation"]["gc"], "instrumentation.gc")
    check(models.StreamOrder, result_dict["stream_order"], "stream_order")
    for edge in result_dict["stream_order"]["edges"]:
        check(models.StreamEdge, edge, "stream_order.edges[]")
    for lane, row in result_dict["switch_latency"]["per_lane"].items():
        check(models.LaneSwitches, row, f"switch_latency.per_lane.{lane}")
    for pair in result_dict["switch_latency"]["pairs"]:
        check(models.SwitchPair, pair, "switch_latency.pairs[]")
    for label, stats in result_dict["ops"]["per_label"].items():
        check(models.Stats, stats, f"ops.per_label.{label}")

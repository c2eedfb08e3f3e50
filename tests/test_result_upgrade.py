"""Schema v2 and its v1 reader: a real v1 file (written by the v1 code) still loads and renders."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.results.run_result import SCHEMA_VERSION, load_result, run_result_schema
from aorta.hw_queue_eval.results.upgrade import ops_from_intervals, upgrade
from aorta.hw_queue_eval.run import metrics

V1_FILE = Path(__file__).parent / "fixtures" / "run_v1_hetero8.json"


def test_v1_run_upgrades_to_a_valid_v2_run():
    raw = json.loads(V1_FILE.read_text())
    assert raw["schema_version"] == 1
    assert "max_abs_error" in raw["verification"]
    data = load_result(V1_FILE)
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert data["upgraded_from"] == 1
    assert data["verification"]["max_rel_error"] == raw["verification"]["max_abs_error"]
    assert "max_abs_error" not in data["verification"]
    jsonschema.validate(data, run_result_schema())
    # the switch figure is recomputed like for like from the file's own ops, the v1 one kept aside
    sw = data["switch_latency"]
    assert sw["v1"] == raw["switch_latency"]
    expected = metrics.switch_analysis(ops_from_intervals(raw["op_intervals"]))
    assert sw["switch_overhead_ms"] == expected["switch_overhead_ms"]
    assert sw["switch_count"] == expected["switch_count"] == raw["switch_latency"]["inter_gap_count"]
    assert data["concurrency"]["on_cpu_queues"] is None
    assert "schema v1" in data["concurrency"]["on_cpu_reason"]
    assert raw == json.loads(V1_FILE.read_text())  # the file itself is never rewritten


def test_ops_round_trip_through_the_interval_table():
    raw = json.loads(V1_FILE.read_text())
    ops = ops_from_intervals(raw["op_intervals"])
    assert len(ops) == raw["op_intervals"]["total_ops"]
    first = raw["op_intervals"]["rows"][0]
    assert ops[0].start_ns == round(first[5] * 1000)
    assert ops[0].stream == first[1]


def test_v1_without_op_intervals_has_null_switch_overhead_with_reason():
    raw = json.loads(V1_FILE.read_text())
    raw["op_intervals"] = None
    data = upgrade(raw)
    assert data["switch_latency"]["switch_overhead_ms"] is None
    assert "cannot be recomputed" in data["switch_latency"]["reason"]
    jsonschema.validate(data, run_result_schema())


def test_v1_sweep_points_are_upgraded():
    raw = json.loads(V1_FILE.read_text())
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "points": [{"key": {"streams": 8}, "status": "ok", "result": raw}],
    }
    data = upgrade(sweep)
    assert data["points"][0]["result"]["schema_version"] == 2
    assert "max_rel_error" in data["points"][0]["result"]["verification"]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.json"
    path.write_text(json.dumps({"schema_version": 3, "kind": "run", "workload_name": "x"}))
    with pytest.raises(UsageError, match="newer than this aorta reads"):
        load_result(path)


def test_v1_file_renders_in_the_console():
    from rich.console import Console

    from aorta.hw_queue_eval.report.console import render_run

    console = Console(record=True, width=200)
    render_run(load_result(V1_FILE), console)
    text = console.export_text()
    assert "Switch overhead (like for like)" in text
    assert "Queues running on a CPU" not in text  # never measured in v1: not shown

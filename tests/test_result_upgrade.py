"""Schema v2 and its v1 reader: a real v1 file (written by the v1 code) still loads and renders."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.ops import metrics
from aorta.hw_queue_eval.readers.load import load_result
from aorta.hw_queue_eval.readers.upgrade import ops_from_intervals, upgrade
from aorta.hw_queue_eval.results.run_result import SCHEMA_VERSION, run_result_schema

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
    assert "Switch overhead (like for like, ready gaps)" in text
    assert "none: every next op was ready when the lane freed" in text
    assert "Queues running on a CPU" not in text  # never measured in v1: not shown


def _pre_split_run(truncated: bool = False) -> dict:
    """A v2 run as written before launch waits were split out: its switch_overhead_ms compared
    every gap (the hand lane of test_metrics: +50 µs over all gaps, +0.5 µs over ready ones)."""
    from factories import op_intervals, run_result
    from test_metrics import hand_lane

    ops = hand_lane()
    rows = [
        [o.iteration, o.stream, o.queue, 0, o.ready_ns / 1e3, o.start_ns / 1e3, o.end_ns / 1e3] for o in ops
    ]
    table = op_intervals(rows, ["k"])
    table["truncated"] = truncated
    run = run_result(streams=2, op_intervals=table, iteration_times_ms=[0.4])
    old = metrics.switch_analysis(ops)
    for key in ("gap_readiness", "launch_starvation", "all_gaps"):
        old.pop(key)
    for lane in old["per_lane"].values():
        lane.pop("launch_wait_gaps")
        lane.pop("launch_wait_total_ms")
    old["switch_overhead_ms"] = 0.050  # what the code before the split computed for these ops
    run["switch_latency"] = old
    return run


def test_v2_run_from_before_the_split_is_recomputed_over_ready_gaps():
    run = _pre_split_run()
    data = upgrade(run)
    sw = data["switch_latency"]
    assert sw["switch_overhead_ms"] == pytest.approx(0.0005)
    assert sw["launch_starvation"]["gaps"] == 2
    assert sw["launch_starvation"]["share_of_lane_time"] == pytest.approx(0.299 / 0.4)
    assert sw["launch_starvation"]["cross_stream_waits"] == 0
    assert sw["before_split"]["switch_overhead_ms"] == 0.050
    assert "before launch waits were split out" in sw["upgrade_note"]
    assert "gap_readiness" not in run["switch_latency"]  # the input is never modified
    jsonschema.validate(data, run_result_schema())
    assert upgrade(data) is data  # a current file comes back as is
    sweep = {"schema_version": 2, "kind": "sweep", "points": [{"key": {}, "status": "ok", "result": run}]}
    assert upgrade(sweep)["points"][0]["result"]["switch_latency"]["switch_overhead_ms"] == pytest.approx(
        0.0005
    )


def test_v2_run_from_before_the_split_without_every_op_has_null_with_the_reason():
    data = upgrade(_pre_split_run(truncated=True))
    sw = data["switch_latency"]
    assert sw["switch_overhead_ms"] is None and "before launch waits were split out" in sw["reason"]
    assert sw["all_gaps"]["switch_overhead_ms"] == 0.050  # the old figure, under its own name
    assert sw["launch_starvation"]["gaps"] is None
    jsonschema.validate(data, run_result_schema())

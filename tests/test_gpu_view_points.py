"""bench/_gpu_view_points.py, the gpu_check part that counts a driver's graph launches, copies and
cross-stream waits: its reading of the gpu_runtime family's metrics, on known rows (the driver
itself needs a GPU; the family's counting of each API is proven on the real vendor libraries in
tests/test_gpu_runtime_vendor.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from conftest import load_file_module

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module() -> ModuleType:
    return load_file_module(BENCH / "_gpu_view_points.py")


def test_seen_counts_take_only_the_drivers_streams_and_direction():
    views = _module()
    p, c, other = "0x10", "0x20", "0x30"
    metrics = {
        "streams": [{"handle": p, "graph_launches": 40}, {"handle": other, "graph_launches": 7}],
        "copies": [
            {"stream": p, "direction": "H2D", "calls": 25, "bytes": 25 << 20},
            {"stream": p, "direction": "H2D", "calls": 5, "bytes": 5 << 20},  # a second API's row
            {"stream": p, "direction": "D2H", "calls": 3, "bytes": 3},
            {"stream": other, "direction": "H2D", "calls": 9, "bytes": 9},
        ],
        "stream_graph": {
            "edges": [
                {"producer": p, "consumer": c, "waits": 20},
                {"producer": c, "consumer": p, "waits": 4},
            ]
        },
    }
    seen = views.seen_counts(metrics, p, c)
    assert seen == {"graph_launches": 40, "copies": 30, "copy_bytes": 30 << 20, "waits": 20}
    assert seen == views.expected_counts()
    assert views.seen_counts({}, p, c) == dict.fromkeys(seen)  # nothing seen is null, not 0


def test_without_a_gpu_it_says_so_and_fails_nothing(capsys, tmp_path):
    assert _module().run_view_points("cpu", tmp_path, {}) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["check"] for x in lines] == [
        "gpu_runtime_views",
        "gpu_runtime_collectives",
        "gpu_runtime_view_cost",
    ]
    assert all(x["ran"] is False and x["reason"].startswith("device cpu: needs a GPU") for x in lines)


def test_without_ebpf_on_a_gpu_each_line_says_why(capsys, tmp_path):
    views = _module()
    assert views.run_view_points("cuda:0", tmp_path, {}, (False, "bpftrace not on PATH")) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["check"] for x in lines] == [
        "gpu_runtime_views",
        "gpu_runtime_collectives",
        "gpu_runtime_view_cost",
    ]
    assert all(x["ran"] is False and x["reason"] == "no eBPF here: bpftrace not on PATH" for x in lines)


def test_all_reduces_counted_on_the_producer_stream_with_their_bytes():
    """ncclAllReduce rows on the producer only; a row on another stream (c10d's own stream) and
    another op are kept apart; not probed is null, probed and unseen is 0."""
    views = _module()
    p, other = "0x10", "0x30"
    size = views.BYTES
    rows = [
        {"stream": p, "op": "ncclAllReduce", "calls": 20, "bytes": 20 * size},
        {"stream": p, "op": "ncclAllReduce", "calls": 5, "bytes": 5 * size},  # a second datatype's row
        {"stream": p, "op": "ncclBroadcast", "calls": 2, "bytes": 8},
        {"stream": other, "op": "ncclAllReduce", "calls": 3, "bytes": 12},
    ]
    seen = views.seen_collectives({"collectives": rows}, p)
    assert seen == {"all_reduces": 25, "bytes": 25 * size, "all_reduces_other_streams": 3}
    state = {"ran": True, "backend": "nccl", "world_size": 1, "bytes_per_call": size}
    line = views.collectives_line(state, {"collectives": rows[:3]}, p)
    assert line["ran"] is True and line["exact"] is True
    assert line["expected"] == {"all_reduces": views.ALL_REDUCES, "bytes": views.ALL_REDUCES * size,
                                "all_reduces_other_streams": 0}  # fmt: skip
    assert line["two_ranks"]["ran"] is False and "2 ranks" in line["two_ranks"]["reason"]
    assert views.collectives_line(state, {"collectives": rows}, p)["exact"] is False  # 3 elsewhere
    assert views.seen_collectives({"collectives": []}, p)["all_reduces"] == 0
    assert views.seen_collectives({}, p) == dict.fromkeys(seen)
    failed = views.collectives_line({"ran": False, "reason": "RuntimeError: no NCCL"}, {}, p)
    assert failed["ran"] is False and failed["reason"].endswith("RuntimeError: no NCCL")


def test_cost_per_call_traced_minus_untraced_beside_what_probe_cost_charges():
    views = _module()
    untraced = {"graph_launches": 10.0, "copies": 20.0, "waits": 4.0, "all_reduces": 30.0}
    traced = {"graph_launches": 11.0, "copies": 22.0, "waits": 6.0, "all_reduces": 31.5}
    by_kind = {
        "graph_launches": {"probe_time_ms": views.GRAPHS * 0.9 / 1e3},
        "copies": {"probe_time_ms": views.COPIES * 1.8 / 1e3},
        "event_records_and_waits": {"probe_time_ms": views.WAITS * 2.2 / 1e3},
        "collectives": {"probe_time_ms": views.ALL_REDUCES * 1.2 / 1e3},
        "collective_groups": {"probe_time_ms": None},  # no cost class: left out
    }
    line = views.cost_line({"untraced": untraced, "traced": traced}, {"probe_cost": {"by_kind": by_kind}})
    per = line["per_call"]
    assert per["copies"] == {"untraced_us": 20.0, "traced_us": 22.0, "added_us": 2.0, "reported_us": 1.8}
    assert per["waits"]["added_us"] == 2.0 and per["waits"]["reported_us"] == pytest.approx(2.2)
    assert per["all_reduces"]["reported_us"] == pytest.approx(1.2)
    measured = views.GRAPHS * 1.0 + views.COPIES * 2.0 + views.WAITS * 2.0 + views.ALL_REDUCES * 1.5
    reported = views.GRAPHS * 0.9 + views.COPIES * 1.8 + views.WAITS * 2.2 + views.ALL_REDUCES * 1.2
    assert line["measured_added_ms"] == pytest.approx(measured / 1e3)
    assert line["reported_ms"] == pytest.approx(reported / 1e3)
    assert line["reported_over_measured"] == pytest.approx(reported / measured)
    # no process group: all-reduces not timed, left out of both totals, never 0
    no_group = {"untraced": {**untraced, "all_reduces": None}, "traced": {**traced, "all_reduces": None}}
    line = views.cost_line(no_group, {"probe_cost": {"by_kind": by_kind}})
    assert line["per_call"]["all_reduces"] == dict.fromkeys(
        ("untraced_us", "traced_us", "added_us", "reported_us")
    )
    assert line["measured_added_ms"] == pytest.approx((measured - views.ALL_REDUCES * 1.5) / 1e3)
    assert views.cost_line({}, {})["ran"] is False


def test_the_drivers_one_rank_group_runs_on_the_cpu_through_a_private_filestore():
    """The driver's process-group set-up, run here with gloo (NCCL needs a GPU): world size 1, a
    FileStore in a new 0700 folder, all-reduces that sum over one rank (unchanged values)."""
    import torch
    import torch.distributed as dist

    driver = load_file_module(BENCH / "_gpu_view_driver.py")
    folder = driver.one_rank_group("gloo")
    try:
        assert (Path(folder).stat().st_mode & 0o777) == 0o700
        assert dist.get_world_size() == 1 and dist.get_backend() == "gloo"
        t = torch.arange(6, dtype=torch.float32)
        assert driver.timed(3, lambda: dist.all_reduce(t), lambda: None) > 0
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert driver.timed(0, lambda: None, lambda: None) is None
    finally:
        dist.destroy_process_group()
        import shutil

        shutil.rmtree(folder)

"""bench/_gpu_view_points.py, the gpu_check part that counts a driver's graph launches, copies and
cross-stream waits: its reading of the gpu_runtime family's metrics, on known rows (the driver
itself needs a GPU; the family's counting of each API is proven on the real vendor libraries in
tests/test_gpu_runtime_vendor.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

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
    line = json.loads(capsys.readouterr().out)
    assert line["check"] == "gpu_runtime_views" and line["ran"] is False and "GPU" in line["reason"]

"""Smoke test of the capacity bench: small N, but the same exact-count check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ebpf, pytest.mark.slow]
BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_capacity_bench_counts_exactly(ebpf_ready: None, tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCH / "ebpf_capacity.py"),
            "--events",
            "50000",
            "--repeats",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "engine capacity check: PASS" in proc.stdout
    import json

    data = json.loads(out.read_text())
    assert data["rounds"]["engine"], "no engine round ran"
    for engine_round in data["rounds"]["engine"]:  # every interleaved round counted every event
        assert engine_round["events_seen"] == 50000
        assert engine_round["lost"] == 0
    assert data["floor_s"] > 0 and data["engine_over_floor"] == data["engine_s"] / data["floor_s"]
    assert data["naive"]["events_seen"] + data["naive"]["lost"] <= 50000

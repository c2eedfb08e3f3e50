"""Upstream AORTA's keys in our run and sweep JSON (issue 22.2): an alias holds our value, a
differing quantity holds upstream's formula, an unmeasured one is null with its reason."""

from __future__ import annotations

import itertools
import json

import pytest

from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.results import upstream_keys
from factories import queue_section, run_result

SWITCH_KEYS = ("inter_stream_gap_ms", "intra_stream_gap_ms", "estimated_switch_overhead_ms")
QUEUE_KEYS = (
    "dispatch_rate_per_sec",
    "avg_inter_dispatch_gap_us",
    "p99_inter_dispatch_gap_us",
    "per_ring_submissions",
    "per_ring_dispatches",
    "avg_submit_to_dispatch_us",
    "p99_submit_to_dispatch_us",
    "rings_used",
)
MEMORY_KEYS = ("total_bo_moves", "migration_bytes", "pages_prefetched", "total_eviction_restore_pairs")
METADATA_KEYS = ("device_info", "rocm_info", "driver_info")
RINGS = {"gfx": 4, "sdma0": 2}
ANALYSIS_KEYS = ("efficiencies", "inflection_point", "peak_stream_count")


def _op(iteration, stream, start_us, end_us):
    return OpRecord(iteration, stream, stream % 2, "k", None, int(start_us * 1e3), int(end_us * 1e3))


def test_upstream_switch_formula_on_known_gaps():
    """Iteration 0, in end order: s0 [0,10], s1 [12,20] (inter 2 us), s1 [21,30] (intra 1 us),
    s0 [26,40] (overlap: no gap), s0 [44,50] (intra 4 us); iteration 1: s1 [100,110], s0
    [116,120] (inter 6 us). The iteration boundary (50 → 100) is no gap."""
    ops = [
        _op(0, 0, 0, 10),
        _op(0, 1, 12, 20),
        _op(0, 1, 21, 30),
        _op(0, 0, 26, 40),
        _op(0, 0, 44, 50),
        _op(1, 1, 100, 110),
        _op(1, 0, 116, 120),
    ]
    got = upstream_keys.upstream_switch(ops)
    assert got["inter_stream_gap_ms"] == pytest.approx((2 + 6) / 2 / 1e3)
    assert got["intra_stream_gap_ms"] == pytest.approx((1 + 4) / 2 / 1e3)
    assert got["estimated_switch_overhead_ms"] == pytest.approx((4.0 - 2.5) / 1e3)
    assert (got["inter_stream_samples"], got["intra_stream_samples"]) == (2, 2)
    # intra 5 us > inter 1 us: upstream clamps at 0
    clamped = upstream_keys.upstream_switch([_op(0, 0, 0, 10), _op(0, 0, 15, 20), _op(0, 1, 21, 30)])
    assert clamped["estimated_switch_overhead_ms"] == 0.0
    empty = upstream_keys.upstream_switch([])
    assert all(empty[k] is None for k in SWITCH_KEYS)
    assert all(empty["upstream_keys"][k] == "null: no ops recorded" for k in SWITCH_KEYS)


@pytest.fixture(scope="module")
def real_run():
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.run.harness import run_benchmark

    config = RunConfig(workload="hetero_kernels", streams=2, iterations=4, warmup=1, device="cpu")
    return json.loads(json.dumps(run_benchmark(config).to_dict()))


def _recomputed(table):
    """Upstream's formula straight from the result's op_intervals rows (µs); a kind of gap the
    run never had is None (unmeasured is null, not upstream's 0: a busy run may have none)."""
    cols = table["columns"]
    it, st, s, e = (cols.index(c) for c in ("iteration", "stream", "start_us", "end_us"))
    inter, intra = [], []
    for iteration in {row[it] for row in table["rows"]}:
        rows = sorted((r for r in table["rows"] if r[it] == iteration), key=lambda r: r[e])
        for a, b in itertools.pairwise(rows):
            if b[s] - a[e] > 0:
                (intra if a[st] == b[st] else inter).append((b[s] - a[e]) / 1e3)
    return (sum(inter) / len(inter) if inter else None), (sum(intra) / len(intra) if intra else None)


def _same(got, want):
    """Equal within rounding of the µs rows, or both null."""
    return (got is None and want is None) or got == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_real_run_carries_upstream_switch_and_metadata_keys(real_run):
    switch = real_run["switch_latency"]
    for key in SWITCH_KEYS:
        assert key in switch and key in switch["upstream_keys"]
    assert not real_run["op_intervals"]["truncated"]
    inter, intra = _recomputed(real_run["op_intervals"])
    assert _same(switch["inter_stream_gap_ms"], inter)
    assert _same(switch["intra_stream_gap_ms"], intra)
    overhead = None if inter is None or intra is None else max(0.0, inter - intra)
    assert _same(switch["estimated_switch_overhead_ms"], overhead)
    for key, value in (("inter_stream_gap_ms", inter), ("intra_stream_gap_ms", intra)):
        assert value is not None or switch["upstream_keys"][key].startswith("null: ")
    assert "switch_overhead_ms" in switch  # ours stays under our name
    meta, env = real_run["metadata"], real_run["environment"]
    for key in METADATA_KEYS:
        assert key in meta and key in meta["upstream_keys"]
    assert meta["device_info"]["name"] == env["device_name"]
    assert meta["driver_info"] == env["gpu_driver"]
    assert meta["rocm_info"]["torch_version"] == env["torch"]


def test_folded_and_unmeasured_switch_give_null_with_reason():
    from aorta.hw_queue_eval.ops import metrics

    off = metrics.unmeasured_switch_analysis("per-op timing off (--no-op-timing)")
    assert all(off[k] is None for k in SWITCH_KEYS)
    assert off["upstream_keys"]["inter_stream_gap_ms"] == "null: per-op timing off (--no-op-timing)"
    folded = metrics.folded_switch_analysis({}, metrics.WaitFigures.of([], 0), {})
    assert folded["estimated_switch_overhead_ms"] is None
    assert "folded" in folded["upstream_keys"]["estimated_switch_overhead_ms"]


def _traced_queue():
    section = queue_section(
        "amdgpu",
        submissions=6,
        rings=["gfx", "sdma0"],
        avg_us=12.5,
        p99_us=40.0,
        metrics={
            "submissions_per_ring": {"gfx": 4, "sdma0": 2},
            "dispatches_per_ring": {"gfx": 4, "sdma0": 2},
        },
    )
    section["window"] = {"duration_ms": 200.0}
    return section


def test_queue_aliases_equal_ours_and_unmeasured_ones_say_why():
    section = _traced_queue()
    upstream_keys.add_queue_keys(section)
    for key in QUEUE_KEYS:
        assert key in section and key in section["upstream_keys"]
    assert section["avg_submit_to_dispatch_us"] == section["submit_to_dispatch_avg_us"] == 12.5
    assert section["p99_submit_to_dispatch_us"] == section["submit_to_dispatch_p99_us"] == 40.0
    assert section["rings_used"] == section["hw_rings_used"]
    assert section["dispatch_rate_per_sec"] == pytest.approx(6 / 0.2)
    assert section["per_ring_dispatches"] == {"gfx": 4, "sdma0": 2}
    assert section["avg_inter_dispatch_gap_us"] is None
    assert section["upstream_keys"]["avg_inter_dispatch_gap_us"].startswith("null: ")
    untraced = {"status": "error", "error": "no bpftrace"}
    upstream_keys.add_queue_keys(untraced)
    assert untraced == {"status": "error", "error": "no bpftrace"}


def test_memory_aliases_equal_ours():
    section = {
        "status": "ok",
        "families": {"amdmem": {}},
        "bo_moves": 42,
        "migration_volume_bytes": 64_000_000,
        "evict_restore_pairs": 4,
    }
    upstream_keys.add_memory_keys(section)
    assert (section["total_bo_moves"], section["migration_bytes"]) == (42, 64_000_000)
    assert section["total_eviction_restore_pairs"] == 4
    assert section["pages_prefetched"] is None
    assert section["upstream_keys"]["pages_prefetched"].startswith("null: ")
    assert set(MEMORY_KEYS) <= set(section["upstream_keys"])


def test_run_json_gets_queue_keys_from_its_sections():
    """RunResult.to_dict (what `run -o` writes) adds them: through the factory's RunResult."""
    data = run_result(ebpf_queue_metrics=_traced_queue())
    assert data["ebpf_queue_metrics"]["rings_used"] == ["gfx", "sdma0"]
    assert set(METADATA_KEYS) <= set(data["metadata"])


def test_sweep_analysis_carries_upstream_scaling_keys():
    """Throughput 100, 180, 200, 210 at 1, 2, 4, 8 streams: upstream's efficiencies 1, 0.9, 0.5
    (< 0.8 x 0.9: inflection at 4), 0.2625; peak at 8."""
    from aorta.hw_queue_eval.analysis.scaling import analyze

    results = [
        run_result(streams=n, throughput=t, work_per_iteration=1e9)
        for n, t in ((1, 100.0), (2, 180.0), (4, 200.0), (8, 210.0))
    ]
    analysis = analyze(results, "fixed").to_dict()
    for key in ANALYSIS_KEYS:
        assert key in analysis and key in analysis["upstream_keys"]
    assert analysis["efficiencies"] == pytest.approx([1.0, 0.9, 0.5, 0.2625])
    assert analysis["inflection_point"] == 4
    assert analysis["peak_stream_count"] == analysis["peak_streams"] == 8
    assert analysis["throughputs"] == [100.0, 180.0, 200.0, 210.0]


def test_traced_cpu_run_json_has_every_upstream_ebpf_key(ebpf_ready, tmp_path):
    """A real traced run on the CPU backend: every upstream queue and memory key is in the
    file, each alias equal to our value, each null explained."""
    from conftest import run_cli

    out = tmp_path / "traced.json"
    proc = run_cli(
        "run", "hetero_kernels", "--streams", "2", "-i", "4", "-w", "1",
        "--ebpf-trace", "--ebpf-memory-trace", "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    queue, memory = data["ebpf_queue_metrics"], data["ebpf_memory_metrics"]
    assert queue["status"] == "ok", queue.get("error")
    for section, keys in ((queue, QUEUE_KEYS), (memory, MEMORY_KEYS)):
        for key in keys:
            assert key in section, key
            if section[key] is None:
                assert section["upstream_keys"][key].startswith("null"), key
    assert queue["avg_submit_to_dispatch_us"] == queue["submit_to_dispatch_avg_us"]
    assert queue["rings_used"] == queue["hw_rings_used"]
    window_s = queue["window"]["duration_ms"] / 1e3
    assert queue["dispatch_rate_per_sec"] == pytest.approx(queue["total_dispatches"] / window_s)
    assert memory["total_bo_moves"] == memory.get("bo_moves")

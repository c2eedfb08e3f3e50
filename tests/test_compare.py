"""compare: known outcomes on synthetic sample sets, pairing by key, bad input, upstream layouts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli


def _run(samples, streams=4, workload="hetero_kernels", size="small", work=1e9, ebpf=None):
    samples = [float(x) for x in samples]
    lat = {k: float(v) for k, v in zip(("mean", "p50", "p95", "p99", "min", "max", "std"),
           (np.mean(samples), *np.percentile(samples, [50, 95, 99]), min(samples), max(samples),
            np.std(samples)), strict=True)}
    return {"schema_version": 1, "kind": "run", "status": "ok", "error": None,
            "workload_name": workload, "stream_count": streams,
            "config": {"size": size, "backend": "cpu", "sync_mode": "per_iteration"},
            "throughput": work / (np.mean(samples) / 1e3) / 1e9, "throughput_unit": "GFLOPS",
            "latency_ms": lat, "iteration_times_ms": samples,
            "metadata": {"work_per_iteration": work},
            "switch_latency": {"switch_overhead_ms": 0.01}, "concurrency": {"achieved": 2.0},
            "ebpf_queue_metrics": ebpf, "ebpf_memory_metrics": None, "ebpf_vs_cuda_comparison": None}


def _noisy(median, n, seed):
    return np.random.default_rng(seed).normal(median, median * 0.02, n)


def _write(tmp_path: Path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def _compare(*args):
    proc = run_cli("compare", *args, "--json")
    data = json.loads(proc.stdout) if proc.returncode in (0, 1) else None
    return proc, data


def _verdicts(data, test=0):
    return {m["metric"]: m["verdict"] for p in data["tests"][test]["pairs"] for m in p["metrics"]}


def test_clear_regression_exits_1(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    test = _write(tmp_path, "t.json", _run(_noisy(12, 30, 2)))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    assert _verdicts(data) == {"iteration time": "regression",
                               "throughput (per iteration)": "regression"}
    m = data["tests"][0]["pairs"][0]["metrics"][1]
    assert m["higher_is_better"] is True and m["change_pct"] < -10


def test_clear_improvement_exits_0(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    test = _write(tmp_path, "t.json", _run(_noisy(8, 30, 2)))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0
    assert set(_verdicts(data).values()) == {"improvement"}


def test_noise_is_unchanged_and_n3_inconclusive(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 40, 3)))
    noise = _write(tmp_path, "n.json", _run(_noisy(10, 40, 4)))
    three = _write(tmp_path, "3.json", _run([20.0, 20.1, 20.2]))
    proc, data = _compare("-b", base, "-t", noise, "-t", three)
    assert proc.returncode == 0
    assert set(_verdicts(data, 0).values()) == {"unchanged"}
    assert set(_verdicts(data, 1).values()) == {"inconclusive"}


def test_threshold_option_changes_the_verdict(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    test = _write(tmp_path, "t.json", _run(_noisy(11, 30, 2)))
    assert _compare("-b", base, "-t", test, "--threshold", "5")[0].returncode == 1
    assert _compare("-b", base, "-t", test, "--threshold", "20")[0].returncode == 0


def _sweep(runs):
    return {"schema_version": 1, "kind": "sweep", "workload": "hetero_kernels",
            "points": [{"key": {"workload": r["workload_name"], "streams": r["stream_count"]},
                        "status": "ok", "result": r} for r in runs]}


def test_sweeps_pair_by_stream_count_not_position(tmp_path):
    base = _write(tmp_path, "b.json", _sweep([_run(_noisy(10, 30, 1), streams=1),
                                              _run(_noisy(20, 30, 2), streams=2)]))
    # reversed order; the 2-stream point regressed, the 1-stream point did not
    test = _write(tmp_path, "t.json", _sweep([_run(_noisy(30, 30, 3), streams=2),
                                              _run(_noisy(10, 30, 4), streams=1)]))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    by_streams = {p["streams"]: p["metrics"][0]["verdict"] for p in data["tests"][0]["pairs"]}
    assert by_streams == {1: "unchanged", 2: "regression"}


def test_upstream_sweep_with_old_latency_layout(tmp_path):
    old = []
    for streams, median in ((1, 10.0), (2, 20.0)):
        samples = list(_noisy(median, 30, streams))
        old.append({"workload_name": "hetero_kernels", "stream_count": streams,
                    "throughput": 1.0, "throughput_unit": "GFLOPS", "iteration_times_ms": samples,
                    "latency": {"p50_ms": float(np.median(samples)), "p95_ms": 1.0, "p99_ms": 2.0},
                    "ebpf_vs_cuda": {"measurement_accuracy": 0.8}})
    base = _write(tmp_path, "upstream.json", {"results": old})
    test = _write(tmp_path, "t.json", _sweep([_run(_noisy(20, 30, 9), streams=2)]))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 0, proc.stderr
    pair = data["tests"][0]["pairs"][0]
    assert pair["streams"] == 2
    assert pair["metrics"][0]["verdict"] == "unchanged"
    assert (pair["info"][1]["metric"], pair["info"][1]["base"]) == ("latency p99", 2.0)
    assert data["tests"][0]["only_in_base"] == ["hetero_kernels @ 1 streams"]


def test_ebpf_sections_are_diffed(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1), ebpf={"dispatch": {"p99_us": 40}}))
    test = _write(tmp_path, "t.json", _run(_noisy(10, 30, 2), ebpf={"dispatch": {"p99_us": 50}}))
    untraced = _write(tmp_path, "u.json", _run(_noisy(10, 30, 3)))
    _, data = _compare("-b", base, "-t", test)
    rows = data["tests"][0]["pairs"][0]["ebpf"]["rows"]
    assert rows == [{"section": "ebpf_queue_metrics", "key": "dispatch.p99_us", "base": 40.0,
                     "test": 50.0, "change_pct": 25.0}]
    _, data = _compare("-b", untraced, "-t", test)
    assert "tracing overhead" in data["tests"][0]["pairs"][0]["ebpf"]["note"]


@pytest.mark.parametrize(("test_data", "message"), [
    (_run(_noisy(10, 30, 2), workload="moe", streams=4), "nothing to pair"),
    (_run(_noisy(10, 30, 2), size="large"), "not comparable"),
    ({"foo": 1}, "not an aorta result"),
    ({"schema_version": 1, "kind": "policy_weights"}, "unknown result kind"),
    ("not json", "not valid JSON"),
])
def test_bad_or_mismatched_files_exit_2(tmp_path, test_data, message):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    path = tmp_path / "t.json"
    path.write_text(test_data if isinstance(test_data, str) else json.dumps(test_data))
    proc = run_cli("compare", "-b", base, "-t", str(path))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_markdown_output(tmp_path):
    base = _write(tmp_path, "b.json", _run(_noisy(10, 30, 1)))
    test = _write(tmp_path, "t.json", _run(_noisy(12, 30, 2)))
    proc = run_cli("compare", "-b", base, "-t", test, "--markdown")
    assert proc.returncode == 1
    assert "| Point | Metric |" in proc.stdout and "**regression**" in proc.stdout
    assert proc.stdout.rstrip().endswith("(p < 0.05)")


def test_policy_sweeps_pair_by_policy(tmp_path):
    def policy_file(values):
        return {"schema_version": 1, "kind": "policy_sweep",
                "points": [{"key": {"workload": "moe", "streams": 16, "policy": name},
                            "status": "ok", "result": _run(_noisy(med, 30, i), streams=16,
                                                           workload="moe")}
                           for i, (name, med) in enumerate(values)]}
    base = _write(tmp_path, "b.json", policy_file([("baseline", 10), ("high_queue", 20)]))
    test = _write(tmp_path, "t.json", policy_file([("high_queue", 20), ("baseline", 13)]))
    proc, data = _compare("-b", base, "-t", test)
    assert proc.returncode == 1
    verdicts = {p["policy"]: p["metrics"][0]["verdict"] for p in data["tests"][0]["pairs"]}
    assert verdicts == {"baseline": "regression", "high_queue": "unchanged"}

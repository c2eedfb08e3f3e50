"""report: PNGs and one self-contained HTML page for sweeps and runs; no torch import."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import pytest

from conftest import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rows(n_streams: int, iterations: int = 3) -> dict:
    rows, t = [], 0.0
    for it in range(iterations):
        for s in range(n_streams):
            rows.append([it, s, s % 4, s % 2, t, t + 1.0, t + 50.0])
        t += 60.0
    return {"columns": ["iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us"],
            "labels": ["gemm", "tiny_add"], "rows": rows, "total_ops": len(rows), "truncated": False}


def _run(streams: int, throughput: float, p99: float, ebpf=None) -> dict:
    samples = [p99 * 0.8, p99 * 0.9, p99 * 0.85, p99, p99 * 0.7]
    return {"schema_version": 1, "kind": "run", "status": "ok", "workload_name": "hetero_kernels",
            "stream_count": streams, "throughput": throughput, "throughput_unit": "GFLOPS",
            "latency_ms": {"p50": p99 * 0.85, "p95": p99 * 0.95, "p99": p99, "mean": p99 * 0.85},
            "iteration_times_ms": samples, "total_time_ms": 1.0, "op_intervals": _rows(streams),
            "metadata": {"work_per_iteration": 100.0 * streams},
            "queue_mapping": {"pool_size": 4, "queues_created": min(streams, 4),
                              "stream_to_queue": [s % 4 for s in range(streams)]},
            "environment": {"backend": "cpu", "cpu_count": 2},
            "switch_latency": {"switch_overhead_ms": None, "reason": "none"},
            "concurrency": {"achieved": 1.5}, "ops": {"per_label": {}}, "warnings": [],
            "ebpf_queue_metrics": ebpf}


def _sweep(tmp_path):
    from aorta.hw_queue_eval.sweep import analysis_of

    points = [{"key": {"workload": "hetero_kernels", "streams": n}, "status": "ok",
               "result": _run(n, t, p)}
              for n, t, p in ((1, 10, 1.0), (2, 20, 1.0), (4, 40, 1.1), (8, 41, 2.5))]
    points.append({"key": {"workload": "hetero_kernels", "streams": 16}, "status": "timeout",
                   "error": "no result after 5 s; stopped", "result": None})
    sweep = {"schema_version": 1, "kind": "sweep", "workload": "hetero_kernels",
             "throughput_unit": "GFLOPS", "points": points,
             "analysis": analysis_of(points, "per_stream"), "run_options": {"iterations": 5}}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    return path


def _check_html(out, expected_pngs):
    html = (out / "index.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(expected_pngs)
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000
        assert f'data-file="{name}"' in html and f'href="{name}"' in html
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(embedded) == len(pngs)
    assert all(base64.b64decode(e).startswith(PNG_MAGIC) for e in embedded)
    assert "<script" not in html and "http" not in html.replace("https://ui.perfetto.dev", "")
    return html


def test_sweep_report(tmp_path):
    out = tmp_path / "rep"
    proc = run_cli("report", str(_sweep(tmp_path)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = _check_html(out, ["throughput_vs_streams.png", "p99_vs_streams.png"])
    assert "throughput stops scaling at 4 streams = the hardware-queue pool" in html
    assert "16 streams timeout" in html


def test_run_report_with_ebpf_histogram(tmp_path):
    ebpf = {"submit_to_dispatch_hist_us": [{"min": 0, "max": 1, "count": 5},
                                           {"min": 2, "max": 3, "count": 9}], "p99_us": 3.0}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run(6, 50, 2.0, ebpf=ebpf)))
    out = tmp_path / "rep"
    proc = run_cli("report", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = _check_html(out, ["latency_distribution.png", "op_timeline.png",
                             "ebpf_ebpf_queue_metrics_submit_to_dispatch_hist_us.png"])
    assert "all 3 measured iterations" in html


@pytest.mark.parametrize(("setup", "message"), [
    ("file_as_dir", "is a file"),
    ("missing_parent", "does not exist"),
    ("policy", "report draws run and sweep files"),
])
def test_report_bad_input_exit_2_nothing_written(tmp_path, setup, message):
    result = _sweep(tmp_path)
    out = tmp_path / "rep"
    if setup == "file_as_dir":
        out.write_text("x")
    elif setup == "missing_parent":
        out = tmp_path / "no" / "rep"
    else:
        result.write_text(json.dumps({"schema_version": 1, "kind": "policy_sweep", "policies": {}}))
    proc = run_cli("report", str(result), "-o", str(out))
    assert proc.returncode == 2 and message in proc.stderr
    assert not (out.is_dir() and any(out.iterdir()))


NO_TORCH = """
import sys
from aorta.hw_queue_eval.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
assert "torch" not in sys.modules, "torch was imported"
print("exit", code)
"""


@pytest.mark.parametrize("args", [["--help"], ["sweep", "--help"], ["compare", "--help"],
                                  ["report", "SWEEP", "-o", "OUT"],
                                  ["compare", "-b", "SWEEP", "-t", "SWEEP"]])
def test_commands_do_not_import_torch(tmp_path, args):
    sweep = str(_sweep(tmp_path))
    args = [sweep if a == "SWEEP" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "exit 0" in proc.stdout or "exit None" in proc.stdout


def test_sweep_table_adds_ebpf_columns_when_traced():
    from aorta.hw_queue_eval.report.tables import sweep_table

    traced = _run(2, 20, 1.0, ebpf={"submit_to_dispatch": {"avg_us": 12.3, "p99_us": 45.7}})
    sweep = {"throughput_unit": "GFLOPS", "points": [
        {"key": {"streams": 1}, "status": "ok", "result": _run(1, 10, 1.0)},
        {"key": {"streams": 2}, "status": "ok", "result": traced}]}
    headers, rows = sweep_table(sweep)
    assert headers[-2:] == ["eBPF dispatch avg µs", "eBPF dispatch P99 µs"]
    assert rows[1][-2:] == ["12.3", "45.7"] and rows[0][-2:] == ["n/a", "n/a"]
    headers, _ = sweep_table({"points": sweep["points"][:1]})
    assert "eBPF dispatch P99 µs" not in headers


def test_report_folder_that_cannot_be_created_is_exit_2(tmp_path):
    # /proc refuses new entries even for root: the check must try, not trust permission bits
    proc = run_cli("report", str(_sweep(tmp_path)), "-o", "/proc/aorta-report")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: cannot write report folder") and "Traceback" not in proc.stderr

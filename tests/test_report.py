"""report: PNGs and one self-contained HTML page for sweeps and runs; no torch import.

The report itself runs in-process (main(), same exit code and streams as a real process); the
no-torch check keeps a fresh interpreter, the only place an import can be seen."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys

import pytest

from conftest import run_cli_inprocess as run_cli
from factories import op_intervals, queue_section, run_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rows(n_streams: int, iterations: int = 3) -> dict:
    rows, t = [], 0.0
    for it in range(iterations):
        for s in range(n_streams):
            rows.append([it, s, s % 4, s % 2, t, t + 1.0, t + 50.0])
        t += 60.0
    return op_intervals(rows, ["gemm", "tiny_add"])


def _run(streams: int, throughput: float, p99: float, ebpf=None) -> dict:
    samples = [p99 * 0.8, p99 * 0.9, p99 * 0.85, p99, p99 * 0.7]
    return run_result(
        streams=streams,
        throughput=throughput,
        iteration_times_ms=samples,
        work_per_iteration=100.0 * streams,
        cpu_count=2,
        op_intervals=_rows(streams),
        ebpf_queue_metrics=ebpf,
    )


def _sweep(tmp_path):
    from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of

    points = [
        {"key": {"workload": "hetero_kernels", "streams": n}, "status": "ok", "result": _run(n, t, p)}
        for n, t, p in ((1, 10, 1.0), (2, 20, 1.0), (4, 40, 1.1), (8, 41, 2.5))
    ]
    points.append(
        {
            "key": {"workload": "hetero_kernels", "streams": 16},
            "status": "timeout",
            "error": "no result after 5 s; stopped",
            "result": None,
        }
    )
    sweep = {
        "schema_version": 1,
        "kind": "sweep",
        "workload": "hetero_kernels",
        "throughput_unit": "GFLOPS",
        "points": points,
        "analysis": analysis_of(points, "per_stream"),
        "run_options": {"iterations": 5},
    }
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    return path


def _check_html(out, expected_pngs):
    html = (out / "index.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(expected_pngs)
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 5_000
        assert f'data-file="{name}"' in html
        assert f'href="{name}"' in html
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(embedded) == len(pngs)
    assert all(base64.b64decode(e).startswith(PNG_MAGIC) for e in embedded)
    assert "<script" not in html
    assert "http" not in html.replace("https://ui.perfetto.dev", "")
    return html


@pytest.mark.slow
def test_sweep_report(tmp_path):
    out = tmp_path / "rep"
    proc = run_cli("report", str(_sweep(tmp_path)), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = _check_html(out, ["throughput_vs_streams.png", "p99_vs_streams.png"])
    assert "throughput stops scaling at 4 streams = the hardware-queue pool" in html
    assert "16 streams timeout" in html


@pytest.mark.slow
def test_run_report_with_ebpf_histogram(tmp_path):
    hist_ns = [{"min": 1000, "max": 1249, "count": 5}, {"min": 2048, "max": 2559, "count": 9}]
    ebpf = queue_section("cpu_sched", p99_us=2.5, metrics={"submit_to_dispatch_hist_ns": hist_ns})
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run(6, 50, 2.0, ebpf=ebpf)))
    out = tmp_path / "rep"
    proc = run_cli("report", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = _check_html(
        out,
        [
            "latency_distribution.png",
            "op_timeline.png",
            "timeline.png",
            "ebpf_queue_cpu_sched_submit_to_dispatch_hist.png",
        ],
    )
    assert "all 3 measured iterations" in html


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("file_as_dir", "is a file"),
        ("missing_parent", "does not exist"),
        ("policy", "policy-sweep file has no summary"),
    ],
)
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
    assert proc.returncode == 2
    assert message in proc.stderr
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


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["sweep", "--help"],
        ["compare", "--help"],
        ["report", "SWEEP", "-o", "OUT"],
        ["compare", "-b", "SWEEP", "-t", "SWEEP"],
    ],
)
def test_commands_do_not_import_torch(tmp_path, args):
    sweep = str(_sweep(tmp_path))
    args = [sweep if a == "SWEEP" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "exit 0" in proc.stdout or "exit None" in proc.stdout


def test_sweep_table_adds_ebpf_columns_when_traced():
    from aorta.hw_queue_eval.report.tables import sweep_table

    traced = _run(2, 20, 1.0, ebpf=queue_section("cpu_sched", avg_us=12.3, p99_us=45.7))
    sweep = {
        "throughput_unit": "GFLOPS",
        "points": [
            {"key": {"streams": 1}, "status": "ok", "result": _run(1, 10, 1.0)},
            {"key": {"streams": 2}, "status": "ok", "result": traced},
        ],
    }
    headers, rows = sweep_table(sweep)
    assert headers[-2:] == ["eBPF dispatch avg µs", "eBPF dispatch P99 µs"]
    assert rows[1][-2:] == ["12.3", "45.7"]
    assert rows[0][-2:] == ["n/a", "n/a"]
    headers, _ = sweep_table({"points": sweep["points"][:1]})
    assert "eBPF dispatch P99 µs" not in headers


@pytest.mark.slow
def test_report_folder_that_cannot_be_created_is_exit_2(tmp_path):
    # /proc refuses new entries even for root: the check must try, not trust permission bits
    proc = run_cli("report", str(_sweep(tmp_path)), "-o", "/proc/aorta-report")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: cannot write report folder")
    assert "Traceback" not in proc.stderr


def test_ebpf_histogram_short_names():
    from aorta.hw_queue_eval.report.html import histogram_filename

    assert (
        histogram_filename("ebpf_queue_metrics", "families.amdgpu.metrics.submit_to_dispatch_hist_ns")
        == "ebpf_queue_amdgpu_submit_to_dispatch_hist.png"
    )


def _policy_sweep_file(tmp_path, repeats=3):
    from aorta.hw_queue_eval.gpu.policies import BUILTIN_POLICIES
    from aorta.hw_queue_eval.sweeps.policy_sweep import summarize

    names = ["baseline", "high_queue", "multi_tenant_fair", "xnack_off", "priority_be"]
    points = []
    for i, name in enumerate(names):
        for r in range(1, repeats + 1):
            applicable = name not in ("xnack_off", "priority_be")
            result = _run(8, 10.0 + i + 0.3 * r, 2.0 + 0.1 * r) if applicable else None
            points.append(
                {
                    "key": {"workload": "hetero_kernels", "streams": 8, "policy": name, "repeat": r},
                    "status": "ok" if applicable else "not_applicable",
                    "error": None if applicable else "not applicable on the CPU backend",
                    "result": result,
                    "in_effect": {"queue_pool_size": 4},
                }
            )
    data = {
        "schema_version": 1,
        "kind": "policy-sweep",
        "workload": "hetero_kernels",
        "streams": 8,
        "backend": "cpu",
        "repeats": repeats,
        "points": points,
        "summary": summarize(points, [BUILTIN_POLICIES[n] for n in names]),
    }
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(data))
    return path, data, names


@pytest.mark.slow
def test_policy_sweep_report_names_every_policy_with_cis(tmp_path):
    from aorta.hw_queue_eval.report.plots import policy_figure

    path, data, names = _policy_sweep_file(tmp_path)
    out = tmp_path / "rep"
    proc = run_cli("report", str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    html = _check_html(out, ["policy_throughput.png", "policy_p99.png"])
    for name in names:
        assert f"<td>{name}</td>" in html
    assert "fewer than two points" not in html
    fig = policy_figure(data, "throughput")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == names  # one bar per policy, named
    assert ax.get_ylabel() == "throughput (GFLOPS), median over repeats"
    assert len(ax.patches) == 3  # bars only for the three applicable policies
    assert len(ax.lines) >= 3  # CI whiskers and runs
    assert {t.get_text() for t in ax.texts} == {"not applicable"}


@pytest.mark.slow
def test_sweep_report_with_repeats_draws_a_ci_band(tmp_path):
    from aorta.hw_queue_eval.report.plots import sweep_throughput
    from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of

    points = [
        {
            "key": {"workload": "hetero_kernels", "streams": n, "repeat": r},
            "status": "ok",
            "result": _run(n, t * f, 1.0),
        }
        for n, t in ((1, 10), (2, 20), (4, 22))
        for r, f in ((1, 1.0), (2, 1.05), (3, 0.95))
    ]
    sweep = {
        "kind": "sweep",
        "workload": "hetero_kernels",
        "throughput_unit": "GFLOPS",
        "points": points,
        "analysis": analysis_of(points, "per_stream"),
    }
    assert sweep["analysis"]["runs_per_point"] == [3, 3, 3]
    assert sweep_throughput(sweep, [p["result"] for p in points]).startswith(PNG_MAGIC)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep))
    proc = run_cli("report", str(path), "-o", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "20.00 [19.00, 21.00]" in html
    assert "confidence" in html

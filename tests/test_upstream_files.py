"""Files written by upstream AORTA 0.3.0's own code load in `compare` and `report` (issue 22).

The files come from upstream's `HarnessResult.to_json` / `save_sweep_results`, run in a separate
process (tests/upstream_writer.py) from the wheel scripts/setup.sh --test installs apart; its
code is never imported here (its package is also named `aorta`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli_inprocess as run_cli
from conftest import unavailable

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_DIR = ROOT / ".venv" / "upstream-aorta-0.3.0"
STREAMS = (1, 2, 4, 8)
DROP_AT = 4  # the stream count whose throughput drops 30 % in the test sweeps
REPEATS = 5


def _kernels(streams: int, seed: int) -> list[list[float]]:
    """(stream, start_ms, end_ms) of a few kernels per stream, for upstream's switch figures."""
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    for i in range(4 * streams):
        t += float(rng.uniform(0.05, 0.2))
        out.append([i % streams, t, t + 0.5])
    return out


def _run_spec(streams: int, seed: int, scale: float = 1.0, **extra) -> dict:
    rng = np.random.default_rng(seed)
    samples = list(rng.normal(10.0 / scale, 0.1, 30))
    return {
        "workload": "hetero_kernels",
        "streams": streams,
        "iteration_times_ms": samples,
        "throughput": 100.0 * streams * scale * float(rng.normal(1.0, 0.01)),
        "unit": "GFLOPS",
        "kernels": _kernels(streams, seed),
        **extra,
    }


@pytest.fixture(scope="module")
def upstream_files(tmp_path_factory) -> dict[str, Path]:
    """Every file the tests read, written by upstream's own code in one separate process."""
    if not (UPSTREAM_DIR / "aorta" / "hw_queue_eval").is_dir():
        why = f"upstream AORTA 0.3.0 not installed at {UPSTREAM_DIR}: run bash scripts/setup.sh --test"
        unavailable(why, why)
    tmp = tmp_path_factory.mktemp("upstream")
    files = {}
    spec = []
    queue = {
        "total_dispatches": 40,
        "inter_dispatch_gap_us": [5.0, 7.0, 9.0],
        "per_ring_dispatches": {"0": 30, "1": 10},
        "trace_duration_ms": 100.0,
    }
    memory = {"total_bo_moves": 3, "migration_bytes": 4096, "total_eviction_restore_pairs": 1}
    files["run"] = tmp / "run.json"
    run = _run_spec(4, 1, queue=queue, memory=memory)
    spec.append({"kind": "run", "out": str(files["run"]), "runs": [run]})
    for side, scale in (("base", 1.0), ("test", 0.7)):
        for r in range(REPEATS):
            path = files[f"{side}{r}"] = tmp / f"{side}{r}.json"
            runs = [
                _run_spec(s, 100 * r + s, scale if s == DROP_AT else 1.0, bare=bool(r % 2)) for s in STREAMS
            ]
            spec.append({"kind": "sweep", "out": str(path), "runs": runs, "system_info": r == 0})
    files["policy"] = tmp / "policy.json"
    runs = [_run_spec(4, 7 + i, policy=name) for i, name in enumerate(("baseline", "priority_lc"))]
    spec.append({"kind": "policy", "out": str(files["policy"]), "runs": runs})
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-I", str(ROOT / "tests" / "upstream_writer.py"), str(UPSTREAM_DIR), str(spec_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return files


def _compare(*args):
    proc = run_cli("compare", *args, "--json")
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else None)


def test_upstream_writers_give_naive_microsecond_timestamps(upstream_files):
    """The layout the issue reports: `datetime.now().isoformat()`, no zone."""
    run = json.loads(upstream_files["run"].read_text())
    sweep = json.loads(upstream_files["base0"].read_text())
    assert "+" not in run["timestamp"] and "." in run["timestamp"]
    assert {"timestamp", "workload", "results", "environment", "analysis"} <= set(sweep)
    assert set(run["switch_latency"]) >= {"inter_stream_gap_ms", "estimated_switch_overhead_ms"}


def test_upstream_run_compares_with_itself(upstream_files):
    proc, data = _compare("-b", str(upstream_files["run"]), "-t", str(upstream_files["run"]))
    assert proc.returncode == 0, proc.stderr
    assert data["tests"][0]["pairs"][0]["runs"] == [1, 1]
    assert any("upstream tool" in n and "one run per point" in n for n in data["notes"])


def test_upstream_sweeps_pooled_as_repeats_find_the_drop(upstream_files):
    """Five upstream sweeps a side, throughput 30 % lower at 4 streams: a regression there only."""
    base = [a for r in range(REPEATS) for a in ("-b", str(upstream_files[f"base{r}"]))]
    test = [a for r in range(REPEATS) for a in ("-t", str(upstream_files[f"test{r}"]))]
    proc, data = _compare(*base, *test)
    assert proc.returncode == 1, proc.stderr
    assert len(data["tests"]) == 1  # the five test files are one side
    pairs = data["tests"][0]["pairs"]
    assert {p["streams"]: p["runs"] for p in pairs} == {s: [REPEATS, REPEATS] for s in STREAMS}
    verdicts = {p["streams"]: p["metrics"][0]["verdict"] for p in pairs}
    assert verdicts[DROP_AT] == "regression"
    assert [s for s, v in verdicts.items() if v == "regression"] == [DROP_AT]


def test_identical_upstream_sweeps_exit_0(upstream_files):
    base = [a for r in range(REPEATS) for a in ("-b", str(upstream_files[f"base{r}"]))]
    test = [a for r in range(REPEATS) for a in ("-t", str(upstream_files[f"base{r}"]))]
    proc, data = _compare(*base, *test)
    assert proc.returncode == 0, proc.stderr
    assert not data["regression"]


def test_report_draws_upstream_run_and_sweep(upstream_files, tmp_path):
    for name in ("run", "base0"):
        out = tmp_path / name
        proc = run_cli("report", str(upstream_files[name]), "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        page = (out / "index.html").read_text()
        assert "written by the upstream tool" in page


def test_bad_upstream_timestamp_is_one_line(tmp_path, upstream_files):
    """The relaxed check still refuses what is no timestamp at all."""
    run = json.loads(upstream_files["run"].read_text())
    run["timestamp"] = "yesterday"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(run))
    proc, _ = _compare("-b", str(bad), "-t", str(upstream_files["run"]))
    assert proc.returncode == 2
    assert "invalid upstream run result: timestamp" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_our_upstream_formulas_match_upstream_code(upstream_files):
    """The figures we write under upstream's names, recomputed from the inputs upstream's own
    code had, equal what it wrote: switch gaps (one iteration of kernels) and sweep analysis."""
    from aorta.hw_queue_eval.ops.records import OpRecord
    from aorta.hw_queue_eval.results.upstream_keys import scaling_keys, upstream_switch

    sweep = json.loads(upstream_files["base0"].read_text())
    for r, streams in zip(sweep["results"], STREAMS, strict=True):
        kernels = _kernels(streams, streams)  # base0's seed for this point: 100 * 0 + streams
        ops = [OpRecord(0, s, 0, "k", None, round(a * 1e6), round(b * 1e6)) for s, a, b in kernels]
        ours = upstream_switch(ops)
        for key in ("inter_stream_gap_ms", "intra_stream_gap_ms", "estimated_switch_overhead_ms"):
            theirs = r["switch_latency"][key]
            assert (ours[key] or 0.0) == pytest.approx(theirs, abs=1e-6), (streams, key)
    analysis = sweep["analysis"]
    ours = scaling_keys(analysis["stream_counts"], analysis["throughputs"], analysis["peak_stream_count"])
    assert ours["efficiencies"] == pytest.approx(analysis["efficiencies"])
    assert ours["inflection_point"] == analysis["inflection_point"]


def test_upstream_policy_comparison_pairs_by_policy(upstream_files):
    path = str(upstream_files["policy"])
    proc, data = _compare("-b", path, "-t", path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p["policy"] for p in data["tests"][0]["pairs"]) == ["baseline", "priority_lc"]
    report = run_cli("report", path, "-o", str(upstream_files["policy"].with_suffix(".d")))
    assert report.returncode == 2
    assert report.stderr.strip().startswith("error: report draws the upstream tool's runs and sweeps")


def test_the_same_file_twice_on_one_side_is_refused(upstream_files):
    """Pooling one file twice would fake a repeat: one line, exit 2."""
    base = str(upstream_files["base0"])
    proc, _ = _compare("-b", base, "-b", base, "-t", str(upstream_files["test0"]))
    assert proc.returncode == 2
    assert "given twice on one side" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

"""Upstream AORTA 0.3.0's flags and commands: run --profile, run-priority/suite, profile,
comms_compute_overlap's knobs and the torchrun collective flags, on the CPU backend."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.commands.upstream_knobs import (
    collective_knobs,
    overlap_knobs,
    parse_process_groups,
    parse_size,
)
from aorta.hw_queue_eval.workloads.registry import PRIORITIES, priority_of, workload_names
from conftest import load_json, run_cli_inprocess, unavailable


def _one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in proc.stderr


# ---- priorities in the catalogue ----------------------------------------------------------------


def test_priorities_are_upstreams_and_list_shows_them(tmp_path):
    listed = [name for names in PRIORITIES.values() for name in names]
    assert len(listed) == len(set(listed)) == 14  # each once; only comms_compute_overlap has none
    assert set(workload_names()) - set(listed) == {"comms_compute_overlap"}
    assert PRIORITIES["P0"] == ("hetero_kernels", "tiny_kernel_stress", "large_gemm_only")
    assert priority_of("moe") == "P1" and priority_of("torch_compile") == "P3"
    out = tmp_path / "list.json"
    proc = run_cli_inprocess("list", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split()[-1] for line in proc.stdout.splitlines() if "streams" in line}
    assert rows["hetero_kernels"] == "P0" and rows["graph_subgraphs"] == "P2"
    assert rows["comms_compute_overlap"] == "-"
    by_name = {w["name"]: w["priority"] for w in load_json(out)["workloads"]}
    assert by_name["fsdp_tp"] == "P1" and by_name["comms_compute_overlap"] is None


@pytest.mark.parametrize("command", ["run-priority", "suite"])
def test_run_priority_refuses_an_unknown_level_before_any_work(tmp_path, command):
    proc = run_cli_inprocess(command, "P9", "-o", str(tmp_path / "out"))
    _one_line_exit_2(proc, "unknown priority 'P9'", "P0, P1, P2, P3, all")
    assert not (tmp_path / "out").exists()
    proc = run_cli_inprocess(command, "P0", "-s", "1,,2", "-o", str(tmp_path / "out"))
    _one_line_exit_2(proc, "--streams")
    assert not (tmp_path / "out").exists()


def test_run_priority_refuses_a_folder_with_finished_points_without_resume(tmp_path):
    """A conflict in any workload's sweep file stops the suite before the first point."""
    folder = tmp_path / "results"
    folder.mkdir()
    finished = {"kind": "sweep", "points": [{"key": {"workload": "large_gemm_only"}, "status": "ok"}]}
    (folder / "large_gemm_only_sweep.json").write_text(json.dumps(finished))
    proc = run_cli_inprocess(
        "run-priority", "P0", "-s", "1", "-i", "1", "-w", "1", "-d", "cpu", "-o", str(folder)
    )
    _one_line_exit_2(proc, "large_gemm_only_sweep.json", "--resume")
    assert sorted(p.name for p in folder.iterdir()) == ["large_gemm_only_sweep.json"]  # nothing ran


@pytest.mark.slow
def test_run_priority_sweeps_each_workload_resumes_and_writes_one_page(tmp_path):
    folder = tmp_path / "results"
    args = ("run-priority", "P0", "-s", "1,2", "-i", "2", "-w", "1", "-d", "cpu", "-o", str(folder))
    proc = run_cli_inprocess(*args)
    assert proc.returncode == 0, proc.stderr
    for name in PRIORITIES["P0"]:
        sweep = load_json(folder / f"{name}_sweep.json")
        assert sweep["kind"] == "sweep" and sweep["state"] == "complete"
        assert [(p["key"]["streams"], p["status"]) for p in sweep["points"]] == [(1, "ok"), (2, "ok")]
        assert sweep["run_options"]["iterations"] == 2
    page = (folder / "index.html").read_text()
    assert page.count("<h2>Sweep: ") == 3 and "Suite: priority P0" in page
    assert (folder / "hetero_kernels_throughput_vs_streams.png").stat().st_size > 0
    before = {n: load_json(folder / f"{n}_sweep.json")["points"] for n in PRIORITIES["P0"]}
    again = run_cli_inprocess(*args, "--resume")
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("already done (resumed)") == 6  # no point ran twice
    assert {n: load_json(folder / f"{n}_sweep.json")["points"] for n in PRIORITIES["P0"]} == before


# ---- run --profile --------------------------------------------------------------------------------


def _profiled_run(tmp_path: Path) -> tuple[Any, Path, Path]:
    """`run hetero_kernels -s 2 -i 3 --profile` on the CPU: (the run, its -o file, the trace folder)."""
    out, traces = tmp_path / "r.json", tmp_path / "traces"
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "-s", "2", "-i", "3", "-w", "1", "-d", "cpu",
        "--profile", "--profile-dir", str(traces), "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc, out, traces


def test_profile_writes_a_trace_of_every_queue_thread_outside_the_measured_window(tmp_path):
    """Ground truth: the trace holds exactly the GEMMs the measured window issued (same
    iterations), recorded on the queue worker threads, not only on the host thread."""
    proc, out, traces = _profiled_run(tmp_path)
    result = load_json(out)
    section = result["profiler"]
    trace_file = traces / "hetero_kernels_2s.pt.trace.json"
    assert section["trace_file"] == str(trace_file)
    assert "extra window right after the measured one" in section["note"]
    trace = json.loads(trace_file.read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert all({"name", "ts", "dur", "pid", "tid"} <= set(e) for e in events)  # what HTA/TensorBoard read
    mm = [e for e in events if e["name"] == "aten::mm"]
    assert (
        len(mm) == result["ops"]["per_label"]["gemm"]["count"] == 3 * 2
    )  # 2 GEMMs an iteration at 2 streams
    workers = {w["tid"] for w in result["metadata"]["workers"]}
    assert {e["tid"] for e in mm} <= workers
    assert section["top_ops"][0]["name"] == "aten::mm" and section["top_ops"][0]["count"] == len(mm)
    assert "PROFILER OUTPUT" in proc.stdout and "aten::mm" in proc.stdout
    plain = run_cli_inprocess("run", "hetero_kernels", "-s", "2", "-i", "2", "-w", "1", "-d", "cpu", "--json")
    assert "profiler" not in json.loads(plain.stdout)  # only --profile runs have the key


HTA_DIR = Path(__file__).resolve().parents[1] / ".venv" / "hta-0.5.0"
HTA_READER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[2])
frame = analysis.t.get_trace(0)
names = analysis.t.symbol_table.get_sym_table()
mm = int((frame["name"] == names.index("aten::mm")).sum())
tids = sorted(map(int, frame["tid"].unique()))
print(json.dumps({"ranks": sorted(analysis.t.get_ranks()), "mm": mm, "tids": tids}))
"""


@pytest.mark.slow
def test_holistic_trace_analysis_reads_the_profile_trace(tmp_path):
    """HTA's own parser (a separate process, HTA installed apart by setup.sh --test) loads the
    --profile trace and finds every GEMM the window issued on the queue workers' threads."""
    if not (HTA_DIR / "hta").is_dir():
        unavailable(f"HolisticTraceAnalysis not installed at {HTA_DIR}: run bash scripts/setup.sh --test")
    _, out, traces = _profiled_run(tmp_path)
    read = subprocess.run(
        [sys.executable, "-I", "-c", HTA_READER, str(HTA_DIR), str(traces)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-2000:]
    parsed = json.loads(read.stdout.strip().splitlines()[-1])
    result = load_json(out)
    assert parsed["ranks"] == [0]
    assert parsed["mm"] == result["ops"]["per_label"]["gemm"]["count"] == 6
    assert {w["tid"] for w in result["metadata"]["workers"]} <= set(parsed["tids"])


def test_profile_refusals(tmp_path):
    base = ("run", "hetero_kernels", "-s", "2", "-d", "cpu")
    _one_line_exit_2(
        run_cli_inprocess(*base, "--profile-dir", str(tmp_path / "p")), "--profile-dir needs --profile"
    )
    _one_line_exit_2(run_cli_inprocess(*base, "--profile", "--repeats", "3"), "without --repeats")
    (tmp_path / "file").write_text("x")
    _one_line_exit_2(
        run_cli_inprocess(*base, "--profile", "--profile-dir", str(tmp_path / "file")), "is a file"
    )


# ---- profile (external profilers) ----------------------------------------------------------------


def _fake_tool(folder, name, code=0):
    """An executable NAME in FOLDER that records its argv and exits CODE."""
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{folder}/argv.txt"\nexit {code}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def test_profile_says_which_profiler_to_install_when_none_is(tmp_path):
    proc = run_cli_inprocess(
        "profile", "hetero_kernels", "-o", str(tmp_path / "p"), env={"PATH": str(tmp_path)}
    )
    _one_line_exit_2(proc, "rocprofv3", "nsys", "run --profile")
    assert not (tmp_path / "p").exists()
    proc = run_cli_inprocess("profile", "hetero_kernels", "--tool", "rocprof", env={"PATH": str(tmp_path)})
    _one_line_exit_2(proc, "--tool rocprof: not found")


@pytest.mark.parametrize("tool", ["rocprofv3", "rocprof", "nsys"])
def test_profile_runs_the_tool_around_an_isolated_run(tmp_path, tool):
    bin_dir = tmp_path / "bin"
    _fake_tool(bin_dir, tool)
    out = tmp_path / "p"
    proc = run_cli_inprocess(
        "profile",
        "hetero_kernels",
        "-s",
        "4",
        "-i",
        "3",
        "-o",
        str(out),
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    argv = (bin_dir / "argv.txt").read_text().splitlines()
    start = argv.index(sys.executable)
    assert argv[start + 1] == "-I"  # the child never imports from the working folder
    assert (
        argv[-8:]
        == ["aorta.hw_queue_eval", "run", "hetero_kernels", "--streams", "4", "-i", "3", "-d", "auto"][1:]
    )
    assert str(out) in " ".join(argv[:start]) and out.is_dir()
    if tool == "rocprofv3":
        assert argv[start - 1] == "--"


def test_profile_failure_of_the_tool_is_exit_1(tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_tool(bin_dir, "nsys", code=3)
    proc = run_cli_inprocess(
        "profile", "hetero_kernels", "-o", str(tmp_path / "p"), env={"PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    assert proc.returncode == 1 and "nsys exited with status 3" in proc.stderr


# ---- comms_compute_overlap's knobs ----------------------------------------------------------------


class CountingStream:
    """Runs each op at once and counts them by label."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def launch(self, fn, label=""):
        self.labels.append(label)
        fn()

    def wait(self, other):
        pass


def _overlap(streams, **options):
    torch = pytest.importorskip("torch")
    from aorta.hw_queue_eval.workloads.comms_compute_overlap import CommsComputeOverlap

    workload = CommsComputeOverlap(streams, "small", torch.device("cpu"), 1, options=options)
    workload.setup()
    lanes = [CountingStream() for _ in range(streams)]
    workload.run_iteration(lanes)
    return workload, lanes


def test_overlap_knobs_shape_the_iteration():
    """--mm-dim 32,48,16 --num-compute 3 --compute-streams 5 --num-coll 2 at 3 streams: sets
    0, 2, 4 on stream 1 and 1, 3 on stream 2; 2 all-reduces on stream 0; FLOPs by hand."""
    workload, lanes = _overlap(3, mm_dim=(32, 48, 16), num_compute=3, compute_streams=5, num_coll=2)
    assert [lane.labels.count("gemm") for lane in lanes] == [0, 9, 6]
    assert lanes[0].labels == ["all_reduce", "all_reduce"]
    assert workload.work_per_iteration() == 2 * 32 * 48 * 16 * 3 * 5
    assert workload.c[0][0].shape == (32, 48)
    assert workload.verify().passed
    workload.reduced[-1].add_(1.0)
    assert not workload.verify().passed  # the check can fail


def test_comms_only_counts_bytes_all_reduced_in_gb_per_s():
    workload, lanes = _overlap(1, mode="comms_only", comm_bytes=4096, comm_dtype="float16", num_coll=3)
    assert lanes[0].labels == ["all_reduce"] * 3
    assert workload.throughput_unit() == "GB/s"
    assert workload.comm_in.numel() == 2048  # 4 KiB of float16
    assert workload.work_per_iteration() == 3 * 4096
    assert workload.verify().passed


def test_compute_only_in_bfloat16_puts_gemms_on_every_stream():
    workload, lanes = _overlap(4, mode="compute_only", comp_dtype="bfloat16")
    assert [lane.labels for lane in lanes] == [["gemm", "gemm"]] * 4  # no all-reduce at all
    assert str(workload.c[0][0].dtype) == "torch.bfloat16"
    assert workload.verify().passed


def test_overlap_knobs_through_run(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli_inprocess(
        "run", "comms_compute_overlap", "-s", "3", "-i", "2", "-w", "1", "-d", "cpu",
        "--mm-dim", "32,48,16", "--num-compute", "3", "--num-coll", "1", "--comm-size", "8K", "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    labels = result["ops"]["per_label"]
    assert labels["gemm"]["count"] == 2 * 3 * 2 and labels["all_reduce"]["count"] == 2  # by the backend
    described = result["metadata"]["workload"]
    assert described["options"]["mm_dim"] == [32, 48, 16] and described["comm_tensor"] == "separate"
    assert described["allreduce_bytes_per_iteration"] == 8192
    assert result["config"]["workload_options"]["comm_bytes"] == 8192


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--mm-dim", "0,4,4"), "--mm-dim must be"),
        (("--mm-dim", "4,4"), "--mm-dim must be"),
        (("--mm-dim", "100000"), "in 1..65536"),
        (("--comm-size", "12Q"), "--comm-size must be bytes"),
        (("--comm-size", "0"), "at least 1 byte"),
        (("--num-compute", "0"), "--num-compute must be ≥ 1"),
        (("--num-coll", "x"), "--num-coll must be a positive integer"),
        (("--mode", "bogus"), "unknown --mode 'bogus'"),
        (("--mode", "comms_only"), "use --streams 1"),
        (("--comp-dtype", "int8"), "unknown --comp-dtype 'int8'"),
        (("--compute-streams", "99"), "--compute-streams must be a whole number in 1..32"),
    ],
)
def test_bad_overlap_knobs_are_one_line_exit_2(args, needle):
    proc = run_cli_inprocess("run", "comms_compute_overlap", "-s", "4", "-d", "cpu", *args)
    _one_line_exit_2(proc, needle)


def test_overlap_knobs_on_another_workload_are_refused():
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "-s", "4", "-d", "cpu", "--mm-dim", "64", "--num-coll", "2"
    )
    _one_line_exit_2(proc, "--mm-dim, --num-coll apply to comms_compute_overlap only")


def test_size_and_knob_parsers():
    assert parse_size("128M") == 128 << 20 and parse_size("4k") == 4096 and parse_size("7") == 7
    assert overlap_knobs("comms_compute_overlap", 4, {"mm_dim": "64", "mode": None}) == {
        "mm_dim": (64, 64, 64),
        "mode": "comms_compute",
    }
    assert overlap_knobs("moe", 4, {"mm_dim": None}) == {}


# ---- torchrun collective flags ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args", [("--real-collectives",), ("--async-op",), ("--backend", "gloo"), ("--process-groups", "[0]")]
)
def test_collective_flags_outside_torchrun_say_it_is_needed(args):
    proc = run_cli_inprocess("run", "comms_compute_overlap", "-s", "2", "-d", "cpu", *args)
    _one_line_exit_2(proc, f"{args[0]} need torchrun")


def test_collective_knobs_are_checked_against_the_world():
    assert collective_knobs("comms_compute_overlap", 4, True, True, "gloo", "[0,1],[2,3]") == (
        {"async_op": True, "process_groups": [[0, 1], [2, 3]]},
        "gloo",
    )
    assert collective_knobs("moe", 2, True, False, None, None) == ({}, None)  # accepted, a no-op
    for args, needle in [
        ((4, False, False, None, "[0,1],[2,4]"), "rank 4 is outside"),
        ((4, False, False, None, "[0,1],[3]"), "rank 2 is in no group"),
        ((2, False, False, "mpi", None), "unknown --backend 'mpi'"),
        ((2, False, False, None, "0,1"), "must be lists of ranks"),
        ((2, False, False, None, "[0,0],[1]"), "lists a rank twice"),
    ]:
        with pytest.raises(UsageError, match=needle):
            collective_knobs("comms_compute_overlap", *args)
    with pytest.raises(UsageError, match="apply to comms_compute_overlap only"):
        collective_knobs("moe", 2, False, True, None, None)
    assert parse_process_groups(" [0, 1] , [2] ") == [[0, 1], [2]]


@pytest.mark.slow
@pytest.mark.parametrize(("groups", "group_size"), [("[0,1]", 2), ("[0],[1]", 1)])
def test_torchrun_async_collectives_in_process_groups(tmp_path, groups, group_size):
    """Each rank all-reduces in its group: the reduced buckets equal group size × the local ones
    (verification), and one wait op per iteration ends the async collectives."""
    from test_distributed import _free_port, _run_args, _torchrun

    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", *_run_args(),
        "--real-collectives", "--async-op", "--backend", "gloo", "--process-groups", groups, "-o", str(out),
    )  # fmt: skip
    _stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-2000:]
    for rank in load_json(out)["distributed"]["rank_results"]:
        collectives = rank["metadata"]["workload"]["collectives"]
        assert collectives["world_size"] == group_size and collectives["async_op"] is True
        assert rank["distributed"]["rank"] in collectives["group_ranks"]
        assert rank["verification"]["passed"]
        assert rank["ops"]["per_label"]["collective_wait"]["count"] == 3  # iterations


def test_profile_dir_is_not_made_for_refused_runs(tmp_path):
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "-s", "999", "-d", "cpu", "--profile", "--profile-dir", str(tmp_path / "p")
    )
    assert proc.returncode == 2 and not os.path.exists(tmp_path / "p")


def test_profiled_result_is_valid_against_the_schema_and_a_bad_section_is_not(tmp_path):
    from aorta.hw_queue_eval.results.schema import run_result_schema
    from aorta.hw_queue_eval.results.validation import problem

    out = tmp_path / "r.json"
    proc = run_cli_inprocess(
        "run", "tiny_kernel_stress", "-s", "2", "-i", "2", "-w", "1", "-d", "cpu", "--profile",
        "--profile-dir", str(tmp_path / "p"), "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    assert problem(result, run_result_schema()) is None
    result["profiler"]["iterations"] = 0
    assert problem(result, run_result_schema()) == "profiler.iterations: 0 is less than the minimum of 1"

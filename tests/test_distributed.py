"""torchrun: rank environment, per-rank table, real collectives over gloo, two "nodes", failures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.distributed.torchrun import combine, format_rank_table, torchrun_env
from aorta.hw_queue_eval.results.run_result import validate_run_dict
from aorta.hw_queue_eval.sweeps.childrun import TEMP_PREFIX, remove_stale_point_dirs
from conftest import (
    CLI_WITH_FAKES,
    load_json,
    process_identity,
    process_tree,
    run_cli,
    run_cli_inprocess,
    still_running,
    wait_until,
    wait_until_measuring,
)


def test_not_under_torchrun_without_its_environment():
    assert torchrun_env({}) is None


def test_torchrun_environment_parsed_and_checked():
    env = torchrun_env(
        {
            "TORCHELASTIC_RUN_ID": "x",
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1",
        }
    )
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size, env.node_rank) == (3, 4, 1, 2, 1)
    with pytest.raises(UsageError, match="RANK 4 is outside WORLD_SIZE 4"):
        torchrun_env({"LOCAL_RANK": "0", "RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(UsageError, match="WORLD_SIZE='x' is not a number"):
        torchrun_env({"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "x"})


def _fake(rank, node, window, status="ok"):
    return {
        "status": status,
        "throughput": 100.0 + rank,
        "throughput_unit": "tokens/sec",
        "latency_ms": {"p50": 1.0, "p99": 2.0},
        "total_time_ms": window,
        "verification": {"passed": status == "ok"},
        "distributed": {
            "mode": "torchrun",
            "backend": "gloo",
            "rank": rank,
            "world_size": 3,
            "local_rank": rank % 2,
            "local_world_size": 2,
            "node_rank": node,
            "hostname": "h",
            "pid": 1000 + rank,
        },
    }


def test_combine_names_the_straggler_and_keeps_every_rank():
    combined = combine([_fake(2, 1, 50.0), _fake(0, 0, 40.0), _fake(1, 0, 42.0)])
    agg = combined["distributed"]["aggregate"]
    assert agg["straggler"]["rank"] == 2
    assert agg["straggler"]["lag_ms"] == pytest.approx(10.0)
    assert agg["throughput_sum"] == pytest.approx(303.0)
    assert agg["window_ms_max"] == 50.0
    assert [r["distributed"]["rank"] for r in combined["distributed"]["rank_results"]] == [0, 1, 2]
    assert combined["distributed"]["nodes"] == 2
    assert combined["status"] == "ok"
    table = format_rank_table(combined)
    assert "straggler" in table[3]
    assert table[3].split()[0] == "2"
    failed = combine([_fake(0, 0, 1.0), _fake(1, 0, 1.0, status="failed")])
    assert failed["status"] == "failed"
    assert "rank(s) 1" in failed["error"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _torchrun(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """torchrun ARGS; ARGS end with the script: `-m aorta.hw_queue_eval run …` (_run_args), or
    cli_with_fakes.py with its options (_failing_rank_args)."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _run_args(workload: str = "comms_compute_overlap", streams: int = 3, iterations: int = 3) -> list[str]:
    """`-m aorta.hw_queue_eval run …` for a torchrun job on the CPU backend; a huge `iterations`
    makes a job that runs until a test stops it."""
    return [
        "-m",
        "aorta.hw_queue_eval",
        "run",
        workload,
        "--streams",
        str(streams),
        "-d",
        "cpu",
        "-i",
        str(iterations),
        "-w",
        "1",
        "--dist-timeout",
        "60",
    ]


RUN = _run_args()


def _failing_rank_args(rank: int, run_args: list[str]) -> list[str]:
    """`_run_args` through the test entry point whose rank `rank` raises right after joining."""
    assert run_args[:2] == ["-m", "aorta.hw_queue_eval"]
    return [str(CLI_WITH_FAKES), "--fail-rank", str(rank), "--", *run_args[2:]]


def _check_ranks(result, world, nodes):
    assert validate_run_dict(result) == []
    dist = result["distributed"]
    assert dist["world_size"] == world
    assert dist["nodes"] == nodes
    ranks = dist["rank_results"]
    assert [r["distributed"]["rank"] for r in ranks] == list(range(world))
    assert len({r["distributed"]["pid"] for r in ranks}) == world
    for rank in ranks:  # real all-reduce: the reduced buckets equal world × the local ones
        collectives = rank["metadata"]["workload"]["collectives"]
        assert collectives == {
            "mode": "torch.distributed",
            "backend": "gloo",
            "rank": rank["distributed"]["rank"],
            "world_size": world,
        }
        assert rank["verification"]["passed"]
        assert rank["status"] == "ok"
        assert min(rank["per_stream_op_counts"]) > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workload", "collectives"), [("moe", {"all_to_all"}), ("fsdp_tp", {"all_gather", "reduce_scatter"})]
)
def test_single_node_two_ranks(tmp_path, workload, collectives):
    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_run_args(workload, 4),
        "-o",
        str(out),
    )
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr[-2000:]
    result = load_json(out)
    _check_ranks(result, world=2, nodes=1)
    for rank in result["distributed"]["rank_results"]:
        assert collectives <= set(rank["ops"]["per_label"])  # issued on the comms stream
    assert "straggler" in stdout
    assert "aggregate:" in stdout
    compared = run_cli_inprocess("compare", "-b", str(out), "-t", str(out), "--json")
    assert compared.returncode == 0, compared.stderr


def test_rank_zero_prints_one_ebpf_line_per_traced_rank():
    """Each rank's line carries that rank's own section figures; an untraced job prints none."""
    from aorta.hw_queue_eval.report.ebpf_blocks import rank_ebpf_lines
    from factories import queue_section

    ranks = [_fake(0, 0, 40.0), _fake(1, 0, 42.0)]
    assert rank_ebpf_lines(combine(ranks)) == []
    ranks[0]["ebpf_queue_metrics"] = queue_section("cpu_sched", avg_us=12.3, p99_us=45.7)
    ranks[1]["ebpf_queue_metrics"] = {"status": "error", "error": "bpftrace died"}
    ranks[1]["ebpf_memory_metrics"] = {"status": "ok", "host_page_faults": 17, "lost_events": 0}
    lines = rank_ebpf_lines(combine(ranks))
    assert len(lines) == 2
    assert lines[0].startswith("rank 0 eBPF: ")
    assert "submit→dispatch avg 12.3 us, P99 45.7 us" in lines[0]
    assert "(measured by cpu_sched)" in lines[0]
    assert lines[1] == (
        "rank 1 eBPF: queue tracing error: bpftrace died; memory: 17 host page faults, lost events 0"
    )


def test_clock_control_under_torchrun_refused_before_anything_starts(tmp_path):
    env = {"TORCHELASTIC_RUN_ID": "t", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    proc = run_cli_inprocess(
        "run",
        "moe",
        "--streams",
        "4",
        "-d",
        "cpu",
        "--ebpf-memory-trace",
        "--lock-clocks",
        "7",
        "-o",
        str(tmp_path / "r.json"),
        env=env,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "--lock-clocks/--power-limit are not supported yet" in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_two_nodes_on_one_machine(tmp_path):
    out, port = tmp_path / "r.json", _free_port()
    common = [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"aorta-{port}",
    ]
    nodes = [_torchrun(*common, "--node-rank", str(n), *RUN, "-o", str(out)) for n in (0, 1)]
    outputs = [node.communicate(timeout=300) for node in nodes]
    for node, (_, stderr) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, stderr[-2000:]
    result = load_json(out)
    _check_ranks(result, world=4, nodes=2)
    by_node = {}
    for row in result["distributed"]["ranks"]:
        by_node.setdefault(row["node_rank"], []).append(row["local_rank"])
    assert {k: sorted(v) for k, v in by_node.items()} == {0: [0, 1], 1: [0, 1]}


@pytest.mark.slow
def test_a_failing_rank_stops_the_job_named_and_nothing_written(tmp_path):
    out = tmp_path / "r.json"
    started = time.monotonic()
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_failing_rank_args(1, RUN),
        "-o",
        str(out),
    )
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode != 0
    assert "rank 1" in stderr
    assert "injected failure" in stderr
    assert not out.exists()
    assert not list(tmp_path.iterdir())
    assert time.monotonic() - started < 200  # the others were stopped, not left to hang


@pytest.mark.slow
def test_sweep_runs_each_point_through_torchrun(tmp_path):
    out = tmp_path / "s.json"
    proc = run_cli(
        "sweep",
        "grad_accum",
        "--streams",
        "3",
        "-d",
        "cpu",
        "-i",
        "3",
        "-w",
        "1",
        "--nproc-per-node",
        "2",
        "-o",
        str(out),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweep = load_json(out)
    assert sweep["settings"]["nproc_per_node"] == 2
    assert sweep["nproc_per_node"] == 2
    (point,) = sweep["points"]
    assert point["status"] == "ok"
    assert point["result"]["distributed"]["world_size"] == 2
    assert [r["distributed"]["rank"] for r in point["result"]["distributed"]["rank_results"]] == [0, 1]
    assert point["result"]["metadata"]["workload"]["collectives"]["mode"] == "torch.distributed"


@pytest.mark.slow
def test_policy_sweep_runs_each_point_through_torchrun(tmp_path):
    out = tmp_path / "p.json"
    proc = run_cli(
        "policy-sweep",
        "grad_accum",
        "--streams",
        "3",
        "--policies",
        "baseline",
        "-d",
        "cpu",
        "-i",
        "3",
        "-w",
        "1",
        "--nproc-per-node",
        "2",
        "-o",
        str(out),
        env={"GPU_MAX_HW_QUEUES": "3"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = load_json(out)
    assert data["nproc_per_node"] == 2
    (point,) = data["points"]
    assert point["status"] == "ok"
    ranks = point["result"]["distributed"]["rank_results"]
    assert [r["distributed"]["rank"] for r in ranks] == [0, 1]
    assert all(r["queue_mapping"]["pool_size"] == 3 for r in ranks)  # env reached every rank


@pytest.mark.slow
def test_ctrl_c_on_torchrun_stops_every_rank_and_writes_nothing(tmp_path):
    import signal
    import threading

    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_run_args("hetero_kernels", 2, iterations=1_000_000),
        "-o",
        str(out),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("Running hetero_kernels" in line for line in lines):
        assert time.monotonic() < deadline, "".join(lines)[-2000:]
        assert proc.poll() is None, "".join(lines)[-2000:]
        time.sleep(0.2)
    wait_until_measuring(proc, processes=2)  # both ranks inside their measured iterations
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    text = "".join(lines)
    assert text.count("interrupted: nothing was written") == 2, text[-2000:]
    assert not out.exists()
    assert not list(tmp_path.iterdir())
    assert proc.returncode != 0


def long_torchrun_sweep(tmp_path, *flags: str) -> subprocess.Popen[str]:
    """A sweep whose one point is a torchrun job of one rank that runs until it is stopped."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "aorta.hw_queue_eval", "sweep", "hetero_kernels", "--streams", "2"),
            *(
                "-d",
                "cpu",
                "-i",
                "1000000",
                "-w",
                "1",
                "--nproc-per-node",
                "1",
                "-o",
                str(tmp_path / "s.json"),
            ),
            *flags,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_9_leaves_no_process(sweep: subprocess.Popen[str]) -> list[tuple[int, int] | None]:
    """kill -9 `sweep` once its rank measures; every process it had started must end within 30 s
    (those that do not are killed before the test fails). The processes it had started."""
    wait_until_measuring(sweep)
    started = [process_identity(pid) for pid in process_tree(sweep.pid) - {sweep.pid}]
    sweep.kill()
    sweep.communicate(timeout=30)
    try:
        wait_until(lambda: not any(still_running(p) for p in started), "every process of the sweep to end")
    finally:  # never leave this test's own processes behind when it fails
        for pid, _ in filter(still_running, started):
            os.kill(pid, signal.SIGKILL)
    return started


@pytest.mark.slow
def test_kill_9_of_a_torchrun_sweep_leaves_no_rank_and_no_torchelastic_folder(tmp_path, private_tmpdir):
    """Before: the agent died with the sweep (its death signal) but its rank, in a session of its
    own, ran on until --dist-timeout (8 of 8 kills), and torchrun's torchelastic_* log folder
    stayed in TMPDIR. Now the rank dies with its agent, and the logs live in the point's folder,
    which the next point removes."""
    sweep = long_torchrun_sweep(tmp_path)
    started = kill_9_leaves_no_process(sweep)
    assert len(started) == 2  # torchrun's agent and its rank
    assert not list(private_tmpdir.glob("torchelastic_*"))
    (point,) = private_tmpdir.glob(f"{TEMP_PREFIX}{sweep.pid}-*")  # the killed sweep's point folder
    assert list(point.glob("torchelastic_*"))  # torchrun's logs are in there …
    assert remove_stale_point_dirs() == [str(point)]  # … and go with it when the next point starts
    assert not point.exists()


_LAUNCHED = """
import ctypes, sys
from aorta.common.procs import die_with_launcher
die_with_launcher({"AORTA_OWNER_PID": sys.argv[1]})
sig = ctypes.c_int(0)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)  # PR_GET_PDEATHSIG
print("running with death signal", sig.value)
"""


def test_a_rank_whose_sweep_is_gone_ends_itself_and_dies_with_its_agent():
    """The race a rank's own death signal leaves: its agent (and sweep) died before the rank
    set it. The rank then ends at once; with its sweep alive it runs, with SIGKILL as its death
    signal."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = gone.stdout.strip()
    orphan = subprocess.run(
        [sys.executable, "-c", _LAUNCHED, dead], capture_output=True, text=True, check=False
    )
    assert orphan.returncode == -signal.SIGKILL and orphan.stdout == ""
    alive = subprocess.run(
        [sys.executable, "-c", _LAUNCHED, str(os.getpid())], capture_output=True, text=True, check=False
    )
    assert alive.returncode == 0, alive.stderr
    assert alive.stdout.strip() == f"running with death signal {int(signal.SIGKILL)}"

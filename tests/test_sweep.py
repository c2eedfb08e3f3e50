"""sweep: validation, a crashing point, kill -9 of the sweep itself and --resume (real processes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import load_json, process_identity, process_tree, run_cli, run_cli_inprocess, still_running

TINY = ["-i", "3", "-w", "1", "-d", "cpu", "--size", "small"]


@pytest.mark.parametrize("streams", ["1,,2", "x", "0", "1,2,1", "100,200"])
def test_bad_stream_lists_exit_2_without_writing(tmp_path, streams):
    out = tmp_path / "s.json"
    proc = run_cli_inprocess("sweep", "hetero_kernels", "--streams", streams, *TINY, "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: --streams") or "none of --streams" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_crashing_point_costs_that_point_only(tmp_path):
    out = tmp_path / "s.json"
    traces = tmp_path / "traces"
    traces.mkdir()
    proc = run_cli(
        "sweep",
        "hetero_kernels",
        "--streams",
        "1,2,4,100",
        *TINY,
        "-o",
        str(out),
        "--trace-out",
        f"{traces}/",
        fakes=("--crash-at-streams", "2"),
    )
    assert proc.returncode == 1, proc.stderr  # a point failed, the sweep finished
    assert "dropped stream counts [100]" in proc.stderr
    data = load_json(out)
    status = {p["key"]["streams"]: p["status"] for p in data["points"]}
    assert status == {1: "ok", 2: "failed", 4: "ok"}
    failed = next(p for p in data["points"] if p["key"]["streams"] == 2)
    assert "signal 9" in failed["error"]
    assert data["state"] == "complete"
    assert data["analysis"]["stream_counts"] == [1, 4]
    assert "2 streams failed: killed by signal 9" in proc.stdout  # shown under the table
    assert sorted(p.name for p in traces.iterdir()) == [
        "hetero_kernels-s1.trace.json",
        "hetero_kernels-s4.trace.json",
    ]


def _ok_points(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [p for p in data["points"] if p["status"] == "ok"]


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume_loses_nothing(tmp_path):
    out = tmp_path / "s.json"
    args = ["sweep", "hetero_kernels", "--streams", "1,2,4,8", *TINY, "-o", str(out)]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "aorta.hw_queue_eval", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(_ok_points(out)) < 2 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    os.kill(sweep.pid, signal.SIGKILL)
    sweep.wait()
    before = _ok_points(out)
    assert 2 <= len(before) < 4, "the sweep must be killed half-way"
    json.loads(out.read_text())  # still valid JSON after kill -9

    again = run_cli_inprocess(*args)  # without --resume: refuses to overwrite finished points
    assert again.returncode == 2
    assert "--resume" in again.stderr
    other = run_cli_inprocess(
        "sweep",
        "hetero_kernels",
        "--streams",
        "1,2,4,8",
        "-i",
        "4",
        "-w",
        "1",
        "-d",
        "cpu",
        "-o",
        str(out),
        "--resume",
    )
    assert other.returncode == 2
    assert "other settings" in other.stderr

    resumed = run_cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "already done (resumed)" in resumed.stderr
    data = load_json(out)
    assert sorted(p["key"]["streams"] for p in data["points"]) == [1, 2, 4, 8]
    assert all(p["status"] == "ok" for p in data["points"])
    by_streams = {p["key"]["streams"]: p for p in data["points"]}
    for point in before:  # finished points were kept, not re-run
        assert by_streams[point["key"]["streams"]]["result"]["timestamp"] == point["result"]["timestamp"]
    assert data["analysis"]["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "state"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_ctrl_c_keeps_finished_points_and_stops_the_child(tmp_path, sig, code, state):
    out = tmp_path / "s.json"
    sweep = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "sweep",
            "hetero_kernels",
            "--streams",
            "1,2,4,8",
            *TINY,
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not _ok_points(out) and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    earlier = process_tree(sweep.pid)
    while not (child := process_tree(sweep.pid) - earlier):  # the next point's child is running
        assert time.monotonic() < deadline, "no point child started after the first point"
        assert sweep.poll() is None, "the sweep ended before its next point"
        time.sleep(0.02)
    children = [process_identity(p) for p in child]
    sweep.send_signal(sig)
    try:
        _, stderr = sweep.communicate(timeout=60)
    finally:
        if sweep.poll() is None:  # a failed wait must not leave the sweep running
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == code, stderr
    assert not [c for c in children if still_running(c)], "the point's child outlived the sweep"
    assert f"{state}: " in stderr
    assert "finished points kept" in stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()[-1:]) == 1
    data = load_json(out)
    assert data["state"] == state
    assert not (tmp_path / ".s.json.lock").exists()
    assert _ok_points(out)
    assert all(p["status"] == "ok" for p in data["points"])


@pytest.mark.slow
def test_hung_point_times_out(tmp_path):
    out = tmp_path / "s.json"
    proc = run_cli("sweep", "hetero_kernels", "--streams", "1", *TINY, "-o", str(out), "--timeout", "0.2")
    assert proc.returncode == 1
    point = load_json(out)["points"][0]
    assert point["status"] == "timeout"
    assert "no result after 0.2 s" in point["error"]
    assert (
        run_cli_inprocess(
            "sweep", "hetero_kernels", "--streams", "1", "--timeout", "0", "-o", str(tmp_path / "x.json")
        ).returncode
        == 2
    )


def test_point_folders_of_a_killed_parent_are_removed_by_the_next_point(tmp_path):
    from aorta.hw_queue_eval.sweeps import childrun

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{childrun.TEMP_PREFIX}{dead.pid}-abc"
    stale.mkdir()
    (stale / "point.json").write_text("{}")
    alive = tmp_path / f"{childrun.TEMP_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    unrelated = tmp_path / "aorta-point-notapid"
    unrelated.mkdir()
    removed = childrun.remove_stale_point_dirs(str(tmp_path))
    assert removed == [str(stale)]
    assert not stale.exists()
    assert alive.exists()
    assert unrelated.exists()


@pytest.mark.slow
def test_sweep_repeats_interleave_and_analyse_over_runs(tmp_path):
    out = tmp_path / "s.json"
    proc = run_cli("sweep", "hetero_kernels", "--streams", "1,2", *TINY, "--repeats", "2", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = load_json(out)
    assert data["repeats"] == 2
    assert len(data["schedule"]) == 2
    assert all(sorted(r) == [1, 2] for r in data["schedule"])
    assert sorted((p["key"]["streams"], p["key"]["repeat"]) for p in data["points"]) == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
    ]
    pids = {p["result"]["environment"]["pid"] for p in data["points"]}
    assert len(pids) == 4, "every run in a fresh process"
    assert all(p["conditions"]["cpu_count"] for p in data["points"])
    analysis = data["analysis"]
    assert analysis["runs_per_point"] == [2, 2]
    assert analysis["confidence"] == "unknown"  # 2 runs: noise not measured well enough
    ones = sorted(p["result"]["throughput"] for p in data["points"] if p["key"]["streams"] == 1)
    assert analysis["throughput_ci"][0] == pytest.approx(ones)  # [min, max] of two runs
    assert "Runs" in proc.stdout
    assert "confidence unknown" in proc.stdout
    cmp = run_cli_inprocess("compare", "-b", str(out), "-t", str(out), "--json")
    assert cmp.returncode == 0
    assert [p["runs"] for p in json.loads(cmp.stdout)["tests"][0]["pairs"]] == [[2, 2], [2, 2]]
    again = run_cli_inprocess(  # every point kept: no child starts
        "sweep", "hetero_kernels", "--streams", "1,2", *TINY, "--repeats", "2", "-o", str(out), "--resume"
    )
    assert again.returncode == 0
    assert again.stderr.count("already done (resumed)") == 4


SETPRIV_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="planting as user nobody needs root")
def test_foreign_point_folders_in_shared_temp_cannot_break_a_sweep(tmp_path):
    """Security item 4: user nobody plants aorta-point-<huge pid>-x and a folder with a dead pid
    in the shared temp folder; the sweep runs, nobody's folders are never parsed nor removed."""

    shared = Path(tempfile.mkdtemp(prefix="aorta-test-shared-", dir="/tmp"))  # nobody can reach it
    shared.chmod(0o1777)
    try:
        _sweep_with_planted_folders(shared, tmp_path)
    finally:
        shutil.rmtree(shared)


def _sweep_with_planted_folders(shared: Path, tmp_path: Path) -> None:
    from aorta.hw_queue_eval.sweeps import childrun

    dead = subprocess.Popen(["true"])
    dead.wait()
    planted = [
        f"{childrun.TEMP_PREFIX}99999999999999999999-x",
        f"{childrun.TEMP_PREFIX}{dead.pid}-y",
        f"{childrun.TEMP_PREFIX}-1-z",
        f"{childrun.TEMP_PREFIX}\u0663\u0663-w",
    ]
    for name in planted:
        subprocess.run([*SETPRIV_NOBODY, "mkdir", str(shared / name)], check=True)
    assert childrun.remove_stale_point_dirs(str(shared)) == []
    assert all((shared / name).is_dir() for name in planted)
    out = tmp_path / "s.json"
    proc = run_cli(
        "sweep", "hetero_kernels", "--streams", "1", *TINY, "-o", str(out), env={"TMPDIR": str(shared)}
    )
    assert proc.returncode == 0, proc.stderr[-600:]
    assert "Traceback" not in proc.stderr
    assert load_json(out)["points"][0]["status"] == "ok"
    assert all((shared / name).is_dir() for name in planted)


def test_pid_alive_survives_absurd_pids():
    from aorta.common.procs import parse_pid, pid_alive

    assert pid_alive(99999999999999999999) is False
    assert pid_alive(-1) is False
    assert parse_pid("99999999999999999999") is None
    assert parse_pid("\u0663") is None
    assert parse_pid(str(os.getpid())) == os.getpid()


def test_a_point_child_starts_with_no_signal_held(tmp_path):
    """run_point holds SIGINT/SIGTERM while the child starts (a Ctrl+C then lands once the child
    is known and can be stopped): the child must get the mask back, or it could not be stopped."""
    from aorta.hw_queue_eval.sweeps.childrun import run_point

    report = (
        "import json, sys\n"
        "blocked = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('SigBlk:'))\n"
        "json.dump({'sigblk': blocked}, open(sys.argv[1], 'w'))\n"
    )
    outcome = run_point([], build_command=lambda _args, out, _n: [sys.executable, "-I", "-c", report, out])
    assert outcome.status == "ok", outcome.error
    assert int(outcome.result["sigblk"], 16) == 0
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the parent's mask is back too


def test_a_relative_trace_folder_is_the_callers_not_the_childs(tmp_path, monkeypatch):
    """Children run in a private folder: `--trace-out rel-traces/` must reach them resolved in
    the caller's folder (it failed for a relative folder that exists)."""
    import sys

    from aorta.hw_queue_eval.cli import main
    from aorta.hw_queue_eval.commands.collaborators import Collaborators

    seen: list[list[str]] = []

    def failing_child(run_args, out_path, nproc_per_node):
        seen.append(list(run_args))
        return [sys.executable, "-I", "-c", "raise SystemExit(3)"]

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel-traces").mkdir()
    args = ["sweep", "hetero_kernels", "-s", "1", *TINY, "--trace-out", "rel-traces/", "-o", "s.json"]
    with pytest.raises(SystemExit):
        main(args, Collaborators(point_command=failing_child))
    (run_args,) = seen
    trace = run_args[run_args.index("--trace-out") + 1]
    assert trace == str(tmp_path / "rel-traces" / "hetero_kernels-s1.trace.json")


@pytest.mark.parametrize("command", ["sweep", "policy-sweep"])
def test_a_sweep_does_not_replace_a_run_result(tmp_path, command):
    out = tmp_path / "r.json"
    out.write_text((Path(__file__).parent / "fixtures" / "results" / "run.json").read_text())
    before = out.read_bytes()
    proc = run_cli_inprocess(command, "hetero_kernels", "--streams", "1", *TINY, "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "already holds a run file" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert out.read_bytes() == before


def test_sweep_refuses_an_unknown_device_before_any_child(tmp_path):
    from aorta.hw_queue_eval.cli import main
    from aorta.hw_queue_eval.commands.collaborators import Collaborators

    started: list[int] = []
    seams = Collaborators(point_command=lambda *a: started.append(1) or ["false"])
    with pytest.raises(SystemExit) as info:
        main(["sweep", "hetero_kernels", "-s", "1,2", "-d", "tpu", "-o", str(tmp_path / "s.json")], seams)
    assert info.value.code == 2
    assert started == [] and list(tmp_path.iterdir()) == []


def test_a_point_whose_run_failed_verification_says_so() -> None:
    """A run that measured but failed (exit 1) prints its report on stdout, which a point
    discards: the point's error comes from the result, not from the last progress line."""
    from aorta.hw_queue_eval.sweeps.childrun import run_point

    child = (
        "import json, sys\n"
        "print('Running graph_subgraphs on 4 streams…', file=sys.stderr)\n"
        "json.dump({'status': 'failed', 'error': 'verification failed',"
        " 'verification': {'passed': False, 'max_rel_error': 0.25}}, open(sys.argv[1], 'w'))\n"
        "sys.exit(1)\n"
    )
    outcome = run_point([], build_command=lambda _args, out, _n: [sys.executable, "-I", "-c", child, out])
    assert outcome.status == "failed" and outcome.returncode == 1
    assert outcome.error == "run failed: verification failed (max relative error 0.25)"


def test_a_torchrun_sweep_on_a_host_whose_name_does_not_resolve_is_refused_up_front(tmp_path) -> None:
    """torchrun --standalone retries for ever when the hostname does not resolve (seen in a
    debootstrapped Debian 12 without the name in /etc/hosts): one line, exit 2, nothing written."""
    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.sweeps.childrun import check_torchrun_host

    check_torchrun_host("localhost")
    with pytest.raises(UsageError, match=r"hostname 'no-such-host\.invalid' does not resolve.*/etc/hosts"):
        check_torchrun_host("no-such-host.invalid")


@pytest.mark.parametrize("command", ["sweep", "policy-sweep"])
def test_torchrun_commands_refuse_an_unresolvable_hostname(tmp_path, monkeypatch, command) -> None:
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: "no-such-host.invalid")
    out = tmp_path / "out.json"
    args = [command, "comms_compute_overlap", "--streams", "2", "-d", "cpu", "--nproc-per-node", "2"]
    proc = run_cli_inprocess(*args, "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    assert "does not resolve" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()

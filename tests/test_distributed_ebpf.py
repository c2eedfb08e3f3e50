"""run --ebpf-trace under torchrun: one bpftrace per node, per-rank sections equal to each rank's
own hand-offs, no orphan bpftrace when a rank dies."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from aorta.ebpf.probes.cpu_sched import per_queue_cap, queue_slice
from aorta.hw_queue_eval.distributed.node_tracer import QUEUE_STRIDE, node_target
from aorta.hw_queue_eval.tracing.window_context import WindowContext
from conftest import load_json, wait_until_measuring
from ebpf_support import require_ebpf
from test_distributed import (
    _failing_rank_args,
    _free_port,
    _run_args,
    _torchrun,
    kill_9_leaves_no_process,
    long_torchrun_sweep,
)


def test_node_target_keeps_ranks_apart():
    ranks = [
        {
            "pid": 100,
            "submitter_tid": 100,
            "workers": [
                {"tid": 101, "queue": 0, "doorbell_fd": 7},
                {"tid": 102, "queue": 1, "doorbell_fd": 8},
            ],
        },
        {"pid": 200, "submitter_tid": 200, "workers": [{"tid": 201, "queue": 0, "doorbell_fd": 7}]},
    ]
    target = node_target(ranks)
    assert target.pids == (100, 200)
    assert target.window_ranks == 2
    # same fd and queue number in both ranks: told apart by pid and by the rank's queue range
    assert target.doorbells == ((100, 7, 101, 0), (100, 8, 102, 1), (200, 7, 201, QUEUE_STRIDE))
    assert target.thread_labels == {
        101: "p100/q0",
        102: "p100/q1",
        100: "p100/host",
        201: "p200/q0",
        200: "p200/host",
    }
    with pytest.raises(ValueError, match="outside"):
        node_target([{"pid": 1, "workers": [{"tid": 2, "queue": QUEUE_STRIDE, "doorbell_fd": 3}]}])


def test_queue_slice_gives_each_rank_its_own_queues_renumbered():
    maps = {
        "@cpu_sched_seq": {"0": 5, "1": 3, str(QUEUE_STRIDE): 4},
        "@cpu_sched_ring": {"0,0": 11, f"{QUEUE_STRIDE},0": 22, f"{QUEUE_STRIDE},1": 23},
        "@cpu_sched_cpus": {"101,0": 1},
    }
    first = queue_slice(maps, 0, QUEUE_STRIDE)
    second = queue_slice(maps, QUEUE_STRIDE, QUEUE_STRIDE)
    assert first["@cpu_sched_seq"] == {"0": 5, "1": 3}
    assert second["@cpu_sched_seq"] == {"0": 4}
    assert second["@cpu_sched_ring"] == {"0,0": 22, "0,1": 23}
    assert first["@cpu_sched_cpus"] == maps["@cpu_sched_cpus"]  # keyed by tid: left as is
    assert queue_slice(maps, 2 * QUEUE_STRIDE, QUEUE_STRIDE)["@cpu_sched_seq"] is None


def _proc_tree(root: int) -> set[int]:
    """root and all its descendants now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _is_session(pid: int) -> bool:
    """A tracing bpftrace (it runs a program: a memfd as root, a file under sudo), not the short
    `bpftrace --version` readiness probe."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return comm == "bpftrace" and b"--version" not in argv and b"json" in argv


class SessionWatch:
    """Every bpftrace session started under the given torchrun processes (procfs scan, 20 ms)."""

    def __init__(self, roots: list[int]) -> None:
        self.roots, self.seen = roots, set()
        self.parents: set[int] = set()  # what started each bpftrace (also `bpftrace --version`)
        self.started_by: dict[int, tuple[int | None, str | None]] = {}  # session → its parent
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scan, daemon=True)
        self._thread.start()

    def _scan(self) -> None:
        while not self._stop.is_set():
            for root in self.roots:
                tree = _proc_tree(root) - {root}
                for p in tree:  # a bpftrace's own short-lived fork is not another session
                    if p not in self.seen and _is_session(p) and _comm(_parent(p) or 0) != "bpftrace":
                        self.seen.add(p)
                        self.started_by[p] = (_parent(p), _comm(_parent(p) or 0))
                self.parents |= {  # a bpftrace that forks is not a second process starting one
                    q for p in tree if _comm(p) == "bpftrace" and (q := _parent(p)) and _comm(q) != "bpftrace"
                }
            self._stop.wait(0.02)

    def stop(self) -> set[int]:
        self._stop.set()
        self._thread.join(10)
        return self.seen


def _check_rank_sections(result: dict, bpftrace_pids: set[int]) -> None:
    ranks = result["distributed"]["rank_results"]
    assert len({r["distributed"]["pid"] for r in ranks}) == len(ranks)
    for rank in ranks:
        queue = rank["ebpf_queue_metrics"]
        assert queue["status"] == "ok", queue.get("error")
        assert queue["lost_events"] == 0
        node = queue["node_tracer"]
        assert node["bpftrace_pid"] in bpftrace_pids
        assert rank["distributed"]["pid"] in node["traced_pids"]
        # ground truth: the harness counted its own hand-offs (one doorbell write each)
        handoffs = rank["ops"]["handoffs"]
        assert handoffs["count"] > 0
        assert queue["total_submissions"] == handoffs["count"]
        assert queue["submissions_per_queue"] == handoffs["per_queue"]
        assert queue["total_dispatches"] == handoffs["count"]
        comparison = rank["ebpf_vs_cuda_comparison"]
        assert comparison["submissions_equal"]
        assert comparison["coverage_pct"] == 100.0
        threads = queue["families"]["cpu_sched"]["metrics"]["threads"]
        assert rank["distributed"]["pid"] in {t["tid"] for t in threads}  # its own main thread
        assert not {t["tid"] for t in threads} & {r["distributed"]["pid"] for r in ranks if r is not rank}
    # the kernel's per-submission store is divided over every doorbell of the node's program
    for node in {r["distributed"]["node_rank"] for r in ranks}:
        members = [r for r in ranks if r["distributed"]["node_rank"] == node]
        workers = sum(
            1
            for r in members
            for t in r["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]["threads"]
            if t["queue"] is not None
        )
        for rank in members:
            assert rank["ebpf_queue_metrics"]["per_submission_cap_per_queue"] == per_queue_cap(workers)


def _check_memory_and_runtime_per_rank(result: dict) -> None:
    """--ebpf-memory-trace / --ebpf-gpu-runtime under torchrun: each rank its own memory section
    (its own pid's faults), and on the CPU backend the runtime family not attached, with why."""
    ranks = result["distributed"]["rank_results"]
    pids = {r["distributed"]["pid"] for r in ranks}
    for rank in ranks:
        memory = rank["ebpf_memory_metrics"]
        assert memory["status"] == "ok", memory.get("error")
        assert memory["lost_events"] == 0
        assert memory["node_tracer"]["rank_key"] == rank["distributed"]["local_rank"] + 1
        faults = memory["families"]["hostmem"]["metrics"]["page_faults"]
        own = rank["distributed"]["pid"]
        assert faults["count"] > 0 and str(own) in faults["per_process"]
        assert not {str(p) for p in pids - {own}} & set(faults["per_process"])
        assert memory["host_page_faults"] == faults["count"]
        runtime = rank["ebpf_queue_metrics"]["families"]["gpu_runtime"]
        assert runtime["events_attached"] == [] and runtime["metrics"]["summary"] is None
        assert "no HIP/HSA/CUDA runtime library is mapped" in runtime["events_missing"]["uprobe:*"]


def _gone(pids: set[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(Path(f"/proc/{p}").exists() and _is_session(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.ebpf
@pytest.mark.slow
@pytest.mark.parametrize(("workload", "streams"), [("moe", 4), ("comms_compute_overlap", 3)])
def test_one_bpftrace_for_two_ranks_and_each_rank_its_own_numbers(tmp_path, workload, streams):
    require_ebpf()
    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_run_args(workload, streams),
        "--ebpf-trace",
        "--ebpf-memory-trace",
        "--ebpf-gpu-runtime",
        "-o",
        str(out),
    )
    watch = SessionWatch([proc.pid])
    stdout, stderr = proc.communicate(timeout=240)
    seen = watch.stop()
    assert proc.returncode == 0, stderr[-2000:]
    assert len(seen) == 1, seen  # one per node, started by local rank 0 only
    # the hand-over's waits poll without timed-out store waits: torch logs none of them
    assert "waitForInput" not in stdout + stderr, stderr[-2000:]
    assert len(watch.parents) == 1  # the other rank ran no bpftrace at all (not even --version)
    result = load_json(out)
    _check_rank_sections(result, seen)
    _check_memory_and_runtime_per_rank(result)
    ranks = result["distributed"]["rank_results"]
    assert len({r["ebpf_queue_metrics"]["node_tracer"]["bpftrace_pid"] for r in ranks}) == 1
    # one console line per rank with that rank's own eBPF numbers
    printed = [line for line in stdout.splitlines() if " eBPF: " in line]
    names = [f"rank {r['distributed']['rank']}" for r in ranks]
    assert [line.split(" eBPF: ")[0] for line in printed] == names
    for line, rank in zip(printed, ranks, strict=True):
        queue = rank["ebpf_queue_metrics"]
        assert f": {queue['total_submissions']} submissions, {queue['total_dispatches']} dispatches" in line
        assert f"P99 {queue['submit_to_dispatch_p99_us']:.1f} us" in line
        assert f"memory: {rank['ebpf_memory_metrics']['host_page_faults']} host page faults" in line
    assert watch.parents == {r["distributed"]["pid"] for r in ranks if r["distributed"]["local_rank"] == 0}
    assert _gone(seen)


@pytest.mark.ebpf
@pytest.mark.slow
def test_two_nodes_run_one_bpftrace_each(tmp_path):
    require_ebpf()
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
    nodes = [
        _torchrun(*common, "--node-rank", str(n), *_run_args("moe", 4), "--ebpf-trace", "-o", str(out))
        for n in (0, 1)
    ]
    watches = [SessionWatch([node.pid]) for node in nodes]
    outputs = [node.communicate(timeout=300) for node in nodes]
    seen = [watch.stop() for watch in watches]
    for node, (_, stderr) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, stderr[-2000:]
    assert [len(s) for s in seen] == [1, 1], [w.started_by for w in watches]
    assert not seen[0] & seen[1]
    result = load_json(out)
    assert result["distributed"]["world_size"] == 4
    _check_rank_sections(result, seen[0] | seen[1])
    by_node: dict[int, set[int]] = {}
    for rank in result["distributed"]["rank_results"]:
        node = rank["ebpf_queue_metrics"]["node_tracer"]
        by_node.setdefault(rank["distributed"]["node_rank"], set()).add(node["bpftrace_pid"])
    assert all(len(pids) == 1 for pids in by_node.values())
    assert len(by_node) == 2


@pytest.mark.ebpf
@pytest.mark.slow
def test_a_rank_killed_mid_window_leaves_no_bpftrace_and_no_file(tmp_path):
    require_ebpf()
    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_run_args("moe", 4, iterations=1_000_000),
        "--ebpf-trace",
        "-o",
        str(out),
    )
    watch = SessionWatch([proc.pid])
    deadline = time.monotonic() + 120
    while not watch.seen:
        assert time.monotonic() < deadline, "no bpftrace started"
        assert proc.poll() is None, "no bpftrace started"
        time.sleep(0.1)
    wait_until_measuring(proc, processes=2)  # both ranks inside the window
    (session,) = watch.seen
    lead = int(Path(f"/proc/{session}/stat").read_text().rpartition(")")[2].split()[1])
    agent_children = _proc_tree(proc.pid) - {proc.pid}
    others = [p for p in agent_children if p != lead and p != session and _parent(p) == _parent(lead)]
    assert others, "the second rank was not found"
    os.kill(others[0], signal.SIGKILL)  # a rank this test started dies without a word
    proc.communicate(timeout=180)
    seen = watch.stop()
    assert proc.returncode != 0
    assert _gone(seen), "bpftrace outlived its run"
    assert not out.exists()
    assert not list(tmp_path.iterdir())


@pytest.mark.ebpf
@pytest.mark.slow
def test_kill_9_of_a_traced_torchrun_sweep_leaves_no_rank_and_no_bpftrace(tmp_path):
    """Before: the rank (and so its node's bpftrace) was still running 120 s after the kill."""
    require_ebpf()
    sweep = long_torchrun_sweep(tmp_path, "--ebpf-trace")
    watch = SessionWatch([sweep.pid])
    wait_until_measuring(sweep)
    assert watch.seen, "the rank measures without its bpftrace"
    started = kill_9_leaves_no_process(sweep)
    assert len(started) >= 3  # torchrun's agent, its rank and the rank's bpftrace
    assert _gone(watch.stop())


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.ebpf
@pytest.mark.slow
def test_a_failing_rank_during_the_hand_over_is_named_and_leaves_nothing(tmp_path):
    require_ebpf()
    out = tmp_path / "r.json"
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_failing_rank_args(1, _run_args("moe", 4)),
        "--ebpf-trace",
        "-o",
        str(out),
    )
    watch = SessionWatch([proc.pid])
    _, stderr = proc.communicate(timeout=240)
    seen = watch.stop()
    assert proc.returncode != 0
    # rank 0 names it ("rank 0 stopped: rank 1: …") unless torchrun's SIGTERM came first, then
    # torchrun's own report names it
    assert "injected failure" in stderr
    assert "rank 0 stopped: rank 1" in stderr or "local_rank: 1" in stderr
    assert _gone(seen)
    assert not out.exists()
    assert not list(tmp_path.iterdir())


class FakeStore:
    """The part of torchrun's store the hand-over uses (no torch.distributed needed)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)

    def wait(self, keys, timeout):
        if not self.check(keys):
            raise RuntimeError(f"wait timeout after {timeout}")

    def add(self, key, amount):
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value


class _Backend:
    def __init__(self, name):
        self.name = name

    def workers(self):
        return []


def _env(rank, local_rank, world=2):
    from aorta.hw_queue_eval.distributed.torchrun import DistEnv

    return DistEnv(rank=rank, world_size=world, local_rank=local_rank, local_world_size=world, node_rank=0)


@pytest.fixture
def store(monkeypatch):
    from aorta.hw_queue_eval.distributed import node_tracer
    from aorta.hw_queue_eval.distributed import torchrun as distributed

    fake = FakeStore()
    monkeypatch.setattr(node_tracer, "_store", lambda: fake)
    monkeypatch.setattr(distributed, "default_store", lambda: fake)
    return fake


def test_a_rank_waiting_on_the_hand_over_stops_naming_the_failed_rank(store):
    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer
    from aorta.hw_queue_eval.distributed.torchrun import report_failure

    tracer = NodeTracer(_env(1, 1), timeout_s=30)
    report_failure(_env(0, 0), "RuntimeError: boom")
    started = time.monotonic()
    with pytest.raises(UsageError, match="rank 1 stopped: rank 0: RuntimeError: boom"):
        tracer.prepare(_Backend("cpu"), None)
    assert time.monotonic() - started < 5  # not the 30 s timeout
    assert "aorta/ebpf/0/node0/target/1" in store.data  # it did hand over its threads first


def test_the_hand_over_waits_without_store_waits_that_time_out(store, monkeypatch):
    """A key that appears 0.5 s later is read without a single `wait` that runs out: torch's
    store client logs `[c10d] waitForInput … timed out after 200ms` for each of those."""
    from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer

    timed_out = []
    real_wait = store.wait

    def wait(keys, timeout):
        try:
            real_wait(keys, timeout)
        except RuntimeError:
            timed_out.append(keys)
            time.sleep(timeout.total_seconds())
            raise

    monkeypatch.setattr(store, "wait", wait)
    tracer = NodeTracer(_env(1, 1), timeout_s=30)
    threading.Timer(0.5, store.set, args=(tracer._key("token"), "hello")).start()
    assert tracer._wait("token", "a test key") == "hello"
    assert timed_out == []


@pytest.mark.slow
def test_hand_over_times_out_with_one_line_naming_what_it_waited_for(store):
    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer

    tracer = NodeTracer(_env(1, 1), timeout_s=0.5)
    with pytest.raises(UsageError, match=r"waited 0\.5 s for local rank 0 to start"):
        tracer.prepare(_Backend("cpu"), None)


def test_gpu_backend_under_torchrun_gets_one_node_program_keyed_by_rank(store, monkeypatch):
    """The GPU queue families are split per rank too: local rank 0 starts one program for
    both ranks' pids, with the rank key as @aorta_pids' value and first in the per-rank maps."""
    from aorta.ebpf import engine
    from aorta.hw_queue_eval.distributed import node_tracer
    from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer

    started = []

    class Session:
        pid = 4242

    def fake_session(program, ready):
        started.append(program)
        return Session()

    monkeypatch.setattr(engine, "start_session", fake_session)
    monkeypatch.setattr(node_tracer, "check_siblings", lambda ranks: None)
    require_ebpf()  # CI=true: a failure, never a skip
    lead = NodeTracer(_env(0, 0), timeout_s=5, memory=True, gpu_runtime=True)
    other = NodeTracer(_env(1, 1), timeout_s=5, memory=True, gpu_runtime=True)
    if not lead.ready.ok:
        pytest.skip(f"no bpftrace/tracefs here: {lead.ready.reason}")
    other_thread = threading.Thread(target=other.prepare, args=(_Backend("gpu"), None))
    other_thread.start()
    lead.prepare(_Backend("gpu"), None)
    other_thread.join(10)
    assert len(started) == 1 and lead.error is None
    assert lead.token == other.token == started[0].token
    text = started[0].text
    assert f"@aorta_pids[{os.getpid()}] = 1;" in text  # both "ranks" are this process here
    assert "@aorta_pids[pid]" in text
    names = [f.name for f in started[0].families]
    assert names[0] == "gpu_runtime" and {"kfd", "amdgpu", "gpu_scheduler", "hostmem", "amdmem"} <= set(names)
    # the other rank collects with what rank 0 rendered (nothing mapped here: not attached)
    gpu = next(f for f in other.families if f.name == "gpu_runtime")
    lead_gpu = next(f for f in lead.families if f.name == "gpu_runtime")
    assert gpu is not lead_gpu and gpu.attached == lead_gpu.attached


def test_a_lead_whose_tracer_breaks_tells_the_other_ranks_instead_of_hanging_them(store):
    from aorta.hw_queue_eval.distributed.node_tracer import NodeTracer

    class BrokenSession:
        pid = 4242

        def stop(self):
            raise OSError("bpftrace vanished")

        def abort(self):
            pass

    lead, other = NodeTracer(_env(0, 0), timeout_s=30), NodeTracer(_env(1, 1), timeout_s=30)
    lead.token = other.token = 7
    lead.session, lead.program = BrokenSession(), object()
    section = lead.finish(WindowContext()).ebpf_queue_metrics
    assert section["status"] == "error"
    assert "bpftrace vanished" in section["error"]
    started = time.monotonic()
    section = other.finish(WindowContext()).ebpf_queue_metrics
    assert section["status"] == "error"
    assert "local rank 0: tracer failed" in section["error"]
    assert time.monotonic() - started < 5


def test_only_siblings_started_by_the_same_agent_are_traced():
    from aorta.hw_queue_eval.distributed.node_tracer import check_siblings

    check_siblings([{"pid": os.getpid()}])  # this process is its own parent's child
    with pytest.raises(ValueError, match="did not start: not traced"):
        check_siblings([{"pid": os.getpid()}, {"pid": 1}])


@pytest.mark.ebpf
@pytest.mark.slow
def test_ebpf_attach_to_the_torchrun_launcher_follows_every_rank(tmp_path):
    """ebpf-attach --pid <torchrun>: the ranks it already started are traced from the start, and
    each rank's queue doorbells are found from /proc and counted, in disjoint queue ranges."""
    import json
    import subprocess
    import sys

    require_ebpf()
    proc = _torchrun(
        "--nproc-per-node",
        "2",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        *_run_args("moe", 4, iterations=1_000_000),
        "--ebpf-memory-trace",
    )
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while len(ranks) < 2:  # the launcher's own children running `run`
            assert time.monotonic() < deadline and proc.poll() is None, "the ranks did not start"
            ranks = [
                p
                for p in _proc_tree(proc.pid) - {proc.pid}
                if _parent(p) == proc.pid
                and b"aorta.hw_queue_eval" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
            time.sleep(0.2)
        # their queues exist once they measure: the doorbells are found from /proc at attach time
        wait_until_measuring(proc, processes=2, ignore={proc.pid})
        out = tmp_path / "a.json"
        attach = subprocess.run(
            [
                sys.executable,
                "-m",
                "aorta.hw_queue_eval",
                "ebpf-attach",
                "--pid",
                str(proc.pid),
                "--duration",
                "4s",
                "--ebpf-trace",
                "--ebpf-memory-trace",
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert proc.poll() is None, "the ranks ended before the attach did: not a live test"
        tasks = {rank: {int(t) for t in os.listdir(f"/proc/{rank}/task")} for rank in ranks}
    finally:
        proc.terminate()
        proc.communicate(timeout=120)
    assert attach.returncode == 0, attach.stderr[-2000:]
    data = json.loads(out.read_text())
    assert {proc.pid, *ranks} <= set(data["traced_pids"])
    for key in ("ebpf_queue_metrics", "ebpf_memory_metrics"):
        assert data[key]["status"] == "ok" and data[key]["lost_events"] == 0, data[key]
    # events from both ranks: each rank's threads were switched onto a CPU in the window
    threads = data["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]["threads"]
    switches = {row["tid"]: row["switches"] or 0 for row in threads}
    for rank in ranks:
        assert sum(switches.get(tid, 0) for tid in tasks[rank]) > 0, (rank, switches)
    memory = data["ebpf_memory_metrics"]["families"]["hostmem"]["metrics"]
    assert set(memory["page_faults"]["per_process"]) <= {str(p) for p in data["traced_pids"]}
    # each rank's queues were found from /proc and traced, in disjoint ranges (k × 1000 + N)
    # (a queue busy the whole sampling time may stay unresolved on a loaded machine: said, not
    # guessed, so only what was found is checked here)
    queues: dict[int, set[int]] = {}
    for found in data["doorbells"]["found"]:
        queues.setdefault(found["pid"], set()).add(found["queue"])
    assert set(queues) == set(ranks), data["doorbells"]
    assert sorted(min(q) // 1000 for q in queues.values()) == [0, 1]
    queue = data["ebpf_queue_metrics"]
    assert queue["source"] == "cpu_sched"
    per_queue = queue["submissions_per_queue"]
    assert all(per_queue.get(str(min(q)), 0) > 0 for q in queues.values()), per_queue

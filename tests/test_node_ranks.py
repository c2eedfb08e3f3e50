"""A node program (torchrun: one bpftrace for every local rank) keys each per-process map by rank:
each rank's slice holds exactly its own launches, streams, doorbells, mmaps and faults."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes.base import CollectContext, StreamHandle, TraceTarget
from aorta.ebpf.probes.cpu_sched import CpuSchedFamily
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.probes.gpu_runtime_views import ALL_VIEWS
from aorta.ebpf.probes.host_memory import HostMemoryFamily
from aorta.ebpf.probes.ranks import rank_key, rank_keyed, rank_slice
from conftest import unavailable, wait_until
from gpu_standins import build, gcc

# one "rank": loads the HIP stand-in (and its HSA one), waits, then in the window creates two
# streams, launches N kernels alternating between them (each rings its queue's doorbell) and
# maps M anonymous regions; prints its stream handles; exits when told
RANK = """
import ctypes, mmap, sys
lib = ctypes.CDLL(sys.argv[1])
lib.standin_configure.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
lib.hipModuleLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
lib.standin_configure(2, 1000, 0)
launches, maps = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
streams = []
for _ in range(2):
    handle = ctypes.c_void_p()
    assert lib.hipStreamCreateWithPriority(ctypes.byref(handle), 0, 0) == 0
    streams.append(handle.value)
for i in range(launches):
    lib.hipModuleLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, streams[i % 2], None, None)
held = [mmap.mmap(-1, 4096 * (5 + k)) for k in range(maps)]
for region in held:
    region[0] = 1  # one write fault per region at least
print(" ".join(str(s) for s in streams), flush=True)
sys.stdin.readline()
"""

PLAN = [(5, 3), (9, 40)]  # (launches, mmaps) per rank slot: different, so a mix-up shows


def _voluntary_switches(pid: int) -> int:
    """The process's main thread's voluntary context switches so far (/proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches in /proc/{pid}/status")


@pytest.fixture(scope="module")
def hip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if gcc() is None:
        unavailable(
            "gcc not installed: cannot build the stand-in GPU runtimes",
            "gcc is required in CI to build the stand-in GPU runtimes",
        )
    return build(tmp_path_factory.mktemp("standins"))["libamdhip64.so"]


def test_rank_slice_keeps_one_ranks_entries_and_node_wide_maps():
    maps = {
        "@x_launches": {"1,7,100": 3, "2,7,100": 4, "2,8,200": 1},
        "@x_s2d": {"1": {"count": 2, "total": 10}, "2": {"count": 1, "total": 5}},
        "@x_only_two": {"2,5": 1},
        "@x_node": {"7": 9},
    }
    names = ["@x_launches", "@x_s2d", "@x_only_two"]
    first = rank_slice(maps, names, rank_key(0))
    assert first["@x_launches"] == {"7,100": 3}
    assert first["@x_s2d"] == {"count": 2, "total": 10}  # only the rank key: a scalar again
    assert "@x_only_two" not in first  # empty for this rank: absent, as bpftrace prints it
    assert first["@x_node"] == maps["@x_node"]  # not rank-keyed: node-wide, unchanged
    second = rank_slice(maps, names, rank_key(1))
    assert second["@x_launches"] == {"7,100": 4, "8,200": 1} and second["@x_only_two"] == {"5": 1}


@pytest.mark.ebpf
def test_one_program_for_two_ranks_gives_each_its_own_launches_doorbells_and_mmaps(hip_path):
    from ebpf_support import require_ebpf

    require_ebpf()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-I", "-c", RANK, str(hip_path), str(n), str(m)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n, m in PLAN
    ]
    session = None
    try:
        for rank in ranks:
            assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
        ready = engine.check_readiness()
        target = TraceTarget(tuple(r.pid for r in ranks), rank_keys=True)
        program = engine.make_program(
            False,
            False,
            target,
            ready.tracefs,
            ready.version,
            families=[GpuRuntimeFamily(views=ALL_VIEWS), HostMemoryFamily(), CpuSchedFamily()],
        )
        session = engine.start_session(program, ready)
        session.window_start()
        streams = []
        blocked_before = [_voluntary_switches(rank.pid) for rank in ranks]
        for rank in ranks:
            assert rank.stdin is not None and rank.stdout is not None
            rank.stdin.write("go\n")
            rank.stdin.flush()
        for rank in ranks:
            streams.append({int(s) for s in rank.stdout.readline().split()})
        tasks = [{int(t) for t in os.listdir(f"/proc/{rank.pid}/task")} for rank in ranks]
        for rank, before in zip(ranks, blocked_before, strict=True):
            # each rank blocks on its next readline inside the window (a switch the window must see)
            wait_until(lambda: _voluntary_switches(rank.pid) > before, f"rank {rank.pid} blocked again")  # noqa: B023
        session.window_stop()
        out = session.stop()
        session = None
    finally:
        if session is not None:
            session.abort()
        for rank in ranks:
            if rank.poll() is None:
                rank.communicate("exit\n", timeout=30)
    assert out.exit_code == 0 and out.lost_events == 0, out.stderr
    assert len(program.used_events["gpu_runtime"]) > 0, program.missing["gpu_runtime"]
    for slot, ((launches, mmaps), rank) in enumerate(zip(PLAN, ranks, strict=True)):
        mine = replace(out, maps=rank_slice(out.maps, rank_keyed(program.families), rank_key(slot)))
        # no /proc snapshots: the threads are what the rank-keyed switch counts saw (GPU backend)
        context = CollectContext(
            window=engine.window_edges(out),
            rank_key=rank_key(slot),
            snapshots={},
            pids=(rank.pid,),
            stream_handles=tuple(StreamHandle(i, h) for i, h in enumerate(sorted(streams[slot]))),
        )
        gpu, host, cpu = (r.metrics for r in engine.collect_results(program, mine, context))
        # ground truth: what this rank did itself, none of the other rank's calls
        assert gpu["launches_total"] == launches
        assert {int(r["handle"], 16) for r in gpu["streams"] if r["launches"]} == streams[slot]
        assert {int(c["handle"], 16) for c in gpu["streams_created"]} == streams[slot]
        assert sum(q["doorbell_rings"] for q in gpu["queues"]) == launches
        assert gpu["stream_handles_joined"]["matched"] == 2
        assert set(host["mmap"]) and host["mmap"]["count"] >= mmaps  # + the interpreter's own
        assert host["mmap"]["bytes"] >= sum(4096 * (5 + k) for k in range(mmaps))
        assert set(host["page_faults"]["per_process"]) == {str(rank.pid)}
        assert host["page_faults"]["count"] >= mmaps
        switched = {t["tid"] for t in cpu["threads"] if t["switches"]}
        assert rank.pid in switched and switched <= tasks[slot]  # its own threads only
    # the node-wide totals are exactly the two ranks' shares (nothing lost, nothing doubled)
    keyed = out.maps["@gpu_runtime_launches"]
    assert {k.split(",")[0] for k in keyed} == {"1", "2"}
    assert sum(keyed.values()) == sum(n for n, _ in PLAN)

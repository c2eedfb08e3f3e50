"""Memory families against the real kernel: host events in the window, the AMD probe logic fed by
synthetic events, a run under induced memory pressure, and both flags in one bpftrace session."""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import engine
from aorta.ebpf import memory_metrics as mm
from aorta.ebpf.probes.amd_memory import AmdMemoryFamily, bo_move_probe, kfd_log_probe
from aorta.ebpf.probes.base import CollectContext, ProbeCode, ProbeFamily, RenderContext, TraceTarget
from aorta.ebpf.probes.host_memory import HostMemoryFamily

pytestmark = pytest.mark.ebpf
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 1 << 20
FAKE = 0x4D454D31  # prctl option no kernel knows: a synthetic-event channel for the AMD probe code
_libc = ctypes.CDLL(None, use_errno=True)


def _run_session(families: list[ProbeFamily], body: Any) -> tuple[Any, Any]:
    ready = engine.check_readiness()
    program = engine.make_program(
        False, True, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=families
    )
    session = engine.start_session(program, ready)
    try:
        body(session)
    except BaseException:
        session.abort()
        raise
    out = session.stop()
    assert out.exit_code == 0, out.stderr
    return program, out


def _maps(out: Any, family: ProbeFamily) -> dict[str, Any]:
    return {k: v for k, v in out.maps.items() if k.startswith(f"@{family.name}_")}


def _touch(n_bytes: int) -> None:
    """Map, write every page (one fault each: no huge pages), unmap."""
    region = mmap.mmap(-1, n_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_NOHUGEPAGE)
    for off in range(0, n_bytes, PAGE):
        region[off] = 1
    region.close()


@pytest.mark.slow
def test_host_family_counts_faults_and_mmaps_of_the_window_only(ebpf_ready: None) -> None:
    family = HostMemoryFamily()

    def body(session: Any) -> None:
        _touch(16 * MiB)  # before the window: must not count
        session.window_start()
        _touch(8 * MiB)
        session.window_stop()
        _touch(16 * MiB)  # after: must not count

    _, out = _run_session([family], body)
    assert out.lost_events == 0
    res = family.collect(
        _maps(out, family), CollectContext(window=engine.window_edges(out), pids=(os.getpid(),))
    )
    m = res.metrics
    pages = 8 * MiB // PAGE
    mine = m["page_faults"]["per_process"][str(os.getpid())]
    assert pages <= mine < pages + 1000, m["page_faults"]  # 2048 + interpreter noise, not 6144+
    assert m["page_faults"]["write"] >= pages
    assert m["mmap"]["count"] >= 1
    assert m["mmap"]["bytes"] >= 8 * MiB
    assert m["munmap"]["count"] >= 1
    assert m["munmap"]["bytes"] >= 8 * MiB
    assert m["mmap"]["bytes"] < 16 * MiB  # the 16 MiB maps outside the window are not counted
    assert m["memcg_reclaim"]["episodes"] == 0
    assert m["direct_reclaim"]["episodes"] == 0
    assert m["summary"]["host_page_faults"] == mine


class _FakeAmd(AmdMemoryFamily):
    """The AMD family's own probe code, attached to prctl(FAKE, …) so a test can feed it events."""

    def render(self, ctx: RenderContext) -> ProbeCode:
        attach = "tracepoint:syscalls:sys_enter_prctl"
        a = ctx.dialect.arg
        move_args = {
            "bo": a("arg2"),
            "bo_size": a("arg3"),
            "new_placement": a("arg4"),
            "old_placement": a("arg5"),
        }
        probes = [
            bo_move_probe(
                attach,
                move_args.__getitem__,
                f"{a('option')} == {FAKE} && {a('arg2')} > 100 && {ctx.gate}",
                ctx.pid_filter,
            )
        ]
        for kind in mm.KFD_KIND_NAMES:  # arg2 = kind (1..7), arg3 = process id, arg4 = delay
            probes.append(
                kfd_log_probe(
                    attach,
                    f"{a('option')} == {FAKE} && {a('arg2')} == {kind} && {ctx.gate}",
                    kind,
                    a("arg3"),
                    a("arg4") if kind == mm.KFD_SCHEDULE else None,
                )
            )
        self.attached = {"amdgpu:amdgpu_bo_move", "amdkfd:kfd_evict_process_worker_start"}
        return ProbeCode(
            probes=probes,
            begin=["@amdmem_kfd_variant[1] = 1;"],
            end=["clear(@amdmem_pend);", "clear(@amdmem_pend_tid);", "clear(@amdmem_pend_ts);"],
        )


def _move(bo: int, size: int, old: int, new: int) -> None:
    _libc.prctl(FAKE, ctypes.c_ulong(bo), ctypes.c_ulong(size), ctypes.c_ulong(new), ctypes.c_ulong(old))


def _kfd(kind: int, proc: int, delay: int = 0) -> None:
    _libc.prctl(FAKE, ctypes.c_ulong(kind), ctypes.c_ulong(proc), ctypes.c_ulong(delay), ctypes.c_ulong(0))


@pytest.mark.slow
def test_amd_probe_code_pairs_two_hop_moves_and_evictions_in_the_kernel(ebpf_ready: None) -> None:
    """Synthetic events through the real probe code; expected numbers worked out by hand:

    A 1 MiB SYSTEM→TT→VRAM, same thread                → 1 move, 1 MiB
    B 4 KiB VRAM→TT                                     → 1 move, 4 KiB
    C 8 KiB SYSTEM→TT then TT→SYSTEM (not SYSTEM↔VRAM)  → 2 moves, 16 KiB
    D 2 MiB VRAM→TT→SYSTEM, same thread                → 1 move, 2 MiB
    E 64 KiB SYSTEM→TT here, TT→VRAM in another thread  → 2 moves, 128 KiB (not one operation)
    F 4 KiB SYSTEM→TT, TT→VRAM 150 ms later            → 2 moves, 8 KiB (beyond the 100 ms pairing)
    before the window: G 1 MiB SYSTEM→TT→VRAM          → nothing
    → 11 hops in the window, 2 two-hop pairs (A, D), 9 logical moves.
    KFD, process 777: evict start, evict end, schedule (25 jiffies), ~60 ms, restore start/end
    → 1 eviction, 1 restore, 1 pair of about 60 ms; process 888 evicted, never restored.
    """
    family = _FakeAmd()

    def body(session: Any) -> None:
        _move(0x1001, MiB, 0, 1)
        _move(0x1001, MiB, 1, 2)  # G, outside the window
        session.window_start()
        _move(0xA01, MiB, 0, 1)
        _move(0xA01, MiB, 1, 2)
        _move(0xB01, 4096, 2, 1)
        _move(0xC01, 8192, 0, 1)
        _move(0xC01, 8192, 1, 0)
        _move(0xD01, 2 * MiB, 2, 1)
        _move(0xD01, 2 * MiB, 1, 0)
        _move(0xE01, 64 << 10, 0, 1)
        t = threading.Thread(target=_move, args=(0xE01, 64 << 10, 1, 2))
        t.start()
        t.join()
        _move(0xF01, 4096, 0, 1)
        _kfd(mm.KFD_EVICT_START, 777)
        _kfd(mm.KFD_EVICT_END, 777)
        _kfd(mm.KFD_SCHEDULE, 777, delay=25)
        _kfd(mm.KFD_EVICT_START, 888)
        time.sleep(0.15)
        _move(0xF01, 4096, 1, 2)
        _kfd(mm.KFD_RESTORE_START, 777)
        _kfd(mm.KFD_RESTORE_END, 777)
        session.window_stop()

    t0 = time.monotonic_ns()
    _, out = _run_session([family], body)
    elapsed_us = (time.monotonic_ns() - t0) / 1e3
    assert out.lost_events == 0
    res = family.collect(_maps(out, family), CollectContext(window=engine.window_edges(out), pids=(777,)))
    bo = res.metrics["bo_moves"]
    assert bo["hops_seen"] == 11
    assert bo["two_hop_moves"] == 2
    assert bo["moves"] == 9
    assert bo["bytes"] == MiB + 4096 + 16384 + 2 * MiB + 2 * (64 << 10) + 2 * 4096
    routes = {(r["from"], r["to"]): r["moves"] for r in bo["routes"]}
    assert routes[("SYSTEM", "VRAM")] == 1
    assert routes[("VRAM", "SYSTEM")] == 1
    assert routes[("TT", "VRAM")] == 2  # E's and F's second hops stay separate moves
    assert "@amdmem_pend" not in out.maps  # scratch maps cleared in END
    ev = res.metrics["evictions"]
    assert (ev["evictions"], ev["restores"], ev["evict_restore_pairs"]) == (1, 1, 1)
    assert 150_000 <= ev["avg_evict_to_restore_us"] < elapsed_us
    assert ev["other_processes"] == {"888": {"evictions": 1, "restores": 0}}
    assert ev["restore_delay"]["delay_jiffies"] == 25
    assert res.metrics["summary"]["total_faults"] == 1


def _cgroups_left() -> list[str]:
    from aorta.tools.memory_pressure import PREFIX, find_memory_cgroup

    parent = find_memory_cgroup().path
    return [p.name for p in parent.iterdir() if p.name.startswith(PREFIX)]


@pytest.mark.slow
def test_run_under_memory_pressure_records_reclaim_of_the_benchmark(
    ebpf_ready: None, cli, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    out = tmp_path / "pressure.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aorta.tools.memory_pressure",
            "--limit",
            "512M",
            "--",
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "run",
            "hetero_kernels",
            "--streams",
            "8",
            "-d",
            "cpu",
            "-i",
            "300",
            "--ebpf-memory-trace",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "memory.failcnt" in proc.stderr or "memory.events" in proc.stderr
    data = json.loads(out.read_text())
    section = data["ebpf_memory_metrics"]
    bench_pid = str(data["environment"]["pid"])
    memcg = section["families"]["hostmem"]["metrics"]["memcg_reclaim"]
    assert section["status"] == "ok"
    assert section["lost_events"] == 0
    assert memcg["per_process"].get(bench_pid, 0) > 0, memcg  # reclaim in the benchmark's context
    assert section["host_memcg_reclaim_episodes"] > 0
    assert section["families"]["hostmem"]["metrics"]["page_faults"]["per_process"][bench_pid] > 0
    assert _cgroups_left() == []  # cleaned up

    calm = tmp_path / "calm.json"
    res = cli(
        "run",
        "hetero_kernels",
        "--streams",
        "8",
        "-d",
        "cpu",
        "-i",
        "300",
        "--ebpf-memory-trace",
        "-o",
        str(calm),
    )
    assert res.returncode == 0, res.stderr
    quiet = json.loads(calm.read_text())["ebpf_memory_metrics"]
    assert quiet["host_memcg_reclaim_episodes"] == 0
    assert quiet["host_direct_reclaim_episodes"] <= 2  # near zero: 24 GiB host, no limit


@pytest.mark.slow
def test_both_flags_share_one_bpftrace_session(ebpf_ready: None, cli, tmp_path: Path) -> None:
    import json

    path = tmp_path / "both.json"
    res = cli(
        "run",
        "hetero_kernels",
        "--streams",
        "4",
        "-d",
        "cpu",
        "--ebpf-trace",
        "--ebpf-memory-trace",
        "-o",
        str(path),
    )
    assert res.returncode == 0, res.stderr
    assert "eBPF MEMORY METRICS:" in res.stdout
    assert "eBPF DRIVER-LEVEL QUEUE METRICS:" in res.stdout
    data = json.loads(path.read_text())
    queue, memory = data["ebpf_queue_metrics"], data["ebpf_memory_metrics"]
    assert queue["status"] == memory["status"] == "ok"
    # one session: the same probes, the same kernel-stamped window
    assert queue["probes_attached"] == memory["probes_attached"]
    assert queue["window"] == memory["window"]
    assert memory["lost_events"] == 0
    assert memory["host_page_faults"] is not None
    for key in ("bo_moves", "evictions", "total_faults", "fault_rate_per_sec", "avg_fault_latency_us"):
        assert key in memory
        assert memory[key] is None  # no amdgpu here: null, never 0
    assert "hostmem" in memory["families"]
    assert "amdmem" in memory["families"]
    assert "cpu_sched" in queue["families"]


@pytest.mark.parametrize("keep", [0, 1024], ids=["aggregates", "timeline"])
@pytest.mark.parametrize("gen", ["rocm-dkms-pasid", "rocm-dkms-pid", "linux-4.x", "linux-6.17"])
def test_memory_program_compiles_against_amdkfd_formats(
    ebpf_ready: None, gen: str, keep: int, tmp_path: Path
) -> None:
    """bpftrace -d checks the amdgpu + amdkfd memory probes against each recorded tree, with
    and without the --trace-out timeline records (BO move and KFD instants)."""
    import shutil

    from aorta.ebpf.tracefs import Tracefs
    from test_ebpf_compile import _compile, _tree

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to bind a recorded tracefs privately")
    tree = _tree(gen, tmp_path)
    program = engine.make_program(
        False,
        True,
        TraceTarget((os.getpid(),), timeline_events=keep),
        Tracefs(tree),
        engine.check_readiness().version,
        token=9,
    )
    assert "bo_move\n" in program.text
    assert ("@amdmem_tlbo_n[cpu]" in program.text) == bool(keep)
    assert ("@amdmem_tlkfd_n[cpu]" in program.text) == (bool(keep) and gen.startswith("rocm"))
    assert "amdgpu_vm_bo_map" in program.text
    script = tmp_path / "program.bt"
    script.write_text(program.text)
    rc, errors = _compile(tree, script)
    assert rc == 0, errors
    assert not errors, errors

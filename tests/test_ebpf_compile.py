"""Compile the AMD programs for real with `bpftrace -d` against the recorded formats.

bpftrace reads tracepoint formats from /sys/kernel/tracing. In a private mount namespace we bind
a copy of a recorded tree there (plus the `available_events` list bpftrace wants), so bpftrace's
own semantic analysis and code generation check every field, type and str() of the AMD probes on
a machine without an AMD driver. `-d` is a dry run: nothing is attached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes.base import TraceTarget
from aorta.ebpf.tracefs import Tracefs

pytestmark = pytest.mark.ebpf
FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"
SCRIPTS = Path(__file__).resolve().parents[1] / "ebpfaultline" / "bpftrace"


def _tree(gen: str, dest: Path) -> Path:
    tree = dest / gen
    shutil.copytree(FIXTURES / gen, tree)
    events = sorted(f"{p.parent.parent.name}:{p.parent.name}" for p in tree.glob("events/*/*/format"))
    (tree / "available_events").write_text("\n".join(events) + "\n")
    (tree / "available_filter_functions").write_text("")
    return tree


def _compile(tree: Path, script: Path) -> tuple[int, list[str]]:
    cmd = (
        f"mount --bind {tree} /sys/kernel/tracing && "
        f"exec {shutil.which('bpftrace') or 'bpftrace'} -d {script}"
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    errors = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if "ERROR" in line and "RLIMIT_MEMLOCK" not in line
    ]
    return proc.returncode, errors


@pytest.fixture
def can_unshare(ebpf_ready: None) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to bind a recorded tracefs privately")


@pytest.mark.slow
@pytest.mark.parametrize("node", [False, True], ids=["process", "torchrun-node"])
@pytest.mark.parametrize("gen", ["linux-5.4", "linux-6.8", "linux-6.17"])
def test_engine_program_compiles_against_recorded_formats(
    can_unshare: None, gen: str, node: bool, tmp_path: Path
) -> None:
    tree = _tree(gen, tmp_path)
    pid = os.getpid()  # a CPU-backend-like target: one queue worker with its doorbell fd 5
    if node:  # a node program for two ranks: every per-process map keyed by rank first
        other = os.getppid()
        target = TraceTarget(
            (pid, other),
            thread_labels={pid: "p/q0"},
            doorbells=((pid, 5, pid, 0),),
            window_ranks=2,
            rank_keys=True,
        )
    else:
        target = TraceTarget((pid,), thread_labels={pid: "q0"}, doorbells=((pid, 5, pid, 0),))
    program = engine.make_program(
        True, True, target, Tracefs(tree), engine.check_readiness().version, token=9
    )
    assert "tracepoint:amdgpu:amdgpu_sched_run_job" in program.text
    assert "tracepoint:syscalls:sys_enter_write" in program.text  # the doorbell probes too
    keyed = (
        "@amdgpu_submit_rank[",
        "@amdgpu_dispatches[$rk, ",
        "@gpu_scheduler_q2r[$rk]",
        "@kfd_calls[@aorta_pids[pid], $nr, $ph]",
        "$traced = @aorta_pids[pid];",
        f"@aorta_pids[{other if node else pid}] = 2;",
    )
    for text in keyed:
        assert (text in program.text) == node, text
    script = tmp_path / "program.bt"
    script.write_text(program.text)
    rc, errors = _compile(tree, script)
    assert rc == 0, errors
    assert not errors, errors


@pytest.mark.parametrize(
    "name", ["amdgpu_submissions.bt", "amdgpu_dispatch.bt", "amdgpu_submit_dispatch_latency.bt"]
)
@pytest.mark.parametrize("gen", ["linux-6.8", "linux-6.17"])
def test_amd_scripts_compile(can_unshare: None, gen: str, name: str, tmp_path: Path) -> None:
    rc, errors = _compile(_tree(gen, tmp_path), SCRIPTS / name)
    assert rc == 0, errors
    assert not errors, errors


def test_the_check_catches_a_missing_field(can_unshare: None, tmp_path: Path) -> None:
    """≤5.4 has no `ring` string: the scripts (documented as 5.5+) must be rejected there."""
    rc, errors = _compile(_tree("linux-5.4", tmp_path), SCRIPTS / "amdgpu_dispatch.bt")
    assert rc != 0
    assert any("ring" in e for e in errors)


@pytest.mark.slow
@pytest.mark.parametrize("btf", [True, False], ids=["sum_exec_runtime", "sched_stat_runtime"])
@pytest.mark.parametrize("bells", [True, False], ids=["cpu-backend", "gpu-backend"])
def test_timeline_program_compiles_with_either_charged_counter(
    ebpf_ready: None, btf: bool, bells: bool, tmp_path: Path
) -> None:
    """The --trace-out timeline on the live formats, its slices charged from the task's counter
    (BTF) or from sched_stat_runtime (without BTF), with the harness thread's counter read at the
    window markers; with doorbells (the switch code joins their probe, which reads the marker
    maps before the marker probe assigns them) and without (a GPU run: the harness thread only)."""
    ready = engine.check_readiness()
    assert ready.tracefs is not None
    pid = os.getpid()
    target = TraceTarget(
        (pid,),
        thread_labels={pid: "host", pid + 1: "q0"} if bells else {pid: "host"},
        doorbells=((pid, 5, pid + 1, 0),) if bells else (),
        timeline_events=64,
    )
    program = engine.make_program(True, False, target, Tracefs(ready.tracefs.root, btf=btf), ready.version)
    assert ("curtask->se.sum_exec_runtime" in program.text) == btf
    assert "@cpu_sched_tlg[$p] =" in program.text and "@cpu_sched_tlc[$p] =" in program.text
    script = tmp_path / "program.bt"
    script.write_text(program.text)
    proc = subprocess.run(
        [ready.bpftrace or "bpftrace", "-d", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line and "RLIMIT_MEMLOCK" not in line]
    assert proc.returncode == 0 and not errors, errors

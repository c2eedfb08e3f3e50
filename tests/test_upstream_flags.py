"""Upstream AORTA's flags that exited 2 here (issue 22.3): `--sync-mode none`, `-q/--quiet`,
`ebpf-attach --tracers`; on the CPU backend, bad input one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.commands._tracers import TRACERS, parse_tracers, tracer_report
from conftest import run_cli
from conftest import run_cli_inprocess as run_inprocess

RUN = ("run", "hetero_kernels", "--streams", "2", "-i", "3", "-w", "1")


def test_sync_mode_none_runs_as_end_only(tmp_path):
    out = tmp_path / "r.json"
    proc = run_inprocess(*RUN, "--sync-mode", "none", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["config"]["sync_mode"] == "end_only"
    assert data["latency_ms"] is None  # one wait at the end: no per-iteration samples


def test_bad_sync_mode_names_every_accepted_one():
    proc = run_inprocess(*RUN, "--sync-mode", "nope")
    assert proc.returncode == 2
    expected = "error: unknown --sync-mode 'nope': use one of per_iteration, end_only, none"
    assert proc.stderr.strip() == expected


def test_quiet_prints_the_run_in_one_line(tmp_path):
    out = tmp_path / "r.json"
    proc = run_inprocess(*RUN, "-q", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    data = json.loads(out.read_text())
    assert len(lines) == 1
    assert lines[0].startswith("hetero_kernels @ 2 streams: ")
    assert f"{data['throughput']:.4g} {data['throughput_unit']}" in lines[0]
    assert f"P50 {data['latency_ms']['p50']:.3f} ms" in lines[0]
    assert "Running" not in proc.stderr
    loud = run_inprocess(*RUN)
    assert len(loud.stdout.strip().splitlines()) > 10  # without -q: the blocks


def test_tracers_map_upstream_names_onto_our_families():
    assert parse_tracers("queue, memory,race,dma,rccl,race") == ["queue", "memory", "race", "dma", "rccl"]
    report = tracer_report(["race", "dma", "rccl", "queue"])
    assert {report[n]["family"] for n in ("race", "dma", "rccl")} == {"gpu_runtime"}
    assert report["queue"] == {"family": "queue", "view": TRACERS["queue"].view, "in_this_build": True}
    # this build probes event syncs (hipEventSynchronize …): the event-wait view has an API
    assert report["race"]["in_this_build"] is True
    for bad in ("bogus", "", ",,"):
        with pytest.raises(UsageError):
            parse_tracers(bad)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("queue,bogus", "error: unknown tracer 'bogus' in --tracers: use queue, memory, race, dma, rccl"),
        ("", "error: --tracers needs at least one of queue, memory, race, dma, rccl, got ''"),
    ],
)
def test_bad_tracers_is_one_line_before_tracing(value, message):
    proc = run_inprocess("ebpf-attach", "--pid", str(os.getpid()), "--tracers", value, "--duration", "1s")
    assert proc.returncode == 2
    assert proc.stderr.strip() == message


def test_ebpf_attach_with_upstream_tracers_traces(ebpf_ready, tmp_path):
    """A real attach with every upstream name: queue and memory sections, the gpu_runtime
    mapping recorded and said on stderr."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = tmp_path / "a.json"
        proc = run_cli(
            "ebpf-attach", "--pid", str(child.pid), "--duration", "1s",
            "--tracers", "queue,memory,race,dma,rccl", "-o", str(out),
        )  # fmt: skip
    finally:
        child.kill()
        child.wait()
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["ebpf_queue_metrics"]["status"] == "ok"
    assert data["ebpf_memory_metrics"] is not None
    assert "gpu_runtime" in data["ebpf_queue_metrics"]["families"]
    assert set(data["tracers"]) == {"queue", "memory", "race", "dma", "rccl"}
    for name in ("race", "dma", "rccl"):
        assert f"--tracers {name}: gpu_runtime family" in proc.stderr

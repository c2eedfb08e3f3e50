"""Standalone scripts: headers present; those whose tracepoints exist here compile and run for
real; the AMD ones reference only fields present in the recorded formats."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aorta.ebpf.interrupt import Interrupter
from aorta.ebpf.session import bpftrace_path
from aorta.ebpf.tracefs import Tracefs

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "ebpfaultline" / "bpftrace"
FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"
RUNNABLE = {
    "cpu_runqlat_threads.bt": "@runq_latency_us",
    "cpu_oncpu_threads.bt": "@switches",
    "kfd_queue_ioctls.bt": None,
}
AMD = ["amdgpu_submissions.bt", "amdgpu_dispatch.bt", "amdgpu_submit_dispatch_latency.bt"]
BLOCK_RE = re.compile(r"^((?:tracepoint:[\w:*]+,?\s*)+)(?:/[^\n]*/\s*)?\{(.*?)^\}", re.M | re.S)


def test_every_script_has_a_header() -> None:
    scripts = sorted(SCRIPTS.glob("*.bt"))
    assert len(scripts) >= 7
    for script in scripts:
        text = script.read_text()
        for word in ("What:", "Overhead:", "Usage:"):
            assert word in text, f"{script.name} header lacks {word}"
        assert "printf" not in text, f"{script.name}: no per-event printf"


@pytest.mark.parametrize("name", AMD)
@pytest.mark.parametrize("gen", ["linux-6.8", "linux-6.17"])
def test_amd_scripts_use_only_recorded_fields(name: str, gen: str) -> None:
    tf = Tracefs(FIXTURES / gen)
    text = (SCRIPTS / name).read_text()
    blocks = BLOCK_RE.findall(text)
    assert blocks, name
    for attach, body in blocks:
        for probe in re.findall(r"tracepoint:(\w+):(\w+)", attach):
            fmt = tf.read_format(*probe)
            assert fmt is not None, (gen, probe)
            for field in re.findall(r"args->(\w+)", body):
                assert field in fmt.fields, (gen, probe, field)
            for field in re.findall(r"str\(args->(\w+)\)", body):
                assert fmt.fields[field].is_string
                assert not fmt.fields[field].is_pointer


def _read_until_attached(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> str:
    """Lines bpftrace printed up to its attached_probes record: SIGINT before it would kill it."""
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if '"attached_probes"' in line:
            return "".join(seen)
    raise AssertionError(f"bpftrace never reported attached probes: {''.join(seen)[-500:]}")


def _interrupt(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> tuple[str, str]:
    """SIGINT bpftrace when it can take it (`aorta.ebpf.interrupt`) until it exits (its maps
    printed); its output."""
    deadline = time.monotonic() + timeout_s
    interrupter = Interrupter(proc.pid)
    while True:
        interrupter.send_if_due(time.monotonic(), 0)
        try:
            return proc.communicate(timeout=0.05)
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                raise


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_runnable_scripts_compile_and_run(ebpf_ready: None, name: str) -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(5000): time.sleep(0.001)"])
    try:
        proc = subprocess.Popen(
            [bpftrace_path() or "bpftrace", "-f", "json", str(SCRIPTS / name), str(busy.pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            first = _read_until_attached(proc)
            time.sleep(0.5)  # let the busy process produce events while the probes are live
            out, err = _interrupt(proc)
        finally:
            if proc.poll() is None:  # never leave a bpftrace behind (one outlived a failed run)
                proc.kill()
                proc.communicate()
    finally:
        busy.kill()
        busy.wait()
    assert proc.returncode == 0, err
    records = [json.loads(line) for line in (first + out).splitlines() if line.strip()]
    assert any(r.get("type") == "attached_probes" for r in records)
    wanted = RUNNABLE[name]
    if wanted:
        maps = {k for r in records if r.get("type") in ("map", "hist") for k in r["data"]}
        assert wanted in maps, (name, maps)

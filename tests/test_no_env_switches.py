"""Issue 23 item 3: the tracefs root and the bpftrace binary are command-line options (ebpf-info
--tracefs DIR; --bpftrace PATH on run, sweep, policy-sweep, ebpf-attach and ebpf-info), never
environment variables. A variable is inherited silently, through sudo and into child processes;
an option is seen on the command line, and checked there (exit 2, one line)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli_inprocess

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tracefs"
GONE = ("AORTA_TRACEFS", "BPFTRACE")  # environment switches that are options now
_READ = r"(?:environ\s*(?:\.get\s*\(|\.pop\s*\(|\[)|getenv\s*\()\s*"


def env_reads(text: str) -> list[str]:
    """Each place `text` reads one of GONE from the environment, or names it as a string at all
    (a constant read elsewhere: ENV = "BPFTRACE" … os.environ.get(ENV))."""
    found = []
    for name in GONE:
        literal = rf"""["']{name}["']"""
        for pattern in (rf"{_READ}{literal}", rf"{literal}\s+(?:not\s+)?in\s+(?:os\.)?environ", literal):
            found += [m.group(0) for m in re.finditer(pattern, text)]
    return found


def test_src_reads_none_of_the_gone_variables() -> None:
    hits = {
        str(path.relative_to(SRC)): env_reads(path.read_text(encoding="utf-8")) for path in SRC.rglob("*.py")
    }
    assert {path: found for path, found in hits.items() if found} == {}


def test_the_scan_catches_every_way_of_reading_them() -> None:
    for code in (
        'override = os.environ.get("BPFTRACE")',
        "x = os.environ['AORTA_TRACEFS']",
        'x = os.getenv("AORTA_TRACEFS", "")',
        'if "BPFTRACE" in os.environ:',
        'ENV_OVERRIDE = "AORTA_TRACEFS"',
    ):
        assert env_reads(code), code
    # bpftrace's own setting, which aorta sets for the child and never reads
    assert env_reads('f"BPFTRACE_MAP_KEYS_MAX={n}"; os.environ.get("BPFTRACE_MAP_KEYS_MAX")') == []


def _fake_bpftrace(folder: Path, script: str) -> str:
    """An executable stand-in for bpftrace (root-owned, 0755: usable by root)."""
    folder.mkdir(exist_ok=True)
    fake = folder / "bpftrace"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return str(fake)


def test_aorta_tracefs_is_ignored_and_tracefs_is_used(tmp_path: Path) -> None:
    tree = FIXTURES / "linux-6.17"
    ignored = run_cli_inprocess("ebpf-info", "--json", env={"AORTA_TRACEFS": str(tree)})
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout)["tracefs"]["root"] != str(tree)
    used = run_cli_inprocess("ebpf-info", "--json", "--tracefs", str(tree))
    assert used.returncode == 0, used.stderr
    data = json.loads(used.stdout)
    assert data["tracefs"] == {"root": str(tree), "note": f"{tree} (from --tracefs)"}
    assert data["families"]["amdgpu"]["events"]["amdgpu:amdgpu_cs_ioctl"] is True
    script = run_cli_inprocess("ebpf-info", "--show-script", "--tracefs", str(tree))
    assert script.returncode == 0, script.stderr
    assert f"// tracefs: {tree};" in script.stdout
    assert "tracepoint:amdgpu:amdgpu_cs_ioctl" in script.stdout


def test_bpftrace_variable_is_ignored_and_bpftrace_is_used(tmp_path: Path) -> None:
    fake = _fake_bpftrace(tmp_path / "bin", 'echo "bpftrace v0.99.1"')
    ignored = run_cli_inprocess(
        "ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.8"), env={"BPFTRACE": fake}
    )
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout)["bpftrace"]["path"] == shutil.which("bpftrace")
    used = run_cli_inprocess(
        "ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.8"), "--bpftrace", fake
    )
    assert used.returncode == 0, used.stderr
    bpftrace = json.loads(used.stdout)["bpftrace"]
    assert (bpftrace["path"], bpftrace["version"]) == (fake, "0.99.1")


@pytest.mark.slow
def test_run_starts_the_bpftrace_it_is_given(cli, tmp_path: Path) -> None:
    """The option reaches the run's tracer: a stand-in whose --version fails turns tracing off,
    naming that binary (and the run itself goes on)."""
    fake = _fake_bpftrace(tmp_path / "bin", "exit 3")
    out = tmp_path / "r.json"
    proc = cli(
        "run", "tiny_kernel_stress", "--streams", "2", "-i", "2", "-w", "1", "-d", "cpu",
        "--ebpf-trace", "--bpftrace", fake, "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"eBPF tracing is off: {fake} --version failed" in proc.stderr
    section = json.loads(out.read_text())["ebpf_queue_metrics"]
    assert section["status"] == "unavailable"
    assert section["error"].startswith(f"{fake} --version failed")


def test_ebpf_attach_starts_the_bpftrace_it_is_given(tmp_path: Path) -> None:
    fake = _fake_bpftrace(tmp_path / "bin", "exit 3")
    proc = run_cli_inprocess("ebpf-attach", "--pid", str(os.getpid()), "--duration", "1s", "--bpftrace", fake)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"error: eBPF tracing unavailable: {fake} --version failed: is bpftrace installed correctly?"
    )


def test_sweeps_pass_bpftrace_to_their_points() -> None:
    from aorta.hw_queue_eval.commands._options import passthrough_args

    values = {
        "ebpf_trace": True,
        "ebpf_memory_trace": False,
        "ebpf_gpu_runtime": False,
        "bpftrace": "/opt/bt",
    }
    assert passthrough_args(values) == ["--ebpf-trace", "--bpftrace", "/opt/bt"]
    assert passthrough_args({**values, "bpftrace": None}) == ["--ebpf-trace"]


COMMANDS = {
    "run": ("run", "tiny_kernel_stress", "--streams", "2"),
    "sweep": ("sweep", "tiny_kernel_stress", "--streams", "1,2"),
    "policy-sweep": ("policy-sweep", "tiny_kernel_stress", "--streams", "2"),
    "ebpf-attach": ("ebpf-attach", "--pid", str(os.getpid())),
    "ebpf-info": ("ebpf-info",),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("bad", ["missing", "folder", "not_executable"])
def test_a_bad_bpftrace_is_one_line_exit_2(command: str, bad: str, tmp_path: Path) -> None:
    path = tmp_path / bad
    if bad == "folder":
        path.mkdir()
    elif bad == "not_executable":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    proc = run_cli_inprocess(*COMMANDS[command], "--bpftrace", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: --bpftrace {path}: not an executable regular file; give the path of bpftrace"
    )
    assert proc.stdout == ""


def test_a_bad_tracefs_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "missing", tmp_path / "empty", FIXTURES / "linux-6.8" / "events"):
        proc = run_cli_inprocess("ebpf-info", "--tracefs", str(bad))
        assert proc.returncode == 2
        assert proc.stderr.strip() == (
            f"error: --tracefs {bad}: no readable events/ folder; give a tracefs root "
            "(the folder holding events/)"
        )

"""`ebpf-info` in the guide's layout (issue 15, section 2): the summary block first, with the guide's
labels and words, then the per-family view that no longer miscounts (dma_fence is not amdgpu; the
KFD family's syscall probes are not "present" KFD support)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tracefs"
LABELS = [
    "Kernel version:",
    "bpftrace:",
    "Root/CAP_BPF:",
    "Overall available:",
    "amdgpu tracepoints:",
    "amdkfd tracepoints:",
    "KFD variant:",
]


def _summary_lines(text: str) -> list[str]:
    head = text.split("\nDetails\n", 1)[0]
    return head.splitlines()


@pytest.mark.slow
def test_summary_comes_first_with_the_guides_labels_in_order(cli) -> None:
    proc = cli("ebpf-info", "--tracefs", str(FIXTURES / "rocm-dkms-pasid"))
    assert proc.returncode == 0, proc.stderr
    lines = _summary_lines(proc.stdout)
    assert lines[0] == "eBPF Capabilities"
    positions = [
        next(i for i, line in enumerate(lines) if line.strip().startswith(label)) for label in LABELS
    ]
    assert positions == sorted(positions)
    events = {line.split()[0]: " ".join(line.split()[1:]) for line in lines if line.startswith("    ")}
    assert events["amdgpu_bo_move"] == "present"
    assert events["amdgpu_cs_ioctl"] == "missing"
    assert events["kfd_evict_process_worker_start"] == "present"
    assert events["kfd_evict_process"] == "missing"
    variant = next(line for line in lines if "KFD variant:" in line)
    assert "kfd_evict_process_worker_*" in variant


def test_old_kfd_naming_is_reported_as_such(cli, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(FIXTURES / "linux-6.8", tmp_path / "tree")
    event = tmp_path / "tree" / "events" / "amdkfd" / "kfd_evict_process"
    event.mkdir(parents=True)
    (event / "format").write_text(
        "name: kfd_evict_process\nID: 9\nformat:\n\tfield:unsigned int pid;\toffset:8;\tsize:4;\tsigned:0;\n"
    )
    proc = cli("ebpf-info", "--json", "--tracefs", str(tmp_path / "tree"))
    summary = json.loads(proc.stdout)["summary"]
    assert summary["kfd_variant"] == "kfd_evict_process"
    assert summary["amdkfd_tracepoints"]["events"]["kfd_evict_process"] == "present"


def test_missing_bpftrace_is_not_installed_without_a_syntax_guess(cli) -> None:
    from ebpf_support import path_without_bpftrace

    proc = cli("ebpf-info", "--tracefs", str(FIXTURES / "linux-6.17"), env={"PATH": path_without_bpftrace()})
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in _summary_lines(proc.stdout) if "bpftrace:" in x)
    assert line.split(":", 1)[1].strip() == "not installed"
    assert "args->" not in proc.stdout
    assert "args." not in proc.stdout
    assert "Overall available:    no: bpftrace not found" in proc.stdout


def test_no_tracefs_access_says_not_accessible(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from aorta.ebpf import tracefs
    from conftest import run_cli_inprocess

    monkeypatch.setattr(tracefs, "TRACEFS_CANDIDATES", (str(tmp_path / "tracing"), str(tmp_path / "debug")))
    monkeypatch.setattr(tracefs, "DEBUGFS", str(tmp_path / "debug"))
    proc = run_cli_inprocess("ebpf-info")
    assert proc.returncode == 0, proc.stderr
    summary = _summary_lines(proc.stdout)
    assert any(x.strip() == "amdgpu tracepoints:   (not accessible)" for x in summary)
    assert any(x.strip() == "amdkfd tracepoints:   (not accessible)" for x in summary)
    assert "missing" not in "\n".join(summary)


@pytest.mark.slow
def test_families_count_per_subsystem_and_say_what_attaches(cli) -> None:
    proc = cli("ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.17"))
    data = json.loads(proc.stdout)
    amdgpu = data["families"]["amdgpu"]
    assert amdgpu["by_subsystem"]["amdgpu"] == {"present": 2, "wanted": 2}
    assert amdgpu["by_subsystem"]["dma_fence"] == {"present": 1, "wanted": 1}
    text = cli("ebpf-info", "--tracefs", str(FIXTURES / "linux-6.17")).stdout
    assert "tracepoints: amdgpu 2/2 present, dma_fence 1/1 present" in text


def test_kfd_family_without_a_kfd_device_is_not_reported_present(cli, tmp_path: Path) -> None:
    import shutil

    from aorta.ebpf.probes.kfd import KFD_DEVICE

    if Path(KFD_DEVICE).exists():
        import pytest

        pytest.skip(f"{KFD_DEVICE} exists here: the KFD family attaches")
    for system in ("syscalls", "sched"):  # syscall tracepoints present, no amdgpu driver
        shutil.copytree(FIXTURES / "linux-6.17" / "events" / system, tmp_path / "events" / system)
    proc = cli("ebpf-info", "--json", "--tracefs", str(tmp_path))
    data = json.loads(proc.stdout)
    kfd = data["families"]["kfd"]
    assert kfd["by_subsystem"]["syscalls"] == {"present": 4, "wanted": 4}
    assert kfd["attach"]["events"] == []
    assert all("/dev/kfd" in why for why in kfd["attach"]["not_attached"].values())
    assert "kfd" not in (data["modes"]["--ebpf-trace"].get("families_with_events") or [])
    assert data["summary"]["kfd_device"] == {"path": KFD_DEVICE, "exists": False}
    text = cli("ebpf-info", "--tracefs", str(tmp_path)).stdout
    assert "not attached (no amdgpu driver here (no amdgpu tracepoints, no /dev/kfd))" in text

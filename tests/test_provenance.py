"""Provenance in results: aorta's version and git commit, the GPU driver, the clocks in effect.

The commit is checked against `git rev-parse HEAD` of this checkout (an independent reader) and
against hand-built .git layouts (branch, packed ref, worktree, detached, broken); driver versions
and clocks against fake sysfs/procfs trees and a fake pynvml whose values are known.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import types
from pathlib import Path

import jsonschema
import pytest

from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.readers.load import load_result
from aorta.hw_queue_eval.results import provenance
from aorta.hw_queue_eval.results.run_result import run_result_schema
from aorta.hw_queue_eval.run.harness import run_benchmark

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "results"
SHA_A = "a" * 40
SHA_B = "0123456789abcdef0123456789abcdef01234567"
GPU_AMD = {
    "backend": "gpu",
    "rocm_version": "6.4",
    "pci_domain_id": 0,
    "pci_bus_id": 0x83,
    "pci_device_id": 0,
}
GPU_NVIDIA = {
    "backend": "gpu",
    "rocm_version": None,
    "cuda_version": "12.8",
    "pci_domain_id": 0,
    "pci_bus_id": 0x41,
    "pci_device_id": 0,
}


def _checkout(root: Path) -> Path:
    """A source layout like this repo's: <root>/pyproject.toml and <root>/src/aorta/."""
    package = root / "src" / "aorta"
    package.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'aorta'\n")
    return package


def _git(root: Path, head: str, refs: dict[str, str] | None = None, packed: str = "") -> Path:
    git = root / ".git"
    git.mkdir()
    (git / "HEAD").write_text(head + "\n")
    for name, sha in (refs or {}).items():
        (git / name).parent.mkdir(parents=True, exist_ok=True)
        (git / name).write_text(sha + "\n")
    if packed:
        (git / "packed-refs").write_text(packed)
    return git


def test_commit_of_a_branch_a_packed_ref_and_a_detached_head(tmp_path: Path) -> None:
    loose = _checkout(tmp_path / "loose")
    _git(tmp_path / "loose", "ref: refs/heads/main", {"refs/heads/main": SHA_A})
    assert provenance.git_commit(loose) == (SHA_A, None)

    packed = _checkout(tmp_path / "packed")
    _git(
        tmp_path / "packed",
        "ref: refs/heads/dev",
        packed=f"# pack-refs with: peeled\n{SHA_A} refs/heads/main\n{SHA_B} refs/heads/dev\n",
    )
    assert provenance.git_commit(packed) == (SHA_B, None)

    detached = _checkout(tmp_path / "detached")
    _git(tmp_path / "detached", SHA_B)
    assert provenance.git_commit(detached) == (SHA_B, None)


def test_commit_of_a_worktree_reads_refs_from_the_common_folder(tmp_path: Path) -> None:
    (tmp_path / "main").mkdir()
    main_git = _git(
        tmp_path / "main", "ref: refs/heads/main", {"refs/heads/main": SHA_A, "refs/heads/feature": SHA_B}
    )
    wt_git = main_git / "worktrees" / "wt"
    wt_git.mkdir(parents=True)
    (wt_git / "HEAD").write_text("ref: refs/heads/feature\n")
    (wt_git / "commondir").write_text("../..\n")
    package = _checkout(tmp_path / "wt")
    (tmp_path / "wt" / ".git").write_text(f"gitdir: {wt_git}\n")
    assert provenance.git_commit(package) == (SHA_B, None)


@pytest.mark.parametrize(
    ("head", "refs", "needle"),
    [
        ("ref: refs/heads/main", {}, "has no commit yet"),
        ("ref: refs/heads/main", {"refs/heads/main": "not a sha, maybe a secret"}, "has no commit"),
        ("ref: refs/../../etc/passwd", {}, "not a commit or a branch"),
        ("garbage", {}, "not a commit or a branch"),
    ],
)
def test_an_unusable_head_is_null_with_the_reason(tmp_path: Path, head, refs, needle) -> None:
    package = _checkout(tmp_path)
    _git(tmp_path, head, refs)
    sha, reason = provenance.git_commit(package)
    assert sha is None and needle in reason


def test_an_installed_package_has_no_commit(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages" / "aorta"
    site.mkdir(parents=True)
    _git(tmp_path, "ref: refs/heads/main", {"refs/heads/main": SHA_A})  # an enclosing repo
    sha, reason = provenance.git_commit(site)
    assert sha is None and "not running from a git checkout" in reason


def test_the_commit_recorded_is_the_one_git_reports() -> None:
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of aorta")
    proc = subprocess.run(
        [git, "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"git rev-parse failed here: {proc.stderr.strip()}")
    assert provenance.tool_info()["git_commit"] == proc.stdout.strip()


def test_a_cpu_run_records_provenance_and_validates(tmp_path: Path) -> None:
    result = run_benchmark(
        RunConfig(workload="hetero_kernels", streams=2, iterations=2, warmup=1, device="cpu")
    ).to_dict()
    jsonschema.validate(result, run_result_schema())
    tool = result["tool"]
    assert tool["name"] == "aorta" and tool["version"]
    assert (tool["git_commit"] is None) == (tool["git_commit_reason"] is not None)
    env = result["environment"]
    assert env["gpu_driver"]["version"] is None
    assert env["gpu_driver"]["reason"] == "CPU backend: no GPU driver in use"
    assert env["gpu_clocks"]["graphics_mhz"] is None and env["gpu_clocks"]["memory_mhz"] is None
    assert env["gpu_clocks"]["reason"] == "CPU backend: no GPU clocks"


def test_published_results_without_the_new_keys_still_load() -> None:
    data = load_result(FIXTURES / "run.json")
    assert "git_commit" not in data["tool"] and "gpu_driver" not in data["environment"]


def test_the_schema_refuses_a_commit_that_is_not_an_object_id() -> None:
    schema = run_result_schema()["properties"]["tool"]
    jsonschema.validate({"name": "aorta", "version": "1", "git_commit": SHA_A}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "aorta", "version": "1", "git_commit": "main"}, schema)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_gpu_driver_versions_from_sysfs_and_procfs(tmp_path: Path) -> None:
    nv = tmp_path / "nv"
    _write(nv, "sys/module/nvidia/version", "550.54.14\n")
    assert provenance.gpu_driver(GPU_NVIDIA, nv)["version"] == "550.54.14"
    nv_proc = tmp_path / "nv_proc"
    _write(
        nv_proc,
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC "
        "2023\nGCC version:  gcc version 12.2.0\n",
    )
    found = provenance.gpu_driver(GPU_NVIDIA, nv_proc)
    assert found["version"] == "535.104.05" and found["source"].endswith("proc/driver/nvidia/version")
    none = provenance.gpu_driver(GPU_NVIDIA, tmp_path / "empty")
    assert none["version"] is None and "is readable" in none["reason"]

    amd = tmp_path / "amd"
    _write(amd, "sys/module/amdgpu/version", "6.10.5\n")
    assert provenance.gpu_driver(GPU_AMD, amd) == {
        "name": "amdgpu",
        "version": "6.10.5",
        "source": str(amd / "sys/module/amdgpu/version"),
        "reason": None,
    }
    in_tree = tmp_path / "in_tree"
    (in_tree / "sys/module/amdgpu").mkdir(parents=True)
    found = provenance.gpu_driver(GPU_AMD, in_tree)
    assert found["version"] is None and "in-tree" in found["reason"]


def test_amd_clocks_are_the_starred_dpm_levels(tmp_path: Path) -> None:
    device = "sys/bus/pci/devices/0000:83:00.0"
    _write(tmp_path, f"{device}/pp_dpm_sclk", "0: 500Mhz\n1: 1200Mhz *\n2: 2100Mhz\n")
    _write(tmp_path, f"{device}/pp_dpm_mclk", "0: 96Mhz\n1: 1300Mhz *\n")
    _write(tmp_path, f"{device}/power_dpm_force_performance_level", "auto\n")
    clocks = provenance.gpu_clocks(GPU_AMD, tmp_path)
    assert (clocks["graphics_mhz"], clocks["memory_mhz"], clocks["performance_level"]) == (1200, 1300, "auto")
    assert clocks["reason"] is None and clocks["when"] == provenance.CLOCKS_WHEN
    _write(tmp_path, f"{device}/pp_dpm_sclk", "0: 500Mhz\n1: 1200Mhz\n")  # no current level
    unread = provenance.gpu_clocks(GPU_AMD, tmp_path)
    assert unread["graphics_mhz"] is None and "marks no current level" in unread["reason"]
    no_pci = provenance.gpu_clocks({**GPU_AMD, "pci_bus_id": None}, tmp_path)
    assert no_pci["graphics_mhz"] is None and "PCI address" in no_pci["reason"]


def test_nvidia_clocks_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=2,
        nvmlInit=lambda: calls.append(("init",)),
        nvmlShutdown=lambda: calls.append(("shutdown",)),
        nvmlDeviceGetHandleByPciBusId=lambda bus: calls.append(("handle", bus)) or "h",
        nvmlDeviceGetClockInfo=lambda handle, kind: {0: 1410, 2: 1593}[kind],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    clocks = provenance.gpu_clocks(GPU_NVIDIA)
    assert (clocks["graphics_mhz"], clocks["memory_mhz"]) == (1410, 1593)
    assert ("handle", b"0000:41:00.0") in calls and calls[-1] == ("shutdown",)

    def broken(handle, kind):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake.nvmlDeviceGetClockInfo = broken
    failed = provenance.gpu_clocks(GPU_NVIDIA)
    assert failed["graphics_mhz"] is None and "NVML_ERROR_NOT_SUPPORTED" in failed["reason"]
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not importable
    missing = provenance.gpu_clocks(GPU_NVIDIA)
    assert missing["graphics_mhz"] is None and "pynvml" in missing["reason"]

"""bench/gpu_check.py as a lent GPU machine runs it, proven here on the CPU backend: the documented
command (`PYTHONPATH=src python3 bench/gpu_check.py --out DIR`, plus `--device cpu --quick`) with
no network (`unshare -n`), no bpftrace on PATH, aorta not installed (a bare venv that sees only
the test interpreter's site-packages) and jsonschema installed `--no-index` from a wheels folder.

It runs twice: on the test interpreter (aorta's venv seen through a bare one), and on a local
stand-in of the lent image's python3 (3.12 with torch 2.11 from PyPI, click, rich, numpy,
matplotlib and nothing else) that `bash bench/lent_python.sh` builds in ~/.cache/aorta-lent-python.
That one is a 4.8 GB download CI does not make, so it skips where the folder is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import unavailable

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root + unshare"),
]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv without aorta: torch & co come from this interpreter's site-packages by a .pth line
    (no site dir is added, so the editable aorta install's own .pth is not read)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python3"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    probe = subprocess.run(
        [str(python), "-I", "-c", "import aorta"], capture_output=True, cwd="/", check=False
    )
    assert probe.returncode != 0, "aorta must not be importable without the carried tree"
    return str(python)


LENT_PYTHON = Path.home() / ".cache" / "aorta-lent-python" / "bin" / "python"


@pytest.fixture(scope="module", params=["test interpreter", "lent image"])
def python(request: pytest.FixtureRequest) -> str:
    """The interpreter the documented command runs on: the bare venv, or the lent image's stand-in."""
    if request.param == "test interpreter":
        return str(request.getfixturevalue("bare_python"))
    probe = subprocess.run(
        [str(LENT_PYTHON), "-I", "-c", "import torch, jsonschema"],
        capture_output=True, text=True, check=False,
    ) if LENT_PYTHON.exists() else None  # fmt: skip
    if probe is None or "No module named 'jsonschema'" not in probe.stderr:
        pytest.skip(
            f"no stand-in of the lent image at {LENT_PYTHON.parents[1]} (torch importable, jsonschema "
            "absent): build it with `bash bench/lent_python.sh` (4.8 GB)"
        )
    return str(LENT_PYTHON)


def _version(python: str) -> str:
    """`major.minor` of an interpreter."""
    return subprocess.run(
        [python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def wheels(python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jsonschema and its needs for that interpreter, saved by bench/gpu_wheels.py (network or index)."""
    dest = tmp_path_factory.mktemp("wheels")
    version = _version(python)
    script = str(REPO / "bench" / "gpu_wheels.py")
    proc = subprocess.run(
        [sys.executable, script, "--python-version", version, "--dest", str(dest)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        why = f"bench/gpu_wheels.py could not download the wheels here: {proc.stderr.strip()[-200:]}"
        unavailable(why, why + " (required in CI: it reaches PyPI)")
    return dest


def _offline(python: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run in a new network namespace (no network), PATH an empty folder (no bpftrace), PYTHONPATH=src."""
    empty = cwd / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {"PATH": str(empty), "PYTHONPATH": "src", "HOME": "/root"}
    return subprocess.run(
        [shutil.which("unshare") or "unshare", "-n", python, *args],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=540, check=False,
    )  # fmt: skip


def test_documented_command_runs_offline_without_install(python: str, wheels: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["bench/gpu_check.py", "--device", "cpu", "--quick", "--out", str(out), "--wheels", str(wheels)]
    proc = _offline(python, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = [json.loads(line) for line in (out / "gpu_check.jsonl").read_text().splitlines()]
    assert lines == [json.loads(line) for line in proc.stdout.splitlines()]  # the file holds what was printed
    first = lines[0]
    assert first["check"] == "wheels" and any(n.startswith("jsonschema-") for n in first["installed"])
    assert first["jsonschema_from"].startswith(first["target"] + "/")  # the children import the carried wheel
    assert not Path(first["target"]).exists()  # the private install folder is removed at exit
    points = [line for line in lines if "mode" in line]
    assert len(points) == 12 and all(p["status"] == "ok" and p["verification"] for p in points)
    assert {(p["workload"], p["streams"]) for p in points} == {
        (w, s) for w in ("hetero_kernels", "tiny_kernel_stress") for s in (1, 4, 16)
    }
    ebpf = next(line for line in lines if line.get("check") == "ebpf_points")
    assert ebpf["ran"] is False and "bpftrace not on PATH" in ebpf["reason"]
    assert not any(line.get("traced") is not None or "launches_seen" in line for line in lines)
    # the views, the all-reduce and the cost per call: a line each, saying why they did not run
    views = {line["check"]: line for line in lines if str(line.get("check")).startswith("gpu_runtime_")}
    assert set(views) == {"gpu_runtime_views", "gpu_runtime_collectives", "gpu_runtime_view_cost"}
    assert all(
        v["ran"] is False and v["reason"].startswith("device cpu: needs a GPU") for v in views.values()
    )
    memory = next(line for line in lines if line.get("check") == "bounded_memory")
    assert memory["ran"] is False and "GPU" in memory["reason"]
    diagnosis = {line["case"]: line for line in lines if line.get("check") == "diagnosis"}
    assert set(diagnosis) == {"unmodified", "mux"}
    for line in diagnosis.values():
        assert line["status"] == "ok" and line["streams"] == [1, 2] and line["text"], line
        assert "collective_bound" in line["not_measured"]  # one process: no peers, and it says so


def test_isolated_memory_child_imports_the_carried_tree(bare_python: str, tmp_path: Path) -> None:
    """The bounded-memory child runs under `python -I` (PYTHONPATH ignored): it gets the folders by argv."""
    snippet = (
        "import json, sys; sys.path[:0] = ['bench', 'src']\n"
        "from _gpu_check_env import child_env, child_paths\n"
        "from _gpu_memory_points import _point\n"
        "paths = child_paths([])\n"
        "print(json.dumps(_point('cpu', 'per_iteration', 1, paths, child_env(paths))))\n"
    )
    proc = _offline(bare_python, "-c", snippet, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    point = json.loads(proc.stdout.strip().splitlines()[-1])
    assert point.get("status") == "ok", point
    assert point["ops"] == 16 * 128  # one iteration of the large preset at 16 streams

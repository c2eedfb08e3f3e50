"""The CLI through a real subprocess: outputs, the JSON file, and every documented error."""

from __future__ import annotations

import signal
import subprocess
import sys
from importlib.metadata import version

import pytest

from aorta.hw_queue_eval.results.run_result import REQUIRED_KEYS, validate_run_dict
from conftest import load_json, run_cli, run_cli_inprocess, wait_until_measuring


def assert_usage_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one line on stderr starting with 'error:', no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:"), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.slow
def test_version_matches_package_metadata():
    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip().endswith(version("aorta"))


def test_help_lists_commands():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in ("run", "list", "info"):
        assert command in proc.stdout


@pytest.mark.slow
def test_list_shows_catalogue_by_category():
    proc = run_cli("list", "-v")
    assert proc.returncode == 0
    assert "latency_sensitive:" in proc.stdout
    assert "distributed:" in proc.stdout
    assert "hetero_kernels" in proc.stdout
    assert "1-64" in proc.stdout
    filtered = run_cli("list", "-c", "distributed")
    assert "moe" in filtered.stdout
    assert "hetero_kernels" not in filtered.stdout


@pytest.mark.slow
def test_info_json_reports_queue_knobs(tmp_path):
    proc = run_cli("info", "--json", env={"GPU_MAX_HW_QUEUES": "6"})
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert data["queue_pool_size"] == 6
    assert data["env_knobs"]["GPU_MAX_HW_QUEUES"] == "6"
    assert "HSA_XNACK" in data["env_knobs"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in data["env_knobs"]
    assert data["default_backend"] == "cpu"
    assert "verdict" in data["tracing"]


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["list"], ["info", "--json"]])
def test_fast_commands_do_not_import_torch(argv):
    code = (
        "import sys\nfrom aorta.hw_queue_eval.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_run_writes_valid_result(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "hetero_kernels", "--streams", "4", "-i", "4", "-w", "1", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    for block in (
        "CONFIGURATION",
        "THROUGHPUT",
        "LATENCY",
        "QUEUE SWITCH ANALYSIS",
        "TIMING",
        "INTERPRETATION",
    ):
        assert block in proc.stdout
    assert "Running hetero_kernels on 4 streams" in proc.stderr
    data = load_json(out)
    assert validate_run_dict(data) == []
    assert set(REQUIRED_KEYS) <= set(data)
    assert data["stream_count"] == 4
    assert data["workload_name"] == "hetero_kernels"
    assert data["config"]["backend"] == "cpu"
    assert data["config"]["size"] == "small"
    assert len(data["iteration_times_ms"]) == 4
    assert data["environment"]["env_knobs"]["GPU_MAX_HW_QUEUES"] is None
    assert data["queue_mapping"]["stream_to_queue"] == [0, 1, 2, 3]
    assert data["memory"]["peak_bytes"] > 0
    assert data["ebpf_queue_metrics"] is None
    assert data["ebpf_memory_metrics"] is None
    assert data["timestamp"].endswith("+00:00")
    assert list(tmp_path.iterdir()) == [out], "no temp files left beside the result"


@pytest.mark.slow
def test_pool_size_env_changes_mapping(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli(
        "run",
        "tiny_kernel_stress",
        "--streams",
        "4",
        "-i",
        "2",
        "-w",
        "1",
        "-o",
        str(out),
        env={"GPU_MAX_HW_QUEUES": "2"},
    )
    assert proc.returncode == 0, proc.stderr
    assert load_json(out)["queue_mapping"]["stream_to_queue"] == [0, 1, 0, 1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["run", "nope", "--streams", "2"], ["unknown workload 'nope'", "hetero_kernels"]),
        (["run", "moe", "--streams", "2"], ["4..32"]),
        (["run", "hetero_kernels", "--streams", "65"], ["1..64"]),
        (["run", "hetero_kernels", "--streams", "two"], ["--streams"]),
        (["run", "hetero_kernels", "--streams", "2", "-i", "0"], ["--iterations"]),
        (["run", "hetero_kernels", "--streams", "2", "-i", "2.5"], ["--iterations"]),
        (["run", "hetero_kernels", "--streams", "2", "-w", "-1"], ["--warmup"]),
        (["run", "hetero_kernels", "--streams", "2", "--size", "huge"], ["--size"]),
        (["run", "hetero_kernels", "--streams", "2", "--sync-mode", "never"], ["--sync-mode"]),
        (["run", "hetero_kernels", "--streams", "2", "--device", "cuda"], ["no GPU"]),
        (["run", "hetero_kernels", "--streams", "2", "--device", "tpu"], ["--device"]),
        (["run", "hetero_kernels", "--streams", "2", "-o", "/nonexistent-dir/x.json"], ["does not exist"]),
        (["run", "hetero_kernels"], ["--streams"]),
        (["frobnicate"], ["frobnicate"]),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needles):
    assert_usage_error(run_cli_inprocess(*argv), *needles)


def test_output_symlink_refused_and_nothing_written(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert_usage_error(
        run_cli_inprocess("run", "hetero_kernels", "--streams", "1", "-o", str(link)), "symbolic link"
    )
    assert target.read_text() == "keep"


def test_unwritable_output_location_detected_before_running():
    # /proc refuses new files even for root: the check must try, not trust permission bits
    proc = run_cli_inprocess("run", "hetero_kernels", "--streams", "1", "-o", "/proc/aorta-result.json")
    assert_usage_error(proc, "cannot write")
    assert "Running" not in proc.stderr


def test_output_folder_is_a_file_error(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_usage_error(
        run_cli_inprocess("run", "hetero_kernels", "--streams", "1", "-o", str(tmp_path / "file" / "r.json")),
        "does not exist",
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_exits_cleanly_without_partial_file(tmp_path, sig):
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aorta.hw_queue_eval",
            "run",
            "hetero_kernels",
            "--streams",
            "8",
            "-i",
            "100000",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stderr.readline()
        assert "Running" in line
        wait_until_measuring(proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    expected = 130 if sig == signal.SIGINT else 143
    assert proc.returncode == expected, err
    assert "Traceback" not in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [("run", "hetero_kernels", "--streams", "two"), ("run", "nope", "--streams", "2"), ("frobnicate",)],
)
def test_inprocess_helper_matches_a_real_process(argv):
    """Validation tests call main() in-process: same exit code and streams as a real process."""
    real, here = run_cli(*argv), run_cli_inprocess(*argv)
    assert here.returncode == real.returncode
    assert here.stdout == real.stdout
    assert here.stderr == real.stderr

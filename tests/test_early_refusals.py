"""Input that is wrong whatever torch says is refused before torch is imported (~5 s here)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import sys
    from aorta.hw_queue_eval.cli import main
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        print("exit", exc.code, "torch imported:", "torch" in sys.modules)
    """
)


def _refusal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "hetero_kernels", "-s", "2", "-d", "gpu"], "--device 'gpu' is not known"),
        (["run", "hetero_kernels", "-s", "2", "-d", "cuda:x"], "expected cuda:N with N a number"),
        (["run", "hetero_kernels", "-s", "2", "-d", "cpu", "--lock-clocks", "3"], "not applicable"),
        (["run", "hetero_kernels", "-s", "2", "-d", "cpu", "--power-limit", "200"], "not applicable"),
        (["sweep", "hetero_kernels", "-s", "1,2", "-d", "cpu", "--lock-clocks", "3"], "not applicable"),
        (["policy-sweep", "hetero_kernels", "-s", "2", "-d", "cpu", "--lock-clocks", "3"], "not applicable"),
    ],
)
def test_refused_before_torch_is_imported(args: list[str], message: str) -> None:
    proc = _refusal(*args)
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "exit 2 torch imported: False" in proc.stdout


def test_auto_device_without_gpu_nodes_refuses_clock_control(monkeypatch: pytest.MonkeyPatch) -> None:
    from aorta.hw_queue_eval.gpu import devnodes
    from aorta.hw_queue_eval.gpu.control import DeviceGpus

    monkeypatch.setattr(devnodes, "any_gpu_node", lambda: False)
    assert DeviceGpus().no_gpu_for("auto") and DeviceGpus().no_gpu_for("cpu")
    monkeypatch.setattr(devnodes, "any_gpu_node", lambda: True)
    # a GPU node exists: only torch can tell whether -d auto finds it, so no early refusal
    assert not DeviceGpus().no_gpu_for("auto")
    assert not DeviceGpus().no_gpu_for("cuda:0")

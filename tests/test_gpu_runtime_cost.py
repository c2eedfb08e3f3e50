"""gpu_runtime's reported probe cost (`probe_cost`) against what the probes cost the calls.

The cost of a uprobe hit depends on the probed function's first instruction (a push is executed
in the trap, anything else single-stepped: a second trap), so the family calibrates per class
(src/aorta/ebpf/probes/gpu_runtime_calibration.py). Ground truth: the same launch calls timed
untraced and inside the traced window, paired in one test: the cost per launch the result
reports must agree with how much slower the calls became. Measured on the real libcudart (its
entry points start with `push %rbp`) and on the gcc stand-in (its start with `sub`).
"""

from __future__ import annotations

import ctypes
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf.elfsyms import Function
from aorta.ebpf.probes import gpu_runtime_calibration as calibration
from aorta.ebpf.probes import gpu_runtime_metrics as m
from aorta.ebpf.probes.base import CollectContext, Window
from conftest import load_file_module, unavailable, vendor_library
from ebpf_support import attached_probe
from gpu_standins import LAUNCH_ARGTYPES, Dim3, build, gcc

BENCH = Path(__file__).resolve().parents[1] / "bench"
STREAM = 0x5101000


@pytest.mark.parametrize(
    ("head", "cls"),
    [
        (b"\x55\x48\x89\xe5", "push"),  # push %rbp (libcudart, libamdhip64)
        (b"\x41\x56\x41\x55", "push"),  # push %r14 (libnccl's ncclSend)
        (b"\x53\x48\x89\xfb", "push"),  # push %rbx
        (b"\xe9\x00\x00\x00", "push"),  # jmp rel32: a branch, also executed in the trap
        (b"\x48\x83\xec\x10", "other"),  # sub $0x10,%rsp (libnccl's ncclBcast, gcc -O2)
        (b"\xf3\x0f\x1e\xfa", "other"),  # endbr64 (CET builds)
        (b"\x48\x89\xf8\xc3", "other"),  # mov %rdi,%rax (glibc's labs)
        (b"\x55", "other"),  # cut short: unreadable counts as the dearer class
    ],
)
def test_entry_instruction_class_from_the_file(tmp_path: Path, head: bytes, cls: str) -> None:
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"\x00" * 64 + head)
    assert calibration.entry_class(str(lib), Function(0x1064, 64)) == cls
    assert calibration.entry_class(str(lib), Function(0x1064, None)) == "other"  # not in a segment


def test_each_class_is_calibrated_on_a_c_function_of_that_class() -> None:
    """The C library functions chosen start with an instruction of the class they stand for."""
    from aorta.ebpf.elfsyms import function_addresses

    plan = calibration.plan(["push", "other"], returns=True)
    assert plan is not None
    present = function_addresses(plan.libc)
    for cls, chosen in plan.entry.items():
        assert chosen is not None, f"no {cls}-first function in {plan.libc}"
        assert calibration.entry_class(plan.libc, present[chosen.probed]) == cls
        assert chosen.twin in present
    assert plan.returns and plan.return_class == calibration.entry_class(
        plan.libc, present[calibration.RETURN.probed]
    )


def test_cost_per_kind_follows_the_class_of_its_functions() -> None:
    """Hand recomputation: launches (push) as entry+return pairs with a doorbell ring (other) per
    launch; a kind whose functions have both classes is charged the dearer one."""
    attached = [
        attached_probe("hipLaunchKernel", "push"),
        attached_probe("hsa_signal_store_screlease", "other"),
        attached_probe("cudaMemcpyAsync", "push"),
        attached_probe("cudaMemsetAsync", "other"),
    ]
    start = calibration.HitCosts({"push": 400, "other": 16000}, 600, {}, "")
    # a window of 100 ms
    context = CollectContext(snapshots={"gpu_runtime": {"start": start}}, window=Window(1, 1 + 100_000_000))
    calls = {"launches": (10, 0), "doorbell_rings": (0, 10), "copies": (0, 3)}
    cost = m.probe_cost(context, calls, m.kind_classes(attached))
    assert cost["per_launch_us"] == pytest.approx((10 * 1000 + 10 * 16000) / 10 / 1e3)
    assert cost["entry_probe_us"] == 0.4 and cost["entry_return_pair_us"] == 1.0
    assert cost["by_kind"]["copies"]["entry_instruction"] == "other+push"
    assert cost["by_kind"]["copies"]["probe_time_ms"] == pytest.approx(3 * 16000 / 1e6)
    spent_ms = (10 * 1000 + 10 * 16000 + 3 * 16000) / 1e6
    assert cost["probe_time_in_window_ms"] == pytest.approx(spent_ms)
    assert cost["window_share_pct"] == pytest.approx(100 * spent_ms / 100.0)
    assert cost["by_entry_instruction"]["other"]["entry_return_pair_us"] == pytest.approx(16.6)


def measure(path: str, stand_in: bool) -> dict[str, Any]:
    """In a fresh process (run as this file's main): launches on the library at `path` timed
    untraced, in the traced window (default views) and untraced again, and the result's
    probe_cost. Alone in its process, so no other copy of the runtime is probed beside it."""
    from aorta.hw_queue_eval.tracing.window_context import WindowContext
    from aorta.hw_queue_eval.tracing.window_tracer import EbpfTracer
    from ebpf_support import FakeGpuBackend

    time_calls = load_file_module(BENCH / "uprobe_cost.py")._time_calls
    rt = ctypes.CDLL(path)
    if stand_in:
        rt.standin_configure.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
        rt.standin_configure(0, 0, 0)  # no simulated launch time: the call is the probe
    rt.cudaLaunchKernel.argtypes = LAUNCH_ARGTYPES
    one = Dim3(1, 1, 1)

    def launch() -> None:
        rt.cudaLaunchKernel(None, one, one, None, 0, STREAM)

    launch()  # lazy initialisation
    plain = [time_calls(launch, 2000)]
    backend = FakeGpuBackend([STREAM])
    tracer = EbpfTracer(False, False, gpu_runtime=True)
    tracer.prepare(backend, None)
    assert tracer.session is not None, tracer.error
    try:
        tracer.window_start()
        traced = time_calls(launch, 4000)
        tracer.window_stop()
    except BaseException:
        tracer.abort()
        raise
    sections = tracer.finish(WindowContext(backend=backend, stream_count=1, ops=[]))
    plain.append(time_calls(launch, 2000))
    metrics = sections.ebpf_queue_metrics["families"]["gpu_runtime"]["metrics"]
    return {
        "plain": plain,
        "traced": traced,
        "launches": metrics["launches_total"],
        "cost": metrics["probe_cost"],
    }


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.serial  # a timing ground truth
@pytest.mark.parametrize("which", ["real libcudart", "stand-in"])
def test_reported_cost_per_launch_agrees_with_how_much_slower_the_calls_became(
    which: str, tmp_path: Path
) -> None:
    """The same launches timed untraced (before the tracer attaches and after it stops) and in the
    traced window (default views: an entry probe per launch): the result's `per_launch_us` is
    within 0.6-1.6x of the slowdown measured on the calls. The old calibration (one probe on
    glibc's llabs, a `mov`: single-stepped) read 16 us where the real libcudart's launches were
    slowed by 0.5 us on the development VM, 30x."""
    from ebpf_support import require_ebpf

    require_ebpf()
    if which == "stand-in":  # gcc's code starts with `sub`: single-stepped
        if gcc() is None:
            unavailable("gcc not installed: cannot build the stand-in runtimes")
        path, cls = build(tmp_path)["libcudart.so.12"], "other"
    else:  # the vendor's entry points start with `push %rbp`
        path, cls = vendor_library("cudart"), "push"
    child = subprocess.run(
        [sys.executable, __file__, str(path), "1" if which == "stand-in" else "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    got = json.loads(child.stdout.splitlines()[-1])
    cost = got["cost"]
    assert got["launches"] >= 4000
    assert cost["by_kind"]["launches"]["entry_instruction"] == cls, cost
    assert cost["entry_probe_us"] == cost["by_entry_instruction"][cls]["entry_probe_us"]
    measured_ns = got["traced"] - statistics.mean(got["plain"])
    reported_ns = cost["per_launch_us"] * 1e3
    assert 0.6 <= reported_ns / measured_ns <= 1.6, (reported_ns, measured_ns, got)


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2] == "1")))

"""`--profile`: torch.profiler over an extra window after the measured one, never inside it.

The profiler slows every op it records, so the run's figures come from the measured window as
always, and the profiled window (same iterations, same streams, same process, right after) only
yields the Chrome trace (TensorBoard's profiler plugin and Holistic Trace Analysis read it) and
the top ops. CPU activity is recorded on every thread (the CPU backend's queue workers
included) where this torch supports it; CUDA activity when the backend is a GPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from aorta.common import environment
from aorta.common.jsontypes import JsonObject

#: how many ops the PROFILER OUTPUT block and the result keep
TOP_OPS = 10
TRACE_SUFFIX = ".pt.trace.json"  # what TensorBoard's profiler plugin looks for


def _ms(us: float | None) -> float | None:
    """A profiler time in µs as ms; None where the profiler has none."""
    return None if us is None else us / 1e3


def trace_name(workload: str, streams: int, rank: int | None = None) -> str:
    """The trace file's name inside --profile-dir (one per run; a rank's own under torchrun)."""
    who = f"_rank{rank}" if rank is not None else ""
    return f"{workload}_{streams}s{who}{TRACE_SUFFIX}"


def _activities(backend_name: str) -> list[Any]:
    from torch.profiler import ProfilerActivity

    wanted = [ProfilerActivity.CPU]
    if backend_name == "gpu":
        wanted.append(ProfilerActivity.CUDA)  # HIP kernels too on ROCm builds
    return wanted


def _all_threads_config() -> tuple[Any, bool]:
    """An experimental config that records ops of every thread, and whether this torch has it."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True), True
    except (ImportError, TypeError):
        return None, False


def _top_ops(profiler: Any, on_device: bool) -> list[JsonObject]:
    """The TOP_OPS ops by device time (GPU) or by self CPU time (CPU), with their counts."""
    rows = []
    for event in profiler.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0)
        rows.append(
            {
                "name": event.key,
                "count": int(event.count),
                "self_cpu_time_ms": _ms(event.self_cpu_time_total),
                "cpu_time_ms": _ms(event.cpu_time_total),
                "device_time_ms": _ms(device_us) if on_device else None,
            }
        )
    key = "device_time_ms" if on_device else "self_cpu_time_ms"
    rows.sort(key=lambda r: r[key] or 0.0, reverse=True)
    return rows[:TOP_OPS]


def profile_window(
    iterations: int,
    run_one: Callable[[int], None],
    finish: Callable[[], None],
    backend_name: str,
    profile_dir: str,
    name: str,
) -> JsonObject:
    """Run `iterations` iterations (`run_one(i)`, then `finish()` waits for all streams) under
    torch.profiler; write its Chrome trace to `profile_dir/name`; return the result's section."""
    from torch.profiler import profile

    from aorta.common.atomicio import OutputFolder

    # Kineto prints a "USDT: profiler_start/stop" line on stderr at every session unless its log
    # level is raised; it reads the level when a session starts (a user's own setting wins)
    environment.set_default("KINETO_LOG_LEVEL", "6")
    config, all_threads = _all_threads_config()
    activities = _activities(backend_name)
    kwargs: JsonObject = {"activities": activities, "record_shapes": True}
    if config is not None:
        kwargs["experimental_config"] = config
    start = time.perf_counter_ns()
    with profile(**kwargs) as prof:
        for i in range(iterations):
            run_one(i)
        finish()
    wall_ms = (time.perf_counter_ns() - start) / 1e6
    scratch = tempfile.mkdtemp(prefix="aorta-profile-")  # private (0700): torch writes by path
    try:
        path = os.path.join(scratch, name)
        prof.export_chrome_trace(path)
        with open(path, "rb") as handle:
            trace = handle.read()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with OutputFolder(profile_dir, "profile folder") as folder:
        written = folder.write_bytes(name, trace)
    return {
        "trace_file": str(written),
        "trace_bytes": len(trace),
        "iterations": iterations,
        "wall_ms": wall_ms,
        "activities": [str(a).rsplit(".", 1)[-1] for a in activities],
        "all_threads": all_threads,
        "top_ops": _top_ops(prof, on_device=backend_name == "gpu"),
        "note": (
            "profiled in an extra window right after the measured one (same iterations, streams "
            "and process): the run's figures are not measured under the profiler"
            + ("" if all_threads else "; this torch records only the host thread's ops")
        ),
    }

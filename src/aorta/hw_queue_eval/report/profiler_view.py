"""The PROFILER OUTPUT block (upstream's name) of a `run --profile` result: top ops, trace file."""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject

RULE = "-" * 70
SHOWN = 5  # ops in the console block; the result keeps run/profiling.TOP_OPS


def _ms(value: Any) -> str:
    return "—" if value is None else f"{value:8.3f} ms"


def profiler_lines(result: JsonObject) -> list[str]:
    """The block's lines, or none when the run was not profiled."""
    section = result.get("profiler")
    if not section:
        return []
    on_device = any(op.get("device_time_ms") is not None for op in section.get("top_ops", []))
    by = "device time" if on_device else "self CPU time"
    lines = [
        "",
        RULE,
        "PROFILER OUTPUT",
        RULE,
        f"  Profiled window:  {section['iterations']} iterations, {section['wall_ms']:.1f} ms wall "
        f"({', '.join(section['activities'])} activity)",
        f"  Note: {section['note']}",
        f"  TOP OPERATIONS (by {by}):",
    ]
    for i, op in enumerate(section.get("top_ops", [])[:SHOWN], 1):
        time = op["device_time_ms"] if on_device else op["self_cpu_time_ms"]
        lines.append(f"  {i}. {op['name'][:40]:<40} {_ms(time)} (x{op['count']})")
    lines += [
        f"  Chrome trace:  {section['trace_file']}",
        "    View: https://ui.perfetto.dev, chrome://tracing, TensorBoard's profiler plugin "
        "(tensorboard --logdir of its folder) or Holistic Trace Analysis",
    ]
    return lines

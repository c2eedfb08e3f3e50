"""Console lines for GPU runtime libraries mapped after the tracer attached (late_runtimes).

One line per library: when the kernel saw it mapped, from when its calls were counted and what
was not counted, or why it was not probed at all. Nothing is printed when no runtime came late.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report.console import fmt


def render_late_runtime_rows(section: JsonObject, console: Any) -> None:
    """The late runtimes of the gpu_runtime family, if any (see the module doc)."""
    family = (section.get("families") or {}).get("gpu_runtime") or {}
    report = (family.get("metrics") or {}).get("late_runtimes") or {}
    for row in report.get("libraries") or []:
        console.print(f"  {late_runtime_text(row)}")


def late_runtime_text(row: JsonObject) -> str:
    """One library's line (times in ms since the window opened)."""
    name = str(row.get("library") or "?").rsplit("/", 1)[-1]
    mapped = (
        f"mapped at {fmt(row.get('mapped_at_ms'), '.1f', ' ms')}"
        if row.get("mapped_at_ms") is not None
        else f"mapping time unknown ({row.get('mapped_reason')})"
    )
    if not row.get("probed"):
        return f"late runtime {name}: {mapped}; {row.get('not_probed_reason')}"
    counted = f"counted from {fmt(row.get('counted_from_ms'), '.1f', ' ms')}"
    return f"late runtime {name}: {mapped}, {counted}; {row.get('calls_not_counted_reason')}"

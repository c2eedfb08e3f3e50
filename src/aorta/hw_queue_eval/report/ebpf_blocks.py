"""Console blocks for eBPF sections: "eBPF DRIVER-LEVEL QUEUE METRICS" and "eBPF vs CUDA COMPARISON".

Labels are the ones docs/guide.md shows (users read them); every value says its source below it.
"""

from __future__ import annotations

from typing import Any

from aorta.hw_queue_eval.report.console import fmt
from aorta.hw_queue_eval.report.ebpf_gpu_runtime import render_gpu_runtime_comparison, render_gpu_runtime_rows
from aorta.hw_queue_eval.report.ebpf_memory import render_memory_block
from aorta.hw_queue_eval.report.ebpf_rows import dropped_text, labelled, open_block


def render_queue_block(section: dict[str, Any] | None, console: Any) -> None:
    """The driver-level queue block, its per-queue table, lost events and coverage."""
    if not open_block(section, console, "eBPF DRIVER-LEVEL QUEUE METRICS"):
        return
    labelled(console, "Total submissions", fmt(section.get("total_submissions"), "d"))
    labelled(console, "Total dispatches", fmt(section.get("total_dispatches"), "d"))
    labelled(console, "HW rings used", fmt(section.get("hw_rings_used")))
    labelled(console, "Submit→dispatch avg", fmt(section.get("submit_to_dispatch_avg_us"), ".1f", " us"))
    labelled(console, "Submit→dispatch P99", p99_text(section))
    labelled(console, "Lost events", str(section.get("lost_events")))
    render_dropped(section, console)
    if section.get("summary_reason"):
        console.print(f"  [dim]{section['summary_reason']}[/dim]")
    for key in ("submissions_meaning", "dispatches_meaning", "submit_to_dispatch_meaning"):
        if section.get(key):
            console.print(f"  [dim]{key.split('_meaning')[0]}: {section[key]}[/dim]")
    threads = (((section.get("families") or {}).get("cpu_sched") or {}).get("metrics") or {}).get(
        "threads"
    ) or []
    if threads:
        console.print(
            "  per thread (kernel view; (qN) = helper thread started by queue N; "
            "subm = doorbell rings, s→d = doorbell → on CPU):"
        )
        console.print(
            f"    {'queue':>6} {'streams':<10} {'tid':>7} {'subm':>6} {'disp':>6} "
            f"{'s→d avg':>9} {'s→d p99':>9} {'on-CPU':>8} {'rq wait':>8} {'switch':>6} "
            f"{'preempt':>7} cpus"
        )
        for row in threads:
            if "submissions" not in row:  # a v1 file: its per-thread columns were different
                continue
            console.print(
                f"    {_role(row):>6} {_streams(row)[:10]:<10} {row['tid']:>7} "
                f"{row['submissions']:>6} {row['dispatches']:>6} "
                f"{fmt(row['submit_to_dispatch_avg_us'], '.1f', 'us'):>9} "
                f"{fmt(row['submit_to_dispatch_p99_us'], '.1f', 'us'):>9} "
                f"{fmt(row['on_cpu_ms'], '.1f', 'ms'):>8} "
                f"{fmt(row['kernel_run_delay_ms'], '.1f', 'ms'):>8} "
                f"{fmt(row['switches'], 'd'):>6} "
                f"{fmt(row['involuntary'], 'd'):>7} {row['cpus']}"
            )
    render_gpu_runtime_rows(section, console)
    for line in section.get("interpretation") or []:
        console.print(f"  • {line}")
    absent = []
    for family, data in (section.get("families") or {}).items():
        if not data.get("events_attached"):
            reasons = sorted(set((data.get("events_missing") or {}).values()))
            absent.append(f"{family} ({reasons[0] if reasons else 'no events'})")
            continue
        statement = (data.get("coverage") or {}).get("statement")
        if statement:
            console.print(f"  [dim]{family}: {statement}[/dim]")
    if absent:
        console.print(f"  [dim]not attached on this machine: {'; '.join(absent)}[/dim]")


def p99_text(section: dict[str, Any]) -> str:
    """The P99 with how it was obtained: exact, or the bucket it lies in and the error bound."""
    from aorta.ebpf.engine import p99_bounds_us

    p99 = section.get("submit_to_dispatch_p99_us")
    if not isinstance(p99, (int, float)):
        return fmt(p99)
    rec = section.get("submit_to_dispatch_p99")
    if isinstance(rec, dict) and rec.get("method") == "exact":
        return f"{p99:.1f} us (exact, {rec.get('count')} events)"
    low, high, method = p99_bounds_us(section, p99)
    if method == "unknown precision":
        return f"{p99:.1f} us"
    bound = f", ±{100 * (high - low) / low:.0f} %" if low > 0 else ""
    return f"{p99:.1f} us ({method}: in {low:.1f}–{high:.1f} us{bound})"


def render_dropped(section: dict[str, Any], console: Any) -> None:
    """`Dropped updates` beside lost events (full maps), and a warning line when any."""
    text = dropped_text(section)
    if text is None:
        return
    labelled(console, "Dropped updates", text)
    if section.get("warning"):
        console.print(f"  [yellow]warning:[/yellow] {section['warning']}")


def _role(row: dict[str, Any]) -> str:
    if row.get("queue") is not None:
        return f"q{row['queue']}"
    if row.get("helper_of_queue") is not None:
        return f"(q{row['helper_of_queue']})"
    return "host" if row.get("submitter") else "-"


def _streams(row: dict[str, Any]) -> str:
    return ",".join(map(str, row["streams"])) if row.get("streams") else (row.get("comm") or "")


def render_comparison_block(section: dict[str, Any] | None, console: Any) -> None:
    """The comparison block: both means over one population, the counts behind them, coverage."""
    if not open_block(section, console, "eBPF vs CUDA COMPARISON", "not available"):
        return
    if "measurement_accuracy_pct" in section:  # written before the doorbell design (v1 layout)
        _render_v1_comparison(section, console)
        return
    if section.get("kernel_source") == "gpu_runtime":  # launches seen by uprobes vs ops issued
        labelled(console, "Measurement accuracy", fmt(section.get("coverage_pct"), ".1f", "%"))
        render_gpu_runtime_comparison(section, console)
        _notes(section, console, ("coverage_meaning", "ebpf_meaning", "harness_meaning", "reason"))
        return
    n = section.get("compared")
    counted = f"  (n={n})" if isinstance(n, int) else ""
    harness_label = section.get("harness_label") or "CUDA switch overhead"
    labelled(
        console,
        "eBPF submit→dispatch",
        fmt(section.get("kernel_submit_to_dispatch_ms"), ".3f", " ms") + counted,
    )
    labelled(console, harness_label, fmt(section.get("harness_submit_to_start_ms"), ".3f", " ms") + counted)
    coverage = fmt(section.get("coverage_pct"), ".1f", "%")
    if isinstance(section.get("harness_submissions"), int):
        beyond = section.get("beyond_record_cap") or 0
        cap_note = f", {beyond} beyond the per-submission record cap" if beyond else ""
        coverage += (
            f"  ({section.get('matched_submissions')} of "
            f"{section['harness_submissions'] - beyond} harness submissions matched"
            f"{cap_note}; kernel counted {section.get('kernel_submissions')} of "
            f"{section['harness_submissions']}; lost events {section.get('lost_events')})"
        )
    labelled(console, "Measurement accuracy", coverage)
    labelled(console, "Kernel-visible share", fmt(section.get("kernel_visible_share_pct"), ".1f", "%"))
    _notes(section, console, ("kernel_meaning", "harness_meaning", "coverage_meaning", "reason"))


def _notes(section: dict[str, Any], console: Any, keys: tuple[str, ...]) -> None:
    """The dim lines under the comparison block: what each figure means, then the formula."""
    for key in keys:
        if section.get(key):
            console.print(f"  [dim]{section[key]}[/dim]")
    console.print(f"  [dim]{section.get('formula')}[/dim]")


def _render_v1_comparison(section: dict[str, Any], console: Any) -> None:
    """Files from before the doorbell design: their 'accuracy' was a share of delay, so say so."""
    labelled(console, "eBPF submit→dispatch", fmt(section.get("ebpf_submit_to_dispatch_ms"), ".3f", " ms"))
    labelled(console, "Harness dispatch delay", fmt(section.get("harness_dispatch_delay_ms"), ".3f", " ms"))
    labelled(console, "Kernel-visible share", fmt(section.get("measurement_accuracy_pct"), ".1f", "%"))
    console.print(
        "  [dim]old result file: the two means cover different populations and the "
        "percentage is a ratio of sums, not coverage (see docs/ebpf.md)[/dim]"
    )


def render_ebpf(result: dict[str, Any], console: Any) -> None:
    """Every eBPF block present in a result (memory blocks come from their own module)."""
    render_queue_block(result.get("ebpf_queue_metrics"), console)
    render_comparison_block(result.get("ebpf_vs_cuda_comparison"), console)
    render_memory_block(result.get("ebpf_memory_metrics"), console)

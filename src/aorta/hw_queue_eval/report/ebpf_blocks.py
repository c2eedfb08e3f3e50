"""Console blocks for eBPF sections: "eBPF DRIVER-LEVEL QUEUE METRICS" and the comparison block.

Labels are the ones docs/guide.md shows where they name the quantity shown; the comparison block is
titled by what it compares (on the CPU backend the harness's hand-offs, not CUDA) and its coverage
is printed as the count it is. Every value says its source below it.
"""

from __future__ import annotations

from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report.console import fmt
from aorta.hw_queue_eval.report.ebpf_gpu_runtime import render_gpu_runtime_comparison, render_gpu_runtime_rows
from aorta.hw_queue_eval.report.ebpf_late_runtimes import render_late_runtime_rows
from aorta.hw_queue_eval.report.ebpf_memory import render_memory_block
from aorta.hw_queue_eval.report.ebpf_rows import dropped_text, helper_error_text, labelled, open_block, table


def render_queue_block(
    section: JsonObject | None, console: Any, collectives: JsonObject | None = None
) -> None:
    """The driver-level queue block, its per-queue table, lost events and coverage; `collectives`:
    the comparison's join of the workload's collective ops with the runtime's calls, if any."""
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
    rows = family_rows(section)
    if len(rows) > 1:  # one family: its figures are the rows above
        table(
            console,
            f"per family (each family's own summary; the rows above are {section.get('source')}'s):",
            FAMILY_COLUMNS,
            rows,
        )
    threads = (((section.get("families") or {}).get("cpu_sched") or {}).get("metrics") or {}).get(
        "threads"
    ) or []
    rows = thread_rows(threads)
    if rows:
        table(
            console,
            "per thread (kernel view; (qN) = helper thread started by queue N; "
            "subm = doorbell rings, s→d = doorbell → on CPU; n/a = not a traced queue worker; "
            "≈ = log-linear histogram estimate, else exact):",
            THREAD_COLUMNS,
            rows,
        )
    render_gpu_runtime_rows(section, console, collectives)
    render_late_runtime_rows(section, console)
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
        console.print(
            f"  [dim]not attached on this machine (not measured, null in the JSON): {'; '.join(absent)}[/dim]"
        )


FAMILY_COLUMNS = (
    ("family", "<14"),
    ("submissions", ">11"),
    ("dispatches", ">10"),
    ("s→d avg", ">10"),
    ("s→d p99", ">10"),
    ("rings", ""),
)


def family_rows(section: JsonObject) -> list[list[Any]]:
    """One row per attached family that reports a queue summary (FAMILY_COLUMNS)."""
    rows = []
    for name, data in (section.get("families") or {}).items():
        summary = (data.get("metrics") or {}).get("summary")
        if not data.get("events_attached") or not isinstance(summary, dict):
            continue
        if "total_submissions" not in summary:
            continue
        rings = summary.get("hw_rings_used")
        rows.append(
            [
                name,
                fmt(summary.get("total_submissions"), "d"),
                fmt(summary.get("total_dispatches"), "d"),
                fmt(summary.get("submit_to_dispatch_avg_us"), ".1f", " us"),
                fmt(summary.get("submit_to_dispatch_p99_us"), ".1f", " us"),
                len(rings) if isinstance(rings, list) else fmt(rings),
            ]
        )
    return rows


THREAD_COLUMNS = (
    ("queue", ">6"),
    ("streams", "<10.10"),
    ("tid", ">7"),
    ("subm", ">6"),
    ("disp", ">6"),
    ("s→d avg", ">9"),
    ("s→d p99", ">10"),
    ("on-CPU", ">8"),
    ("rq wait", ">8"),
    ("switch", ">6"),
    ("preempt", ">7"),
    ("cpus", ""),
)


def thread_rows(threads: list[JsonObject]) -> list[list[Any]]:
    """The per-thread table's cells (THREAD_COLUMNS), v1 rows (other columns) left out."""
    return [
        [
            _role(row),
            _streams(row),
            row["tid"],
            fmt(row["submissions"], "d"),
            fmt(row["dispatches"], "d"),
            fmt(row["submit_to_dispatch_avg_us"], ".1f", "us"),
            thread_p99_text(row),
            fmt(row["on_cpu_ms"], ".1f", "ms"),
            fmt(row["kernel_run_delay_ms"], ".1f", "ms"),
            fmt(row["switches"], "d"),
            fmt(row["involuntary"], "d"),
            row["cpus"],
        ]
        for row in threads
        if "submissions" in row  # a v1 file: its per-thread columns were different
    ]


def p99_text(section: JsonObject) -> str:
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


def thread_p99_text(row: JsonObject) -> str:
    """A per-thread P99: exact, or marked ≈ when it is the log-linear histogram's estimate (a row
    written before the method was recorded is an estimate too)."""
    p99 = row.get("submit_to_dispatch_p99_us")
    if not isinstance(p99, (int, float)):
        return fmt(p99)
    mark = "" if row.get("submit_to_dispatch_p99_method") == "exact" else "≈"
    return f"{mark}{p99:.1f}us"


def render_dropped(section: JsonObject, console: Any) -> None:
    """`Dropped updates` beside lost events (full maps), and a warning line when any."""
    text = dropped_text(section)
    if text is None:
        return
    labelled(console, "Dropped updates", text)
    errors = helper_error_text(section)
    if errors:
        labelled(console, "Helper errors", errors)
    if section.get("warning"):
        console.print(f"  [yellow]warning:[/yellow] {section['warning']}")


def _role(row: JsonObject) -> str:
    if row.get("queue") is not None:
        return f"q{row['queue']}"
    if row.get("helper_of_queue") is not None:
        return f"(q{row['helper_of_queue']})"
    return "host" if row.get("submitter") else "-"


def _streams(row: JsonObject) -> str:
    return ",".join(map(str, row["streams"])) if row.get("streams") else (row.get("comm") or "")


def comparison_title(section: JsonObject) -> str:
    """The comparison block's title: what the kernel's figures are compared with."""
    if "measurement_accuracy_pct" in section:  # written before the doorbell design (v1 layout)
        return "eBPF vs CUDA COMPARISON"
    source = section.get("kernel_source")
    if source == "cpu_sched":
        return "eBPF vs HARNESS COMPARISON (CPU queue hand-offs)"
    if source == "gpu_runtime":
        return "eBPF vs CUDA/HIP COMPARISON (runtime launches vs event-timed ops)"
    return "eBPF vs HARNESS COMPARISON"


def render_comparison_block(section: JsonObject | None, console: Any) -> None:
    """The comparison block: both means over one population, the counts behind them, coverage
    as a count and the timing check apart from it."""
    if section is None or not open_block(section, console, comparison_title(section), "not available"):
        return
    if "measurement_accuracy_pct" in section:  # written before the doorbell design (v1 layout)
        _render_v1_comparison(section, console)
        return
    if section.get("kernel_source") == "gpu_runtime":  # launches seen by uprobes vs ops issued
        labelled(
            console,
            "Coverage",
            f"{fmt(section.get('launches_matched'), 'd')} launches on the harness's streams / "
            f"{fmt(section.get('harness_ops'), 'd')} ops issued",
        )
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
    labelled(console, "Coverage", coverage_text(section))
    render_timing_check(section, console)
    labelled(console, "Kernel-visible share", fmt(section.get("kernel_visible_share_pct"), ".1f", "%"))
    _notes(
        section,
        console,
        ("kernel_meaning", "harness_meaning", "coverage_meaning", "timing_check_meaning", "reason"),
    )


def coverage_text(section: JsonObject) -> str:
    """ "matched of harness submissions matched (…)": the coverage as the count it is."""
    harness = section.get("harness_submissions")
    if not isinstance(harness, int):
        return "n/a"
    beyond = section.get("beyond_record_cap") or 0
    cap_note = f", {beyond} beyond the per-submission record cap" if beyond else ""
    return (
        f"{section.get('matched_submissions')} of {harness - beyond} harness submissions matched "
        f"by a kernel record{cap_note}  (kernel counted {section.get('kernel_submissions')} of "
        f"{harness}; lost events {section.get('lost_events')})"
    )


def render_timing_check(section: JsonObject, console: Any) -> None:
    """ "Timing check": matched submissions whose kernel dispatch precedes the harness's start,
    and a warning when some do not (the kernel's times are then wrong)."""
    late, checked = section.get("timing_inconsistent"), section.get("timing_checked")
    if not isinstance(late, int) or not isinstance(checked, int):
        if "timing_checked" in section:
            labelled(console, "Timing check", "n/a (no matched submission)")
        return
    labelled(
        console,
        "Timing check",
        f"{checked - late} of {checked} matched: kernel dispatch before the harness's start",
    )
    if late:
        console.print(
            f"  [yellow]warning:[/yellow] kernel timing inconsistent: {late} of {checked} matched "
            "submissions got a CPU after the harness saw their work start; the kernel-side times "
            "are wrong"
        )


def _notes(section: JsonObject, console: Any, keys: tuple[str, ...]) -> None:
    """The dim lines under the comparison block: what each figure means, then the formula."""
    for key in keys:
        if section.get(key):
            console.print(f"  [dim]{section[key]}[/dim]")
    console.print(f"  [dim]{section.get('formula')}[/dim]")


def _render_v1_comparison(section: JsonObject, console: Any) -> None:
    """Files from before the doorbell design: their 'accuracy' was a share of delay, so say so."""
    labelled(console, "eBPF submit→dispatch", fmt(section.get("ebpf_submit_to_dispatch_ms"), ".3f", " ms"))
    labelled(console, "Harness dispatch delay", fmt(section.get("harness_dispatch_delay_ms"), ".3f", " ms"))
    labelled(console, "Kernel-visible share", fmt(section.get("measurement_accuracy_pct"), ".1f", "%"))
    console.print(
        "  [dim]old result file: the two means cover different populations and the "
        "percentage is a ratio of sums, not coverage (see docs/ebpf.md)[/dim]"
    )


def render_ebpf(result: JsonObject, console: Any) -> None:
    """Every eBPF block present in a result (memory blocks come from their own module)."""
    comparison = result.get("ebpf_vs_cuda_comparison")
    joined = comparison.get("collectives") if isinstance(comparison, dict) else None
    render_queue_block(result.get("ebpf_queue_metrics"), console, joined)
    render_comparison_block(comparison, console)
    render_memory_block(result.get("ebpf_memory_metrics"), console)


def rank_ebpf_lines(combined: JsonObject) -> list[str]:
    """One line per rank of a torchrun result with what its eBPF sections measured (rank 0
    prints them under the per-rank table; none when the job was not traced)."""
    lines = []
    for result in combined.get("distributed", {}).get("rank_results") or []:
        parts = []
        queue, memory = result.get("ebpf_queue_metrics"), result.get("ebpf_memory_metrics")
        if isinstance(queue, dict):
            parts.append(
                f"{fmt(queue.get('total_submissions'), 'd')} submissions, "
                f"{fmt(queue.get('total_dispatches'), 'd')} dispatches, submit→dispatch avg "
                f"{fmt(queue.get('submit_to_dispatch_avg_us'), '.1f', ' us')}, P99 {p99_text(queue)}, "
                f"lost events {queue.get('lost_events')} (measured by {queue.get('source')})"
                if queue.get("status") == "ok"
                else f"queue tracing {queue.get('status')}: {queue.get('error')}"
            )
        if isinstance(memory, dict):
            parts.append(
                f"memory: {fmt(memory.get('host_page_faults'), 'd')} host page faults, "
                f"lost events {memory.get('lost_events')}"
                if memory.get("status") == "ok"
                else f"memory tracing {memory.get('status')}: {memory.get('error')}"
            )
        if parts:
            lines.append(f"rank {result['distributed']['rank']} eBPF: {'; '.join(parts)}")
    return lines

"""`report`: PNG plots plus one self-contained HTML page (plots embedded as base64) for a result.

Sweeps: throughput and P99 vs streams with the knee and the queue pool marked, the summary table
and the verdict. Runs: latency histogram/CDF, per-stream op timeline, the timeline picture of one
iteration, key numbers, and the eBPF blocks the console prints (same builders) with histograms.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aorta.common.atomicio import OutputFolder
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report import plots
from aorta.hw_queue_eval.report.console import fmt, interpret, switch_rows
from aorta.hw_queue_eval.report.ebpf_blocks import render_ebpf
from aorta.hw_queue_eval.report.ebpf_rows import Block, BlockRecorder
from aorta.hw_queue_eval.report.tables import sweep_table
from aorta.hw_queue_eval.report.timeline import timeline_png

NO_ANALYSIS = "no scaling analysis: fewer than two points finished ok"
EBPF_SECTIONS = ("ebpf_queue_metrics", "ebpf_memory_metrics", "ebpf_vs_cuda_comparison")
STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #ccc;
padding:3px 8px;text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
figure{margin:1.5em 0}img{max-width:100%;border:1px solid #ddd}.verdict{font-size:1.15em;
background:#f6f8ff;padding:0.6em;border-left:4px solid #36c}.note{color:#666}
.warning{color:#a50}.caption{margin-bottom:0}pre{font-size:0.85em;background:#f8f8f8;padding:0.5em}"""


@dataclass
class Plot:
    """One PNG of the report."""

    filename: str
    title: str
    png: bytes
    caption: str = ""


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """A table; no header row when every header is empty (label/value rows)."""
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{f'<tr>{head}</tr>' if any(headers) else ''}{body}</table>"


def _figure(plot: Plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    caption = html.escape(plot.title + (f": {plot.caption}" if plot.caption else ""))
    return (
        f'<figure id="{plot.filename}" data-file="{plot.filename}"><img alt="{html.escape(plot.title)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{caption} '
        f'(<a href="{plot.filename}">{plot.filename}</a>)</figcaption></figure>'
    )


_SECTION_SHORT = {
    "ebpf_queue_metrics": "queue",
    "ebpf_memory_metrics": "memory",
    "ebpf_vs_cuda_comparison": "vs_cuda",
}


def histogram_filename(section: str, name: str, prefix: str = "") -> str:
    """'ebpf_queue_cpu_sched_submit_to_dispatch_hist.png': section, family and histogram name,
    without the 'families'/'metrics' nesting or the unit suffix."""
    parts = [p for p in name.split(".") if p not in ("families", "metrics")]
    stem = "_".join(parts)
    for suffix in ("_ns", "_us", "_ms"):
        stem = stem.removesuffix(suffix)
    slug = "".join(c if c.isalnum() else "_" for c in stem).strip("_")
    while "__" in slug:
        slug = slug.replace("__", "_")
    return f"{prefix}ebpf_{_SECTION_SHORT.get(section, section)}_{slug}.png"


def _ebpf_plots(result: JsonObject, prefix: str = "") -> list[Plot]:
    out = []
    for section in EBPF_SECTIONS:
        for name, buckets in plots.find_histograms(result.get(section) or {}):
            out.append(
                Plot(
                    histogram_filename(section, name, prefix),
                    f"eBPF {section}: {name}",
                    plots.ebpf_histogram(name, buckets),
                )
            )
    return out


def _block_html(block: Block) -> str:
    """One console block as HTML: labelled rows as a two-column table, tables, notes, bullets."""
    parts = [f"<h3>{html.escape(block.title)}</h3>"] if block.title else []
    rows: list[list[Any]] = []
    text: list[str] = []
    bullets: list[str] = []

    def flush() -> None:
        if rows:
            parts.append(_table(["", ""], rows))
            rows.clear()
        if text:
            parts.append("<pre>" + html.escape("\n".join(text)) + "</pre>")
            text.clear()
        if bullets:
            parts.append("<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in bullets) + "</ul>")
            bullets.clear()

    for kind, payload in block.items:
        if kind == "row":
            rows.append(list(payload))
            continue
        if kind == "text":
            text.append(payload.strip())
            continue
        if kind == "bullet":
            bullets.append(payload)
            continue
        flush()
        if kind == "table":
            caption, headers, cells = payload
            parts.append(f'<p class="caption">{html.escape(caption)}</p>' + _table(headers, cells))
        elif kind == "warning":
            parts.append(f'<p class="warning">warning: {html.escape(payload)}</p>')
        else:
            parts.append(f'<p class="note">{html.escape(payload)}</p>')
    flush()
    return "".join(parts)


def ebpf_html(result: JsonObject, figures: list[Plot]) -> str:
    """The eBPF section: the console's blocks (same builders, same labels), then the histograms."""
    recorder = BlockRecorder()
    render_ebpf(result, recorder)
    if not recorder.blocks:
        return '<p class="note">not traced with eBPF</p>'
    hists = "".join(_figure(p) for p in figures)
    return "".join(_block_html(b) for b in recorder.blocks) + (f"<h3>Histograms</h3>{hists}" if hists else "")


def run_option_rows(sweep: JsonObject) -> list[list[Any]]:
    """(option, value) of a sweep's run options; an option left to its default (None, or
    device 'auto') shows what the points ran with, read from their results' config."""
    configs = [p["result"].get("config") or {} for p in sweep.get("points") or [] if p.get("result")]
    rows = []
    for name, value in (sweep.get("run_options") or {}).items():
        if value is None or value == "auto":
            used = sorted({str(c[name]) for c in configs if c.get(name) is not None})
            given = "default" if value is None else str(value)
            value = (
                f"{', '.join(used)} ({given}: as the points ran)"
                if used
                else f"{given} (no point finished to say what it resolved to)"
            )
        rows.append([name, value])
    return rows


def sweep_page(sweep: JsonObject, prefix: str = "", level: int = 1) -> tuple[str, list[Plot], list[str]]:
    """(HTML body, plots, notes) for a sweep file; `prefix` names its PNGs apart from other
    sweeps' on one page, `level` is its heading level (1 alone, 2 inside a suite page)."""
    results = [p["result"] for p in sweep.get("points", []) if p.get("status") == "ok" and p.get("result")]
    notes, figures = [], []
    for filename, title, png in (
        (
            f"{prefix}throughput_vs_streams.png",
            "Throughput vs streams",
            plots.sweep_throughput(sweep, results),
        ),
        (f"{prefix}p99_vs_streams.png", "P99 latency vs streams", plots.sweep_latency(sweep, results)),
    ):
        if png is None:
            notes.append(f"{title}: no point has the data")
        else:
            figures.append(Plot(filename, title, png))
    analysis = sweep.get("analysis") or {}
    headers, rows = sweep_table(sweep)
    failed = [
        f"{p['key'].get('streams')} streams {p.get('status')}: {p.get('error')}"
        for p in sweep.get("points", [])
        if p.get("status") != "ok"
    ]
    h, sub = f"h{level}", f"h{level + 1}"
    body = [
        f"<{h}>Sweep: {html.escape(str(sweep.get('workload')))}</{h}>",
        f'<p class="verdict">{html.escape(analysis.get("verdict") or NO_ANALYSIS)}</p>',
        *[f'<p class="note">warning: {html.escape(w)}</p>' for w in analysis.get("warnings") or []],
    ]
    if analysis:
        body.append(
            _table(
                ["", ""],
                [
                    [
                        "peak",
                        f"{fmt(analysis.get('peak_throughput'), '.2f')} {sweep.get('throughput_unit')} "
                        f"at {analysis.get('peak_streams')} streams",
                    ],
                    ["knee (throughput stops scaling)", fmt(analysis.get("knee_streams"), "d", none="none")],
                    [
                        "hardware-queue pool",
                        f"{fmt(analysis.get('pool_size'), 'd', none='unknown')} "
                        f"({analysis.get('pool_source')})",
                    ],
                    ["P99 latency jump at", fmt(analysis.get("latency_jump_streams"), "d", none="none")],
                    [
                        "eBPF dispatch P99 jump at",
                        fmt(analysis.get("dispatch_jump_streams"), "d", none="none / not traced"),
                    ],
                ],
            )
        )
    body += diagnosis_section(analysis.get("diagnosis"), results, prefix, sub, figures, notes)
    body.append(f"<{sub}>Points</{sub}>" + _table(headers, rows))
    body += [f'<p class="note">{html.escape(line)}</p>' for line in failed]
    body.append(f"<{sub}>Plots</{sub}>" + "".join(_figure(p) for p in figures))
    body.append(f"<{sub}>Run options</{sub}>" + _table(["option", "value"], run_option_rows(sweep)))
    return "\n".join(body), figures, notes


def diagnosis_section(
    diagnosis: JsonObject | None,
    results: list[JsonObject],
    prefix: str,
    sub: str,
    figures: list[Plot],
    notes: list[str],
) -> list[str]:
    """The sweep's `analysis.diagnosis`: its line, one item per cause, each linked to the timeline
    of the examined point's first run (added to `figures`), where the cause's evidence lies."""
    if not diagnosis:
        return []
    out = [f"<{sub}>Diagnosis</{sub}>", f'<p class="verdict">{html.escape(diagnosis.get("text") or "")}</p>']
    examined = diagnosis.get("examined_streams")
    run = next((r for r in results if r.get("stream_count") == examined), None)
    link = ""
    if run is not None and diagnosis.get("causes"):
        picture, caption = timeline_png(run)
        filename = f"{prefix}diagnosis_timeline.png"
        if picture is None:
            notes.append(f"diagnosis timeline at {examined} streams: {caption}")
        else:
            title = f"Timeline at {examined} streams (the point the diagnosis examined)"
            figures.append(Plot(filename, title, picture, caption))
            link = f' (<a href="#{filename}">timeline at {examined} streams</a>)'
    items = [
        f"<li>{html.escape(c['label'])} (confidence {html.escape(c['confidence'])}): "
        f"{html.escape(c['text'])}{link}</li>"
        for c in diagnosis.get("causes") or []
    ]
    return out + ([f"<ul>{''.join(items)}</ul>"] if items else [])


def run_page(result: JsonObject) -> tuple[str, list[Plot], list[str]]:
    """(HTML body, plots, notes) for a run result."""
    notes, figures = [], []
    dist = plots.latency_distribution(result)
    if dist is None:
        notes.append(f"latency histogram: {result.get('latency_note') or 'no per-iteration samples'}")
    else:
        figures.append(Plot("latency_distribution.png", "Iteration latency: histogram and CDF", dist))
    timeline, caption = plots.op_timeline(result)
    if timeline is None:
        notes.append(f"op timeline: {caption}")
    else:
        figures.append(Plot("op_timeline.png", "Ops per stream", timeline, caption))
    picture, caption = timeline_png(result)
    if picture is None:
        notes.append(f"timeline: {caption}")
    else:
        figures.append(Plot("timeline.png", "Timeline of one iteration", picture, caption))
    ebpf_figures = _ebpf_plots(result)
    lat = result.get("latency_ms") or {}
    sw = result.get("switch_latency") or {}
    qmap = result.get("queue_mapping") or {}
    key_rows = [
        ["throughput", f"{fmt(result.get('throughput'), '.2f')} {result.get('throughput_unit')}"],
        *[[f"latency {k}", fmt(lat.get(k), ".3f", " ms")] for k in ("p50", "p95", "p99", "mean")],
        *[[label.lower(), value] for label, value in switch_rows(sw)],
        [
            "streams with an op in flight (wall)",
            fmt((result.get("concurrency") or {}).get("achieved"), ".2f"),
        ],
        [
            "queues running on a CPU (on-CPU)",
            fmt((result.get("concurrency") or {}).get("on_cpu_queues"), ".2f"),
        ],
        ["hardware queues", f"{qmap.get('queues_created')} of pool {qmap.get('pool_size')}"],
        ["stream → queue", str(qmap.get("stream_to_queue"))],
    ]
    per_label = (result.get("ops") or {}).get("per_label") or {}
    label_rows = [
        [label, s["count"], fmt(s["p50"], ".4f"), fmt(s["p99"], ".4f")] for label, s in per_label.items() if s
    ]
    body = [
        f"<h1>Run: {html.escape(str(result.get('workload_name')))} on "
        f"{result.get('stream_count')} streams</h1>",
        _table(["", ""], key_rows),
        "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in interpret(result)) + "</ul>",
        *[f'<p class="note">warning: {html.escape(w)}</p>' for w in result.get("warnings", [])],
        "<h2>Ops by label</h2>" + _table(["label", "count", "p50 ms", "p99 ms"], label_rows),
        "<h2>Plots</h2>" + "".join(_figure(p) for p in figures),
        "<h2>eBPF</h2>" + ebpf_html(result, ebpf_figures),
    ]
    return "\n".join(body), figures + ebpf_figures, notes


def policy_page(data: JsonObject) -> tuple[str, list[Plot], list[str]]:
    """(HTML body, plots, notes) for a policy-sweep file: one bar per policy with CIs."""
    from aorta.hw_queue_eval.report.policy_table import effect_text, reference_of

    summary = data.get("summary")
    if not isinstance(summary, dict) or not summary.get("rows"):
        raise UsageError(
            "report: this policy-sweep file has no summary (interrupted before the "
            "end?): finish it with `policy-sweep … --resume` first"
        )
    notes, figures = [], []
    for filename, title, metric in (
        ("policy_throughput.png", "Throughput per policy", "throughput"),
        ("policy_p99.png", "P99 latency per policy", "p99"),
    ):
        png = plots.policy_plot(data, metric)
        if png is None:
            notes.append(f"{title}: no policy has a measurement")
        else:
            figures.append(Plot(filename, title, png))
    rows = []
    for row in summary["rows"]:
        ci = row.get("throughput_ci") or {}
        vs = (row.get("vs_baseline") or {}).get("throughput") or {}
        tput = fmt(row.get("throughput"), ".4g") + (
            f" [{ci['low']:.4g}, {ci['high']:.4g}]" if ci.get("low") is not None else ""
        )
        rows.append(
            [
                row["policy"],
                row.get("status"),
                tput,
                fmt(vs.get("change_pct"), "+.1f", "%") + (f" {vs['verdict']}" if vs else ""),
                fmt((row.get("latency_ms") or {}).get("p99"), ".3f"),
                effect_text(row),
            ]
        )
    unit = next((r.get("throughput_unit") for r in summary["rows"] if r.get("throughput_unit")), "")
    best = [
        f"Best throughput: {(summary.get('best_throughput') or {}).get('text')}",
        f"Best P99: {(summary.get('best_p99') or {}).get('text')}",
    ]
    body = [
        f"<h1>Policy sweep: {html.escape(str(data.get('workload')))} on "
        f"{data.get('streams')} streams ({html.escape(str(data.get('backend')))} backend, "
        f"{data.get('repeats')} repeat(s))</h1>",
        *[f'<p class="verdict">{html.escape(line)}</p>' for line in best],
        _table(
            [
                "policy",
                "status",
                f"throughput ({unit}) median [CI]",
                f"Δ vs {html.escape(str(reference_of(summary)['policy']))}",
                "P99 ms",
                "in effect / reason",
            ],
            rows,
        ),
        f'<p class="note">{html.escape(summary.get("verdict_rule") or "")}</p>',
        "<h2>Plots</h2>" + "".join(_figure(p) for p in figures),
    ]
    return "\n".join(body), figures, notes


def page_for(data: JsonObject) -> tuple[str, list[Plot], list[str]]:
    """Dispatch on the file kind; UsageError for kinds the report does not draw."""
    from aorta.hw_queue_eval.results import upstream

    if upstream.is_upstream(data):
        sweep = upstream.as_points(data) if isinstance(data.get("results"), list) else None
        if (sweep is None and "stream_count" not in data) or (sweep and sweep["kind"] != "sweep"):
            raise UsageError(
                "report draws the upstream tool's runs and sweeps, not its policy comparisons: "
                "compare them with `compare -b a.json -t b.json`"
            )
        body, figures, notes = sweep_page(sweep) if sweep else run_page(data)
        return f'<p class="note">{html.escape(upstream.NOTE)}</p>{body}', figures, notes
    if data.get("kind") in ("policy-sweep", "policy_sweep"):
        return policy_page(data)
    if data.get("kind") == "sweep" or isinstance(data.get("points"), list):
        return sweep_page(data)
    if data.get("kind") in (None, "run") and "stream_count" in data:
        return run_page(data)
    raise UsageError(f"report draws run, sweep and policy-sweep files, not kind {data.get('kind')!r}")


def write_report(data: JsonObject, out_dir: Path, source: str) -> list[Path]:
    """Write every PNG and index.html into `out_dir` (atomically each); returns the paths.

    The folder is created and written through its descriptor (atomicio.OutputFolder): a link
    planted after the checks cannot redirect the files, and a failure leaves no folder behind.
    """
    body, figures, notes = page_for(data)  # everything drawn before anything is written
    return write_page(body, figures, notes, out_dir, source, (data.get("tool") or {}).get("version"))


def suite_page(
    level: str, sweeps: list[JsonObject], skipped: list[tuple[str, str]]
) -> tuple[str, list[Plot], list[str]]:
    """(HTML body, plots, notes) of a `run-priority` suite: an overview row per workload, then
    each workload's sweep section (its PNGs prefixed with its name)."""
    overview = []
    for sweep in sweeps:
        analysis = sweep.get("analysis") or {}
        ok = sum(1 for p in sweep.get("points", []) if p.get("status") == "ok")
        overview.append(
            [
                sweep.get("workload"),
                sweep.get("priority") or "—",
                f"{ok}/{len(sweep.get('points', []))}",
                f"{fmt(analysis.get('peak_throughput'), '.2f')} {sweep.get('throughput_unit')}",
                fmt(analysis.get("peak_streams"), "d"),
                fmt(analysis.get("knee_streams"), "d", none="none"),
                analysis.get("verdict") or NO_ANALYSIS,
            ]
        )
    body = [
        f"<h1>Suite: priority {html.escape(level)}</h1>",
        _table(["workload", "priority", "points ok", "peak", "at streams", "knee", "verdict"], overview),
        *[f'<p class="note">skipped {html.escape(name)}: {html.escape(why)}</p>' for name, why in skipped],
    ]
    figures: list[Plot] = []
    notes: list[str] = []
    for sweep in sweeps:
        name = str(sweep.get("workload"))
        part, part_figures, part_notes = sweep_page(sweep, prefix=f"{name}_", level=2)
        body.append(part)
        figures += part_figures
        notes += [f"{name}: {n}" for n in part_notes]
    return "\n".join(body), figures, notes


def write_page(
    body: str, figures: list[Plot], notes: list[str], out_dir: Path, source: str, version: Any
) -> list[Path]:
    """index.html (and its PNGs) in `out_dir`, written through the folder's descriptor."""
    notes_html = "".join(f'<p class="note">not drawn: {html.escape(n)}</p>' for n in notes)
    page = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>aorta report: '
        f"{html.escape(source)}</title><style>{STYLE}</style></head><body>{body}{notes_html}"
        f'<p class="note">source: {html.escape(source)}; written by aorta '
        f"{html.escape(str(version))}</p></body></html>\n"
    )
    with OutputFolder(out_dir, "report folder") as folder:
        written = [folder.write_bytes(plot.filename, plot.png) for plot in figures]
        written.append(folder.write_text("index.html", page))
    return written

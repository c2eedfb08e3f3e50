"""Comparison output: console tables (rich) and Markdown for CI comments, from compare's dict."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.report.console import fmt

_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def md_escape(value: Any) -> str:
    """Text from an input file as literal Markdown: every ASCII punctuation backslash-escaped
    (no headings, links, autolinks, HTML or table breaks), line breaks turned into spaces."""
    text = " ".join(str(value).splitlines())
    return _MD_SPECIAL.sub(r"\\\1", text)


def _plain(value: Any) -> str:
    return str(value)


VERDICT_STYLE = {
    "regression": "bold red",
    "improvement": "green",
    "unchanged": "dim",
    "inconclusive": "yellow",
}
HEADERS = ["Point", "Metric", "Base median (runs)", "Test median (runs)", "Change [CI]", "p", "Verdict"]
EBPF_DEFAULT_LINES = 10


def _median_iqr(median: Any, iqr: Any, n: Any) -> str:
    if median is None:
        return "n/a"
    runs = f"{n} run" + ("s" if n != 1 else "")
    return f"{median:.4g} ({runs}" + (f", IQR {iqr:.2g})" if iqr is not None else ")")


def change_text(m: JsonObject) -> str:
    """'+12.3% [+4.0, +20.1] 97%' (change, CI of the change, its level) or just the change."""
    text = fmt(m.get("change_pct"), "+.1f", "%")
    ci = m.get("change_ci_pct")
    if ci:
        text += f" [{ci[0]:+.1f}, {ci[1]:+.1f}] {m['change_ci_level']:.0%}"
    return text


def _point_name(pair: JsonObject) -> str:
    return f"{pair['workload']} @ {pair['streams']}" + (f" [{pair['policy']}]" if pair.get("policy") else "")


def metric_rows(test: JsonObject, esc: Callable[[Any], str] = _plain) -> list[list[str]]:
    """Table rows (strings) of one test file's paired metrics; `esc` quotes input-file text."""
    rows = []
    for pair in test["pairs"]:
        point = esc(_point_name(pair))
        for m in [
            *pair["metrics"],
            *[
                i
                for i in pair.get("info", [])
                if i.get("base_n", 1) > 1 or i.get("test_n", 1) > 1 or "base_runs" in i
            ],
        ]:
            unit = f" {m['unit']}" if m.get("unit") else ""
            rows.append(
                [
                    point,
                    esc(m["metric"] + unit),
                    _median_iqr(m["base_median"], m["base_iqr"], m["base_n"]),
                    _median_iqr(m["test_median"], m["test_iqr"], m["test_n"]),
                    change_text(m),
                    fmt(m["p_value"], ".3g", none="—"),
                    m["verdict"] or "info",
                ]
            )
    return rows


def _ebpf_lines(test: JsonObject, verbose: bool = False, esc: Callable[[Any], str] = _plain) -> list[str]:
    """Per pair: the tracing note, skipped sections, then at most EBPF_DEFAULT_LINES measured
    values (summary figures first, then the largest changes); all of them with verbose.
    `esc` quotes input-file text."""
    lines = []
    for pair in test["pairs"]:
        ebpf = pair["ebpf"]
        where = esc(_point_name(pair))
        if ebpf.get("note"):
            lines.append(f"{where}: {esc(ebpf['note'])}")
        lines += [f"{where}: {esc(text)}" for text in ebpf.get("skipped", [])]
        rows = ebpf["rows"] if verbose else ebpf["rows"][:EBPF_DEFAULT_LINES]
        for row in rows:
            lines.append(
                f"{where}: {esc(row['section'] + '.' + row['key'])}: "
                f"{row['base']:.4g} → {row['test']:.4g} ({fmt(row['change_pct'], '+.1f', '%')})"
            )
        hidden = len(ebpf["rows"]) - len(rows)
        if hidden:
            lines.append(f"{where}: … {hidden} more eBPF values (--verbose shows all)")
    return lines


def rerun_hint(cmp: JsonObject) -> str:
    """What more runs would decide the inconclusive metrics, never a count both sides already
    have: the largest per-metric estimate (runs per side that narrow the CI to ±threshold), or
    the fewest runs per side that can reach p < α where a side has fewer; else no number."""
    floor = cmp["min_runs_to_detect"]
    sides: list[tuple[int, int]] = []
    estimates: list[int] = []
    minimums: list[int] = []
    unknown = False
    for m in (m for t in cmp["tests"] for p in t["pairs"] for m in p["metrics"]):
        if m["verdict"] != "inconclusive":
            continue
        sides.append((m["base_n"], m["test_n"]))
        if m.get("runs_needed"):
            estimates.append(m["runs_needed"])
        elif min(sides[-1]) < floor:
            minimums.append(floor)
        else:  # no CI, or over MAX_RUNS_ESTIMATE runs: no honest number
            unknown = True
    if not sides:
        return ""
    if unknown:
        return f"more runs per side are needed than the {max(map(max, sides))} now (no estimate)"
    n = max(estimates + minimums)
    why = (
        "estimated from the measured run-to-run spread"
        if estimates and n == max(estimates)
        else f"the fewest per side that can reach p < {cmp['alpha']:g}"
    )
    if all(b == t for b, t in sides):
        return f"rerun both sides with --repeats {n} ({why})"
    return f"rerun each side that has fewer than {n} runs with --repeats {n} ({why})"


def overall_line(cmp: JsonObject) -> str:
    """The one-line outcome, matching the exit code (1 on a regression, else 0)."""
    metrics = [m for t in cmp["tests"] for p in t["pairs"] for m in p["metrics"]]
    runs = sorted({n for t in cmp["tests"] for p in t["pairs"] for n in p.get("runs", [])})
    counted = f"runs per point: {', '.join(map(str, runs))}" if runs else ""
    if cmp["regression"]:
        n = sum(t["regressions"] for t in cmp["tests"])
        return (
            f"RESULT: {n} regressed metric(s) beyond {cmp['threshold_pct']:g}% and the "
            f"run-to-run noise ({counted})"
        )
    unsure = sum(1 for m in metrics if m["verdict"] == "inconclusive")
    if unsure:
        what = (
            "no metric could be told apart from run-to-run noise"
            if unsure == len(metrics)
            else f"{unsure} of {len(metrics)} metric(s) could not be decided, the others are "
            "unchanged or improved"
        )
        return f"RESULT: inconclusive — {what} ({counted}); {rerun_hint(cmp)}"
    return (
        f"RESULT: no regression beyond {cmp['threshold_pct']:g}% (every metric improved with "
        f"p < {cmp['alpha']:g}, or unchanged: its CI inside ±{cmp['threshold_pct']:g}%; {counted})"
    )


def render_console(cmp: JsonObject, console: Any, verbose: bool = False) -> None:
    """One table per test file, eBPF diffs, unpaired points and the outcome line."""
    from rich.table import Table

    if not console.is_terminal:
        console.width = max(console.width, 150)
    for test in cmp["tests"]:
        table = Table(title=f"{cmp['base']} → {test['file']}", title_justify="left")
        for i, header in enumerate(HEADERS):
            table.add_column(header, justify="left" if i < 2 or i == 6 else "right")
        for row in metric_rows(test):
            style = VERDICT_STYLE.get(row[-1], "")
            table.add_row(*row[:-1], f"[{style}]{row[-1]}[/{style}]" if style else row[-1])
        console.print(table)
        for pair in test["pairs"]:
            for m in pair["metrics"]:
                if m["verdict"] != "unchanged":
                    console.print(
                        f"  {pair['workload']} @ {pair['streams']} {m['metric']}: "
                        f"{m['verdict']}: {m['reason']}",
                        markup=False,
                    )
        lines = _ebpf_lines(test, verbose)
        if lines:
            console.print("\n[bold]eBPF[/bold]")
            for line in lines:
                console.print(f"  {line}", markup=False)
        for label, keys in (("only in base", test["only_in_base"]), ("only in test", test["only_in_test"])):
            if keys:
                console.print(f"  not compared ({label}): {', '.join(keys)}", markup=False)
    for note in cmp.get("notes", []):
        console.print(f"  note: {note}", markup=False)
    console.print(f"\n{overall_line(cmp)}")


def to_markdown(cmp: JsonObject, verbose: bool = False) -> str:
    """A Markdown summary for CI comments; every string from the input files is escaped."""
    out = [f"### aorta compare (threshold {cmp['threshold_pct']:g}%, α = {cmp['alpha']:g})", ""]
    for test in cmp["tests"]:
        out += [
            f"**{md_escape(cmp['base'])}** → **{md_escape(test['file'])}**",
            "",
            "| " + " | ".join(HEADERS) + " |",
            "|" + "---|" * len(HEADERS),
        ]
        for row in metric_rows(test, md_escape):
            if row[-1] == "regression":
                row[-1] = "**regression**"
            out.append("| " + " | ".join(row) + " |")
        lines = _ebpf_lines(test, verbose, md_escape)
        if lines:
            out += ["", "eBPF:", *[f"- {line}" for line in lines]]
        for label, keys in (("only in base", test["only_in_base"]), ("only in test", test["only_in_test"])):
            if keys:
                out.append(f"\nnot compared ({label}): {', '.join(md_escape(k) for k in keys)}")
        out.append("")
    for note in cmp.get("notes", []):
        out.append(f"note: {md_escape(note)}")
    out.append(overall_line(cmp))
    return "\n".join(out) + "\n"

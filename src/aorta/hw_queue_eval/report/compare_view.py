"""Comparison output: console tables (rich) and Markdown for CI comments, from compare's dict."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aorta.hw_queue_eval.report.console import fmt

_MD_SPECIAL = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character


def md_escape(value: Any) -> str:
    """Text from an input file as literal Markdown: every ASCII punctuation backslash-escaped
    (no headings, links, autolinks, HTML or table breaks), line breaks turned into spaces."""
    text = " ".join(str(value).splitlines())
    return _MD_SPECIAL.sub(r"\\\1", text)


def _plain(value: Any) -> str:
    return str(value)

VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "unchanged": "dim",
                 "inconclusive": "yellow"}
HEADERS = ["Point", "Metric", "Base median (IQR)", "Test median (IQR)", "Change", "p", "Verdict"]


def _median_iqr(median: Any, iqr: Any, n: Any) -> str:
    if median is None:
        return "n/a"
    return f"{median:.4g}" + (f" (IQR {iqr:.2g}, n={n})" if iqr is not None else "")


def _point_name(pair: dict[str, Any]) -> str:
    return f"{pair['workload']} @ {pair['streams']}" + \
        (f" [{pair['policy']}]" if pair.get("policy") else "")


def metric_rows(test: dict[str, Any], esc: Callable[[Any], str] = _plain) -> list[list[str]]:
    """Table rows (strings) of one test file's paired metrics; `esc` quotes input-file text."""
    rows = []
    for pair in test["pairs"]:
        point = esc(_point_name(pair))
        for m in pair["metrics"]:
            unit = f" {m['unit']}" if m.get("unit") else ""
            rows.append([point, esc(m["metric"] + unit),
                         _median_iqr(m["base_median"], m["base_iqr"], m["base_n"]),
                         _median_iqr(m["test_median"], m["test_iqr"], m["test_n"]),
                         fmt(m["change_pct"], "+.1f", "%"), fmt(m["p_value"], ".3g", none="—"),
                         m["verdict"]])
    return rows


def _ebpf_lines(test: dict[str, Any], esc: Callable[[Any], str] = _plain) -> list[str]:
    lines = []
    for pair in test["pairs"]:
        ebpf = pair["ebpf"]
        where = esc(f"{pair['workload']} @ {pair['streams']}")
        if ebpf.get("note"):
            lines.append(f"{where}: {esc(ebpf['note'])}")
        for row in ebpf["rows"]:
            lines.append(f"{where}: {esc(row['section'] + '.' + row['key'])}: "
                         f"{row['base']:.4g} → {row['test']:.4g} ({fmt(row['change_pct'], '+.1f', '%')})")
    return lines


def overall_line(cmp: dict[str, Any]) -> str:
    """The one-line outcome, matching the exit code."""
    if cmp["regression"]:
        n = sum(t["regressions"] for t in cmp["tests"])
        return f"RESULT: {n} regressed metric(s) beyond {cmp['threshold_pct']:g}% (p < {cmp['alpha']:g})"
    return f"RESULT: no regression beyond {cmp['threshold_pct']:g}% (p < {cmp['alpha']:g})"


def render_console(cmp: dict[str, Any], console: Any) -> None:
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
                    console.print(f"  {pair['workload']} @ {pair['streams']} {m['metric']}: "
                                  f"{m['reason']}", markup=False)
        lines = _ebpf_lines(test)
        if lines:
            console.print("\n[bold]eBPF[/bold]")
            for line in lines:
                console.print(f"  {line}", markup=False)
        for label, keys in (("only in base", test["only_in_base"]),
                            ("only in test", test["only_in_test"])):
            if keys:
                console.print(f"  not compared ({label}): {', '.join(keys)}", markup=False)
    for note in cmp.get("notes", []):
        console.print(f"  note: {note}", markup=False)
    console.print(f"\n{overall_line(cmp)}")


def to_markdown(cmp: dict[str, Any]) -> str:
    """A Markdown summary for CI comments; every string from the input files is escaped."""
    out = [f"### aorta compare (threshold {cmp['threshold_pct']:g}%, α = {cmp['alpha']:g})", ""]
    for test in cmp["tests"]:
        out += [f"**{md_escape(cmp['base'])}** → **{md_escape(test['file'])}**", "",
                "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        for row in metric_rows(test, md_escape):
            if row[-1] == "regression":
                row[-1] = "**regression**"
            out.append("| " + " | ".join(row) + " |")
        lines = _ebpf_lines(test, md_escape)
        if lines:
            out += ["", "eBPF:", *[f"- {line}" for line in lines]]
        for label, keys in (("only in base", test["only_in_base"]),
                            ("only in test", test["only_in_test"])):
            if keys:
                out.append(f"\nnot compared ({label}): {', '.join(md_escape(k) for k in keys)}")
        out.append("")
    for note in cmp.get("notes", []):
        out.append(f"note: {md_escape(note)}")
    out.append(overall_line(cmp))
    return "\n".join(out) + "\n"

"""`compare`: base vs test results with a Mann–Whitney U test per metric; exit 1 on regression."""

from __future__ import annotations

import json

import click

from aorta.common.atomicio import (
    atomic_write_json,
    check_output_path,
    check_replaceable,
)
from aorta.common.errors import ExitCode, UsageError
from aorta.hw_queue_eval.analysis.exact_u import ALPHA, MIN_RUNS_TO_DETECT


def register(group: click.Group) -> None:
    group.add_command(compare_command)


@click.command(
    "compare",
    help="Compare TEST results against BASE, point by point; exit 0 no regression found, "
    "1 regression, 2 bad input.\n\nRuns are the samples: give files made with --repeats "
    f"(≥ 3 runs per side for a verdict, {MIN_RUNS_TO_DETECT} per side to detect a change at "
    f"α = {ALPHA:g}). 'unchanged' needs the change's CI inside ±threshold; otherwise, and "
    "with one run per side, the verdict is 'inconclusive' (exit 0, the RESULT line says so).",
)
@click.option(
    "-b",
    "--baseline",
    "bases",
    required=True,
    multiple=True,
    help="Base result (run, sweep, policy-sweep, or the upstream tool's); repeat -b to pool "
    "several files as the repeats of their points.",
)
@click.option(
    "-t",
    "--test",
    "tests",
    required=True,
    multiple=True,
    help="Test result; repeat -t to compare several against the base (upstream files, one run "
    "per point, are pooled as repeats instead).",
)
@click.option(
    "--threshold",
    default="5",
    show_default=True,
    help="Minimum change (percent) that counts as a regression or improvement.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON on stdout.")
@click.option("--markdown", is_flag=True, help="Print a Markdown summary (for CI comments).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Also write the JSON here.")
@click.option(
    "--force", is_flag=True, help="Replace an -o file that is not a comparison (e.g. a sweep checkpoint)."
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Show every comparable eBPF value (default: at most 10 per point)."
)
def compare_command(
    bases: tuple[str, ...],
    tests: tuple[str, ...],
    threshold: str,
    as_json: bool,
    markdown: bool,
    output: str | None,
    force: bool,
    verbose: bool = False,
) -> None:
    """Compare TEST results against BASE (help: above); exit 1 on a regression."""
    from aorta.hw_queue_eval.analysis.compare import compare_files
    from aorta.hw_queue_eval.report.compare_view import render_console, to_markdown

    try:
        threshold_pct = float(threshold)
    except ValueError:
        raise UsageError(f"--threshold must be a percentage such as 5, got {threshold!r}") from None
    if not 0 < threshold_pct <= 1000:  # also refuses nan and inf
        raise UsageError(f"--threshold must be a percentage > 0 and at most 1000, got {threshold!r}")
    if as_json and markdown:
        raise UsageError("--json and --markdown both print on stdout: choose one")
    if output:
        check_output_path(output)
        check_replaceable(output, ("comparison",), force)
        if output in (*bases, *tests):
            raise UsageError(f"-o {output} is one of the input files: choose another path")
    cmp = compare_files(list(bases), list(tests), threshold_pct)
    if output:
        atomic_write_json(output, cmp)
    if as_json:
        click.echo(json.dumps(cmp, indent=2))
    elif markdown:
        click.echo(to_markdown(cmp, verbose), nl=False)
    else:
        from aorta.hw_queue_eval.report.console import make_console

        render_console(cmp, make_console(), verbose)
    if cmp["regression"]:
        raise click.exceptions.Exit(ExitCode.FAILED)

"""`report`: PNG plots and one self-contained HTML page for a run or sweep file (no torch)."""

from __future__ import annotations

from pathlib import Path

import click

from aorta.common.atomicio import check_output_dir


def register(group: click.Group) -> None:
    group.add_command(report_command)


@click.command("report")
@click.argument("result_file", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", "output_dir", help="Folder for the PNGs and index.html [default: <result>_report]."
)
def report_command(result_file: str, output_dir: str | None) -> None:
    """Plots (PNG) and one HTML page for RESULT_FILE (a run or a sweep)."""
    from aorta.hw_queue_eval.readers.load import load_result
    from aorta.hw_queue_eval.report.html import write_report

    out = check_output_dir(output_dir or f"{Path(result_file).with_suffix('')}_report", "report folder")
    data = load_result(result_file)  # validated against the schema, then upgraded
    written = write_report(data, out, result_file)
    for path in written:
        click.echo(f"wrote {path} ({path.stat().st_size} bytes)")
    click.echo(f"open {out / 'index.html'} in a browser")

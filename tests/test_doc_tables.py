"""Tables in the docs that restate the code: the workload catalogue against the registry and the
`run` flags table against `run --help`, so neither can drift from what the tool does."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from aorta.hw_queue_eval.cli import cli as cli_main
from aorta.hw_queue_eval.workloads.registry import list_workloads

DOCS = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `?(?P<name>[a-z_]+)`? \|(?P<rest>.*)\|$")
RANGE = re.compile(r"(\d+)–(\d+) \((\d+)\)")


def _table(page: Path, header: str) -> list[list[str]]:
    """The rows (cells stripped) of the table whose header line starts with `header`."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows


def _catalogue() -> dict[str, tuple[str, str, str]]:
    return {
        i.name: (i.category, f"{i.min_streams}–{i.max_streams} ({i.recommended_streams})", i.throughput_unit)
        for i in list_workloads()
    }


@pytest.mark.parametrize(
    ("page", "header", "columns"),
    [
        ("docs/running.md", "| workload | category |", (0, 1, 3, 4)),
        ("README.md", "| Workload | Category |", (0, 1, 2, 3)),
    ],
)
def test_workload_tables_list_the_registry(page: str, header: str, columns: tuple[int, ...]) -> None:
    rows = _table(DOCS / page, header)
    name, category, streams, unit = columns
    documented = {r[name]: (r[category], r[streams], r[unit]) for r in rows}
    assert len(documented) == len(rows), f"{page}: a workload is listed twice"
    assert documented == _catalogue(), f"{page}: the workload table differs from the registry"


def _documented_flags(page: Path, header: str) -> set[str]:
    flags: set[str] = set()
    for row in _table(page, header):
        flags.update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", row[0]))
    return flags


def _run_options() -> dict[str, click.Option]:
    run = cli_main.commands["run"]  # type: ignore[attr-defined]
    return {
        max(p.opts, key=len): p
        for p in run.params
        if isinstance(p, click.Option) and not p.hidden and "--help" not in p.opts
    }


def test_every_documented_run_flag_exists() -> None:
    documented = _documented_flags(DOCS / "docs/running.md", "| option |")
    options = {opt for p in _run_options().values() for opt in (*p.opts, *p.secondary_opts)}
    knobs = _documented_flags(DOCS / "docs/running.md", "| flag |")
    assert documented - options - knobs == set()


def test_every_run_flag_is_documented_in_a_table() -> None:
    """Each `run` option appears in the first cell of some docs table row (docs/*.md)."""
    cells: set[str] = set()
    for page in (DOCS / "docs").glob("*.md"):
        for line in page.read_text().splitlines():
            if line.startswith("| "):
                cells.update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line.split("|")[1]))
    missing = sorted(name for name, p in _run_options().items() if not set(p.opts) & cells)
    assert missing == []


def test_architecture_names_every_error_type_and_numbers_its_decisions_in_order() -> None:
    import inspect

    from aorta.common import errors

    page = (DOCS / "docs/architecture.md").read_text()
    classes = [n for n, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert [n for n in classes if f"`{n}`" not in page] == []
    decisions = page.split("## Decisions", 1)[1]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", decisions, re.M)]
    assert numbers == list(range(1, len(numbers) + 1))

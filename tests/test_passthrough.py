"""`run` options a sweep hands to every point (--ebpf-trace, --bpftrace, --state-dir …) are
declared once (`_options.passthrough_run_options`), not grafted from `run` at import: `sweep` and
`policy-sweep` list exactly those, as `run` declares them, after their own; `suite` has none."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from aorta.hw_queue_eval.cli import cli
from aorta.hw_queue_eval.commands import _options

#: what sweep and policy-sweep passed through when the grafting was replaced (it may grow)
RECORDED = ("--ebpf-trace", "--ebpf-memory-trace", "--ebpf-gpu-runtime", "--bpftrace", "--state-dir")
SRC = Path(__file__).resolve().parents[1] / "src" / "aorta"


def help_options(command: str) -> list[str]:
    """The long option names `command --help` lists, in its order (an option line starts with
    two spaces; wrapped help text is indented further)."""
    out = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert out.exit_code == 0, out.output
    return [m.group(2) for m in re.finditer(r"^  (-\w, )?(--[\w-]+)", out.output, re.MULTILINE)]


def long_name(param: click.Parameter) -> str:
    return next(o for o in param.opts if o.startswith("--"))


def run_passthrough() -> list[click.Parameter]:
    """`run`'s parameters named in PASSTHROUGH_FLAGS, in run's order."""
    return [p for p in cli.commands["run"].params if p.name in _options.PASSTHROUGH_FLAGS]


def test_the_passthrough_set_is_run_options_and_keeps_the_recorded_ones() -> None:
    names = [long_name(p) for p in run_passthrough()]
    assert len(names) == len(_options.PASSTHROUGH_FLAGS), "every PASSTHROUGH_FLAGS name is a run option"
    assert set(RECORDED) <= set(names), "no option that was passed through is dropped"


@pytest.mark.parametrize("command", ["sweep", "policy-sweep"])
def test_sweeps_list_the_passthrough_options_last_in_runs_order(command: str) -> None:
    expected = [long_name(p) for p in run_passthrough()]
    listed = help_options(command)
    assert listed[-len(expected) - 1 :] == [*expected, "--help"], listed
    own = listed[: -len(expected) - 1]
    assert not set(own) & set(expected), "each passthrough option listed once"


@pytest.mark.parametrize("command", ["sweep", "policy-sweep"])
def test_a_passthrough_option_is_declared_as_run_declares_it(command: str) -> None:
    """Same flags, help, default, metavar and check (--bpftrace's and --state-dir's callbacks)."""
    mine = {p.name: p for p in cli.commands[command].params if p.name in _options.PASSTHROUGH_FLAGS}
    assert list(mine) == [p.name for p in run_passthrough()]
    for theirs in run_passthrough():
        ours = mine[theirs.name]
        assert isinstance(ours, click.Option) and isinstance(theirs, click.Option)
        assert (ours.opts, ours.secondary_opts, ours.is_flag, ours.default, ours.metavar, ours.help) == (
            theirs.opts,
            theirs.secondary_opts,
            theirs.is_flag,
            theirs.default,
            theirs.metavar,
            theirs.help,
        )
        assert ours.callback is theirs.callback


@pytest.mark.parametrize("command", ["suite", "run-priority"])
def test_suite_passes_none_of_them(command: str) -> None:
    assert not set(help_options(command)) & {long_name(p) for p in run_passthrough()}
    assert "--streams" in help_options(command), "the parser sees the options at all"


def test_a_passthrough_name_run_does_not_declare_fails_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing a flag `run` lacks is a mistake said at once, not an option silently missing."""
    monkeypatch.setattr(_options, "PASSTHROUGH_FLAGS", (*_options.PASSTHROUGH_FLAGS, "no_such_flag"))
    with pytest.raises(ValueError, match="no_such_flag"):
        _options.passthrough_run_options(lambda **kw: None)


def test_a_new_passthrough_flag_needs_only_the_two_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """An eBPF flag added to TRACING_FLAGS and PASSTHROUGH_FLAGS reaches a sweep-like command."""
    flag = ("--ebpf-extra", "ebpf_extra", "An extra eBPF view.")
    monkeypatch.setattr(_options, "TRACING_FLAGS", [*_options.TRACING_FLAGS, flag])
    monkeypatch.setattr(_options, "PASSTHROUGH_FLAGS", (*_options.PASSTHROUGH_FLAGS, "ebpf_extra"))
    command = click.command("x")(_options.passthrough_run_options(lambda **kw: None))
    names = [p.name for p in command.params]
    assert len(names) == len(_options.PASSTHROUGH_FLAGS) and names[-4:] == [
        "ebpf_extra",
        "ebpf_gpu_runtime_views",
        "bpftrace",
        "state_dir",
    ]


def test_no_command_grafts_parameters_at_import() -> None:
    grafts = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.params\.(append|insert|extend)\(", line)
    ]
    assert grafts == []

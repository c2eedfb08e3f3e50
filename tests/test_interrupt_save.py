"""The one ending of a checkpointing command stopped by Ctrl+C or SIGTERM (sweep, policy-sweep,
suite): `saved_on_interrupt` saves the file in the right state, prints the command's line and
exits 130 or 143; anything else passes through untouched."""

from __future__ import annotations

from typing import Any

import pytest

from aorta.common.errors import ExitCode, Interrupted, Terminated
from aorta.hw_queue_eval.commands._output import saved_on_interrupt


class Recorder:
    """save/message callbacks that record what they were given, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def save(self, state: str) -> None:
        self.calls.append(("save", state))

    def message(self, state: str) -> str:
        self.calls.append(("message", state))
        return f"\n{state}: {sum(1 for c in self.calls if c[0] == 'save')} saved"


@pytest.mark.parametrize(
    ("raised", "state", "ending", "code"),
    [
        (KeyboardInterrupt(), "interrupted", Interrupted, ExitCode.INTERRUPTED),
        (Terminated(), "terminated", Terminated, ExitCode.TERMINATED),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_saves_then_tells_then_exits(
    raised: BaseException, state: str, ending: type, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder()
    with pytest.raises(ending) as caught, saved_on_interrupt(rec.save, rec.message):
        raise raised
    assert rec.calls == [("save", state), ("message", state)], "saved once, the message built after"
    assert type(caught.value) is ending and caught.value.code == code
    assert caught.value.__suppress_context__, "no chained traceback of the signal"
    captured = capsys.readouterr()
    assert captured.err == f"\n{state}: 1 saved\n" and captured.out == ""


def test_exit_codes_are_the_documented_ones() -> None:
    assert (int(ExitCode.INTERRUPTED), int(ExitCode.TERMINATED)) == (130, 143)


@pytest.mark.parametrize(
    "raised",
    [ValueError("bad"), SystemExit(2), Interrupted()],
    ids=["error", "exit", "already-interrupted"],
)
def test_anything_else_passes_through_unsaved(
    raised: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder()
    with pytest.raises(type(raised)) as caught, saved_on_interrupt(rec.save, rec.message):
        raise raised
    assert caught.value is raised
    assert rec.calls == [] and capsys.readouterr().err == ""


def test_a_block_that_ends_saves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    result: list[Any] = []
    with saved_on_interrupt(rec.save, rec.message):
        result.append("done")
    assert result == ["done"] and rec.calls == [] and capsys.readouterr().err == ""


def test_a_failing_save_is_not_hidden_behind_the_signal() -> None:
    """A disk-full save while stopping ends with its own error (a WriteError names where the
    file is kept), not with a 130 that claims the points were kept."""

    def save(state: str) -> None:
        raise OSError("no space left")

    with pytest.raises(OSError, match="no space left"), saved_on_interrupt(save, lambda s: s):
        raise KeyboardInterrupt

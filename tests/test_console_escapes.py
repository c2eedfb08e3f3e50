"""Terminal escape sequences in input files never reach the terminal (issue 21, item 4).

A result file's `workload_name` / `throughput_unit`, a lock file planted beside an output: their
control characters are printed written out (`\\x1b`), never raw (common/controls.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

from aorta.common.controls import visible
from conftest import FIXTURES, cli_command, run_cli_inprocess

#: clear screen, retitle the window (OSC … BEL), red background, an 8-bit CSI (C1)
PAYLOAD = "\x1b[2J\x1b]0;pwned\x07\x1b[41m\x9b31m"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture
def evil_result(tmp_path: Path) -> Path:
    """A run result whose workload name and throughput unit carry escape sequences."""
    data = json.loads((FIXTURES / "results" / "run.json").read_text())
    data["workload_name"] += PAYLOAD
    data["throughput_unit"] += PAYLOAD
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    return path


def assert_no_controls(*texts: str) -> None:
    for text in texts:
        assert CONTROLS.search(text) is None, repr(text[:400])


def test_visible_writes_out_every_control_but_tab_and_newline():
    assert visible("a\tb\nc\x1b[2J\x07\x7f\x9b\x00") == "a\tb\nc\\x1b[2J\\x07\\x7f\\x9b\\x00"
    assert visible("µ → ✓") == "µ → ✓"


@pytest.mark.parametrize(
    "argv",
    [
        ("compare", "-b", "{f}", "-t", "{f}"),
        ("compare", "--markdown", "-b", "{f}", "-t", "{f}"),
        ("report", "{f}", "-o", "{d}/rep"),
    ],
    ids=["compare", "compare --markdown", "report"],
)
def test_escape_sequences_in_a_result_file_are_shown_not_sent(evil_result, tmp_path, argv):
    proc = run_cli_inprocess(*(a.format(f=evil_result, d=tmp_path) for a in argv))
    assert proc.returncode == 0, proc.stderr
    assert_no_controls(proc.stdout, proc.stderr)
    if argv[0] == "compare":
        assert "pwned\\x07" in proc.stdout.replace("\\\\", "\\")  # shown (Markdown escapes \ too)


def test_a_planted_lock_file_text_is_shown_not_sent(tmp_path):
    out = tmp_path / "s.json"
    lock = tmp_path / ".s.json.lock"
    lock.write_text(f"pid 1 {PAYLOAD}\n")
    with open(lock) as held:  # its planter holds it: the run names the holder from its text
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = run_cli_inprocess("sweep", "hetero_kernels", "--streams", "1", "-d", "cpu", "-o", str(out))
    assert proc.returncode == 2
    assert "in use by pid 1 " in proc.stderr and "\\x1b]0;pwned\\x07" in proc.stderr
    assert_no_controls(proc.stderr)


def test_compare_on_a_terminal_sends_no_escape_from_the_file(evil_result):
    """On a real terminal (a pty) rich styles its own text; the file's sequences stay written out."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*cli_command(), "compare", "-b", str(evil_result), "-t", str(evil_result)],
        stdout=follower,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"},
    )
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, seen[-2000:]
    assert b"\x1b[" in seen, "rich styles its own output on a terminal (the check is live)"
    for raw in (b"\x1b[2J", b"\x1b]0;", b"\x07", "\x9b".encode(), b"\x1b[41m"):
        assert raw not in seen, raw
    assert b"pwned\\x07" in seen


@pytest.mark.parametrize(
    "name",
    ["x[/bold]", "[link=https://example.invalid]click[/link]", "a[bold]b", "[/]", "[red]r[/red]"],
)
def test_markup_in_a_result_file_is_text_not_style(tmp_path, name):
    """Rich markup from a file neither crashes the table (unmatched tags) nor styles or links."""
    data = json.loads((FIXTURES / "results" / "run.json").read_text())
    data["workload_name"] = name
    path = tmp_path / "markup.json"
    path.write_text(json.dumps(data))
    proc = run_cli_inprocess("compare", "-b", str(path), "-t", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert name in proc.stdout  # printed as the file wrote it


def test_own_markup_still_styles_and_file_brackets_never_do():
    from rich.console import Console

    from aorta.hw_queue_eval.report.console import own_markup_only

    console = Console(force_terminal=True, color_system="standard", width=200, highlight=False)
    with console.capture() as cap:
        console.print(own_markup_only("[bold]TITLE[/bold] [link=https://e.invalid]x[/link] [0, 1]"))
    out = cap.get()
    assert "\x1b[1mTITLE" in out  # our bold
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink from the file's tag
    assert "[link=https://e.invalid]x[/link] [0, 1]" in out
    assert own_markup_only("[dim]a[/bold]b[/dim]") == "\\[dim]a\\[/bold]b\\[/dim]"

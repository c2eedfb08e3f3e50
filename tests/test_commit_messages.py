"""Commit messages from this rule's start on: a subject of at most 72 characters that says what,
and a body that says why (CONTRIBUTING.md). Earlier history is left as it landed.

The start is a commit date, not a hash: history that did not land is committed again under new
hashes, and a shallow clone (CI's may be one) holds no old hash to count from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import unavailable

REPO = Path(__file__).resolve().parents[1]
RULE_STARTS = "2026-12-02T18:00:00Z"  # commits dated from here on are held to the rule
MAX_SUBJECT = 72


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)


def message_problems(messages: list[tuple[str, str, bool]]) -> list[str]:
    """(hash, full message, is a merge) → one line per commit that breaks the rule."""
    found = []
    for commit, message, merge in messages:
        subject, _, rest = message.strip().partition("\n")
        if len(subject) > MAX_SUBJECT:
            found.append(f"{commit}: subject of {len(subject)} characters (at most {MAX_SUBJECT})")
        if not merge and not rest.strip():
            found.append(f"{commit}: no body saying why")
    return found


def test_commits_since_the_rule_have_short_subjects_and_a_body() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        unavailable("not a git checkout: no history to check", "CI runs on a clone: .git must be there")
    log = _git("log", "--format=%h%x00%P%x00%B%x1e", f"--since={RULE_STARTS}", "HEAD")
    assert log.returncode == 0, log.stderr
    messages = []
    for record in log.stdout.split("\x1e"):
        if record.strip():
            commit, parents, body = record.strip("\n").split("\x00", 2)
            messages.append((commit, body, len(parents.split()) > 1))
    assert message_problems(messages) == []


def test_the_rule_catches_a_long_subject_and_a_missing_body() -> None:
    ok = ("a1", "run: say why\n\nBecause.", False)
    assert message_problems([ok, ("m1", "Merge branch 'wt/x'", True)]) == []
    assert message_problems([("b1", "x" * 73 + "\n\nwhy", False)]) == [
        "b1: subject of 73 characters (at most 72)"
    ]
    assert message_problems([("c1", "fix\n", False)]) == ["c1: no body saying why"]

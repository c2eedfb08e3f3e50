"""The docs match the tool: every command line in README.md and docs/*.md names a real command and
real options, every relative link resolves, every message the code can print is explained in
docs/troubleshooting.md, and the runnable examples run (issue 15, section 4)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from doc_messages import collect

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *DOCS]
PROGRAMS = ("python -m aorta.hw_queue_eval", "python3 -m aorta.hw_queue_eval", "aorta-hwq")
FENCE_RE = re.compile(r"^```(bash|sh|shell|console)\s*\n(.*?)^```", re.M | re.S)
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _commands(text: str) -> list[str]:
    """aorta invocations in the page's shell blocks: continuation lines joined, comments dropped."""
    out = []
    for _, block in FENCE_RE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s#\s.*$", "", line).strip()
            line = re.sub(r"\$\([^)]*\)", "X", line)  # $(pgrep …) is another program's options
            for part in re.split(r"\s(?:&&|\|\||;|\|)\s", line):
                for prog in PROGRAMS:
                    idx = part.find(prog)
                    if idx >= 0:
                        out.append(part[idx + len(prog) :].strip())
                        break
    return out


def _cli() -> click.Group:
    from aorta.hw_queue_eval.cli import cli

    return cli


def _options(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        names.update(getattr(param, "opts", []))
        names.update(getattr(param, "secondary_opts", []))
    return names


ALL_COMMANDS = [
    (page.relative_to(REPO).as_posix(), cmd)
    for page in PAGES
    for cmd in _commands(page.read_text(encoding="utf-8"))
]


def test_the_docs_have_commands_to_check() -> None:
    pages = {page for page, _ in ALL_COMMANDS}
    assert {"README.md", "docs/guide.md", "docs/running.md", "docs/docker.md"} <= pages
    assert len(ALL_COMMANDS) >= 40


@pytest.mark.parametrize(("page", "command"), ALL_COMMANDS)
def test_every_documented_command_line_parses(page: str, command: str) -> None:
    group = _cli()
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    if not tokens or tokens[0] in ("--version", "--help", "-h"):
        return
    sub = group.commands.get(tokens[0])
    assert sub is not None, f"{page}: `{command}`: no command {tokens[0]!r}"
    known = _options(sub)
    for token in tokens[1:]:
        for piece in re.split(r"[\[\]|]", token):
            flag = piece.split("=", 1)[0].rstrip(",.:")
            if re.fullmatch(r"--?[A-Za-z][\w-]*", flag):
                assert flag in known, f"{page}: `{command}`: {tokens[0]} has no option {flag}"


@pytest.mark.slow
def test_documented_commands_run_help_cleanly() -> None:
    """--help-level: each documented subcommand's --help exits 0 (its options build and render)."""
    group = _cli()
    names = sorted({shlex.split(c)[0] for _, c in ALL_COMMANDS if c and not c.startswith("-")})
    for name in names:
        proc = subprocess.run(
            [sys.executable, "-m", "aorta.hw_queue_eval", name, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, (name, proc.stderr)
        assert name in group.commands, (name, proc.stderr)


#: where a path named in CONTRIBUTING.md may be relative to (the repo, the package, the tool)
PATH_ROOTS = (REPO, REPO / "src" / "aorta", REPO / "src" / "aorta" / "hw_queue_eval")
PATH_RE = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|md|json|toml|sh))`")


def test_paths_named_in_contributing_exist() -> None:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    named = set(PATH_RE.findall(text))
    assert len(named) >= 10, named
    missing = sorted(p for p in named if not any((root / p).exists() for root in PATH_ROOTS))
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # links in code are not links
    for target in LINK_RE.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{page.relative_to(REPO)}: link {target} does not resolve"


@pytest.mark.slow
def test_every_message_is_in_troubleshooting() -> None:
    page = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    messages = collect()
    assert len(messages) >= 100  # the collector still finds the code's messages
    missing = [m for m in messages if m.key not in page]
    rows = "\n".join(f"| {m.text.replace('{}', '…')} | … | … |   <- {m.file}:{m.line}" for m in missing)
    assert not missing, f"docs/troubleshooting.md lacks {len(missing)} message(s); add rows:\n{rows}"


def test_the_collector_sees_a_new_message(tmp_path: Path) -> None:
    pkg = tmp_path / "aorta"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        "from aorta.common.errors import UsageError\n"
        "def f(x):\n    raise UsageError(f'frobnicator {x} is sideways: turn it upright')\n"
        "def g():\n    print('warning: the flux capacitor is warm')\n"
    )
    keys = {m.key for m in collect(pkg)}
    assert keys == {"is sideways: turn it upright", "warning: the flux capacitor is warm"}


@pytest.mark.slow
@pytest.mark.ebpf
def test_ebpf_integration_example_runs(ebpf_ready: None) -> None:
    import json

    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "ebpf_api.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "ok"
    assert summary["lost_events"] == 0
    # ground truth: the example's own count of doorbell writes (4 workers x 50 rings, each taken
    # before the next): eBPF must see every write as one submission of its queue, and its read
    writes = summary["doorbell_writes"]
    assert writes == 200
    assert summary["rings_taken"] == writes
    assert summary["ebpf_submissions"] == writes
    assert summary["ebpf_submissions_per_queue"] == {str(q): 50 for q in range(4)}
    assert summary["ebpf_dispatches"] == writes
    assert summary["unconsumed_doorbells"] == 0
    assert summary["submit_to_dispatch_avg_us"] > 0
    assert 0 < summary["window_ms"] <= 30_000


DETECT_RE = re.compile(r"(\d+) per side to detect a change at α = ([0-9.]+)")


def test_the_runs_needed_to_detect_a_change_match_the_exact_u_distribution() -> None:
    """README, docs and console texts state the fewest runs per side that can reach p < α; the
    number comes from `exact_u.min_runs_for_alpha` (4 at 0.05), never a literal that drifts."""
    from aorta.hw_queue_eval.analysis.exact_u import min_runs_for_alpha

    texts = {
        page.relative_to(REPO).as_posix(): " ".join(page.read_text(encoding="utf-8").split())
        for page in PAGES
    }
    texts.pop("CHANGELOG.md")  # history: what was true then
    cli = _cli()
    for name in ("run", "compare"):
        with click.Context(cli.commands[name]) as ctx:
            texts[f"{name} --help"] = " ".join(cli.commands[name].get_help(ctx).split())
    found = {where: DETECT_RE.findall(text) for where, text in texts.items()}
    for where in ("README.md", "docs/sweep-compare-report.md", "run --help", "compare --help"):
        assert found[where], f"{where} does not state the runs per side to detect a change"
    for where, claims in found.items():
        for runs, alpha in claims:
            assert int(runs) == min_runs_for_alpha(float(alpha)), f"{where}: {runs} per side at α = {alpha}"
    for where, text in texts.items():
        assert "5 to detect a change" not in text, where

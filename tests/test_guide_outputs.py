"""docs/guide.md's output blocks are what the current code prints (issue 20): each marked block,
numbers and column padding aside, equals the lines scripts/guide_outputs.py generates from the
recorded runs in tests/fixtures/guide/ with today's renderers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import load_file_module

REPO = Path(__file__).resolve().parents[1]
BLOCKS = {"ebpf-info", "ebpf-info-dkms", "run-baseline", "run-memory", "compare"}


def _script():
    return load_file_module(REPO / "scripts" / "guide_outputs.py")


guide_outputs = _script()


def shape(line: str) -> str:
    """A line's structure: numbers become #, runs of spaces and of table rules one character."""
    line = re.sub(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", line)
    line = re.sub(r"([━─═=])\1+", r"\1", line)
    return re.sub(r" +", " ", line).rstrip()


def mismatches(guide_text: str, generated: dict[str, list[str]]) -> list[str]:
    """Each guide block line whose structure differs from the generated block's (one per block)."""
    found = []
    for name, lines in guide_outputs.guide_blocks(guide_text).items():
        want = generated[name]
        for i, (have, made) in enumerate(zip(lines, want, strict=False)):
            if shape(have) != shape(made):
                found.append(f"{name} line {i + 1}: guide {have!r}, code prints {made!r}")
                break
        else:
            if len(lines) != len(want):
                found.append(f"{name}: guide has {len(lines)} lines, code prints {len(want)}")
    return found


@pytest.fixture(scope="module")
def generated() -> dict[str, list[str]]:
    return guide_outputs.excerpts()


def test_every_output_block_is_marked_and_matches_the_code(generated) -> None:
    text = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    assert set(guide_outputs.guide_blocks(text)) == BLOCKS == set(generated)
    problems = mismatches(text, generated)
    assert not problems, "run scripts/guide_outputs.py to rewrite docs/guide.md:\n" + "\n".join(problems)


def test_a_line_the_code_no_longer_prints_is_caught(generated) -> None:
    """The old guide's stale lines (a cross-check line, the iterations-as-samples compare table)
    fail the check; the same block with other numbers passes."""
    text = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    stale = text.replace(
        "  Lost events:          0\n  …\n  • submit",
        "  Lost events:          0\n  cross-check: eBPF run-queue total 1009.88 ms vs the kernel's "
        "schedstat run delay 1015.03 ms (99%)\n  …\n  • submit",
        1,
    )
    assert stale != text
    assert [p.split(":")[0] for p in mismatches(stale, generated)] == ["run-baseline line 8"]
    old_compare = text.replace("(runs)", "(IQR)", 1)  # "Base median (IQR) … n=20": iterations as samples
    assert mismatches(old_compare, generated)
    renumbered = re.sub(r"Total submissions: +\d+", "Total submissions:    12345", text)
    assert mismatches(renumbered, generated) == []


def test_the_recorded_runs_are_the_guides_commands_and_current_results() -> None:
    """The fixtures are valid results today (load_result validates the schema) of the command
    the guide shows, traced (the eBPF sections ok)."""
    from aorta.hw_queue_eval.readers.load import load_result

    for name, memory in (("results_baseline.json", False), ("results.json", True)):
        result = load_result(str(guide_outputs.FIXTURES / name))
        assert (result["workload_name"], result["stream_count"]) == ("hetero_kernels", 8)
        assert result["ebpf_queue_metrics"]["status"] == "ok"
        assert (result.get("ebpf_memory_metrics") or {}).get("status") == ("ok" if memory else None)


@pytest.mark.ebpf
@pytest.mark.slow
def test_a_new_recording_gives_blocks_of_the_same_structure(tmp_path, ebpf_ready) -> None:
    """The script's real runs work today and their blocks open with the guide's lines (the
    value-dependent lines below, e.g. interpretation bullets, may differ from run to run)."""
    guide_outputs.record(tmp_path)
    fresh = guide_outputs.excerpts(tmp_path)
    text = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    for name, lines in guide_outputs.guide_blocks(text).items():
        assert [shape(s) for s in fresh[name][:4]] == [shape(s) for s in lines[:4]], name

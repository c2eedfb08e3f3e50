"""bench/cpu_run_cv.py: runs two code states interleaved and prints what the issue asks for
(runs, mean, CV, verdict, load at start and end); bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "cpu_run_cv.py"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--against", "no-such-ref-anywhere"),
        ("--against", "-x"),
        ("--rounds", "1"),
        ("--json", "/no/such/folder/x.json"),
        ("--configs", "no_such_workload@8"),
        ("--configs", "hetero_kernels@0"),
        ("--configs", "hetero_kernels"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...]) -> None:
    proc = _bench(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1].count("error") == 1


def test_default_configurations_and_the_configs_option() -> None:
    """Without --configs the bench runs its two published configurations (docs/sweep-compare-report.md);
    the option replaces them, in order, without duplicates."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        import cpu_run_cv
    finally:
        sys.path.remove(str(BENCH.parent))
    assert cpu_run_cv.CONFIGS == (("hetero_kernels", 8), ("tiny_kernel_stress", 16))
    assert cpu_run_cv.parse_configs("tiny_kernel_stress@16, hetero_kernels@2,tiny_kernel_stress@16") == (
        ("tiny_kernel_stress", 16),
        ("hetero_kernels", 2),
    )


@pytest.mark.slow
def test_two_code_states_side_by_side(tmp_path: Path) -> None:
    """One configuration (the default two are checked above) keeps it to six fresh processes:
    2 rounds × (this tree, HEAD, the control)."""
    head = subprocess.run(
        ["git", "-C", str(BENCH.parent), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout: --against needs one")
    out = tmp_path / "cv.json"
    proc = _bench(
        "--rounds",
        "2",
        "--iterations",
        "2",
        "--warmup",
        "1",
        "--against",
        "HEAD",
        "--configs",
        "hetero_kernels@8",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    rows = {(r["configuration"], r["code"]): r for r in data["results"]}
    assert set(rows) == {("hetero_kernels @ 8", s) for s in ("this tree", "HEAD")} | {
        ("control: torch.mm, no aorta", "—")  # the machine's noise floor, once per round
    }
    for row in rows.values():
        assert row["runs"] == len(row["throughputs"]) == 2
        assert row["mean"] == pytest.approx(sum(row["throughputs"]) / 2)
        assert row["verdict"].startswith(("meets target", "above target"))
    assert set(data["paired"]) == {"hetero_kernels @ 8"}
    assert len(data["load_start"]) == len(data["load_end"]) == 3
    for text in ("load at start:", "load at end:", "verdict (CV ≤ 5 %)", "paired by round"):
        assert text in proc.stdout

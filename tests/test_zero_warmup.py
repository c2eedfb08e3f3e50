"""`-w 0`: accepted, the window starts cold, and verification checks a measured iteration after it."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import load_json, run_cli_inprocess


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Wrap hetero_kernels so each verify() records how many iterations had run before it."""
    from aorta.hw_queue_eval.workloads import registry

    base = registry._WORKLOADS["hetero_kernels"]
    seen: dict[str, Any] = {"iterations": 0, "verified_after": []}

    class Counting(base):  # type: ignore[misc, valid-type]
        def run_iteration(self, streams: list[Any]) -> None:
            super().run_iteration(streams)
            seen["iterations"] += 1

        def verify(self) -> Any:
            seen["verified_after"].append(seen["iterations"])
            return super().verify()

    monkeypatch.setitem(registry._WORKLOADS, "hetero_kernels", Counting)
    return seen


@pytest.mark.parametrize(
    ("warmup", "verified_after", "outputs_of"),
    [(0, 3, "measured iteration 3"), (2, 1, "warm-up iteration 1")],
)
def test_verification_checks_an_iteration_that_ran(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, warmup: int, verified_after: int, outputs_of: str
) -> None:
    seen = _counting(monkeypatch)
    out = tmp_path / "r.json"
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "-s", "2", "-i", "3", "-w", str(warmup), "-d", "cpu", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    assert result["config"]["warmup"] == warmup
    # ground truth: -w 0 verified after every measured iteration ran (there is no warm-up one)
    assert seen["verified_after"] == [verified_after]
    assert seen["iterations"] == warmup + 3
    assert result["verification"]["passed"] is True
    assert result["verification"]["outputs_of"].startswith(outputs_of)
    assert len(result["iteration_times_ms"]) == 3
    # compare/report read it back: the schema must take warmup 0 (it said minimum 1)
    from aorta.hw_queue_eval.results.validation import check_input

    check_input(out, result)


def test_negative_warmup_is_still_refused() -> None:
    proc = run_cli_inprocess("run", "hetero_kernels", "-s", "2", "-w", "-1", "-d", "cpu")
    assert proc.returncode == 2
    assert "--warmup must be ≥ 0, got -1" in proc.stderr

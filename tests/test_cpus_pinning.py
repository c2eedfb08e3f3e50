"""`--cpus LIST`: parsed up front, host and queue workers pinned as documented, recorded, passed on."""

from __future__ import annotations

import os
from typing import Any

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.run.cpupin import format_cpu_list, parse_cpu_list, plan
from conftest import load_json, run_cli_inprocess


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0", (0,)), ("0,1", (0, 1)), ("1,0", (1, 0)), ("0-3", (0, 1, 2, 3)), ("0-1, 3", (0, 1, 3))],
)
def test_cpu_lists_and_ranges(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpu_list(text, allowed={0, 1, 2, 3}) == cpus
    assert parse_cpu_list(format_cpu_list(cpus), allowed={0, 1, 2, 3}) == cpus  # what children get


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,7", "CPU 7 is not one this process may run on (0-3,5"),
        ("a", "'a' is not a CPU number or a range"),
        ("-1", "'-1' is not a CPU number"),
        ("2-1", "runs backwards: write 1-2"),
        ("0,,1", "item 2 is empty"),
        ("1,0-2", "CPU 1 is listed twice"),
        ("", "item 1 is empty"),
    ],
)
def test_bad_cpu_lists_name_the_item(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=None) as err:
        parse_cpu_list(text, allowed={0, 1, 2, 3, 5})
    assert message in str(err.value)


def test_mapping_host_first_then_queues_round_robin() -> None:
    assert plan([0, 1], 4) == (0, [1, 0, 1, 0])
    assert plan([3], 2) == (3, [3, 3])
    assert plan([2, 0, 1], 3) == (2, [0, 1, 2])


def test_run_pins_records_and_restores(tmp_path: Any) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1]
    out = tmp_path / "r.json"
    proc = run_cli_inprocess(
        "run",
        "hetero_kernels",
        "-s",
        "3",
        "-i",
        "2",
        "-w",
        "1",
        "-d",
        "cpu",
        "--cpus",
        str(cpu),
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    pinned = result["environment"]["cpus_pinned"]
    # read back from each thread's own mask: the host and every queue worker on that one CPU
    assert pinned["cpus"] == [cpu]
    assert pinned["host"] == [cpu]
    assert pinned["queues"] and all(mask == [cpu] for mask in pinned["queues"])
    assert result["config"]["cpus"] == [cpu]
    assert sorted(os.sched_getaffinity(0)) == allowed  # the host thread's mask is given back
    from aorta.hw_queue_eval.results.validation import check_input

    check_input(out, result)


def test_unpinned_run_records_null(tmp_path: Any) -> None:
    out = tmp_path / "r.json"
    proc = run_cli_inprocess(
        "run", "hetero_kernels", "-s", "2", "-i", "2", "-w", "1", "-d", "cpu", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert load_json(out)["environment"]["cpus_pinned"] is None


def test_bad_list_is_refused_in_one_line() -> None:
    proc = run_cli_inprocess("run", "hetero_kernels", "-s", "2", "-d", "cpu", "--cpus", "0,4096")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "CPU 4096 is not one this process may run on" in proc.stderr


def test_children_get_the_list() -> None:
    from aorta.hw_queue_eval.config.run_config import RunConfig
    from aorta.hw_queue_eval.sweeps.policy_sweep import child_run_args

    args = child_run_args(RunConfig("hetero_kernels", 2, device="cpu", cpus=(1, 0)))
    assert args[args.index("--cpus") + 1] == "1,0"  # policy-sweep points and run --repeats
    assert "--cpus" not in child_run_args(RunConfig("hetero_kernels", 2, device="cpu"))


def test_sweep_points_get_the_list(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's run_options carry --cpus to every point (and only when given: old fingerprints hold)."""
    from aorta.hw_queue_eval.sweeps import stream_sweep

    seen: list[Any] = []

    def capture(*args: Any, **kwargs: Any) -> Any:
        seen.append((args, kwargs))
        raise SystemExit(0)

    monkeypatch.setattr(stream_sweep, "run_sweep", capture)
    proc = run_cli_inprocess(
        "sweep",
        "hetero_kernels",
        "-s",
        "1,2",
        "-i",
        "1",
        "-w",
        "0",
        "-d",
        "cpu",
        "--cpus",
        "0",
        "-o",
        str(tmp_path / "s.json"),
    )
    assert proc.returncode == 0, proc.stderr
    spec = next(a for a in seen[0][0] if isinstance(a, stream_sweep.SweepSpec))
    args = spec.child_args(2)
    assert args[args.index("--cpus") + 1] == "0"

"""collective_bound's figure: a rank's wait inside collectives for a later peer (torchrun).

Checked against a hand-made case, against an independent recomputation on two recorded torchrun
runs (unmodified, and rank 1 late by 3 ms before every all-reduce), and for its threshold
separating the two. The injected case through a real sweep is bench/diagnosis_confusion.py's
`collective` case (tests/test_diagnosis_confusion.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from aorta.hw_queue_eval.analysis.diagnosis import PEER_WAIT_SHARE_MIN, diagnose_point, peer_wait_share

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "torchrun"
COLUMNS = ["iteration", "stream", "queue", "label", "ready_us", "start_us", "end_us"]


def _rank(rank: int, origin_ns: int, rows: list[tuple[str, float, float]]) -> dict[str, Any]:
    labels = sorted({label for label, _, _ in rows})
    return {
        "distributed": {"rank": rank},
        "metadata": {"window_start_monotonic_ns": origin_ns},
        "op_intervals": {
            "columns": COLUMNS,
            "labels": labels,
            "rows": [[0, 0, 0, labels.index(lb), a, a, b] for lb, a, b in rows],
        },
    }


def _run(*ranks: dict[str, Any]) -> dict[str, Any]:
    return {"stream_count": 2, "distributed": {"rank_results": list(ranks)}}


def test_a_late_peer_is_waited_for_inside_the_collective_by_hand() -> None:
    # rank 1's window starts 50 µs after rank 0's; its all_reduce starts at 250 µs (absolute),
    # rank 0's at 100 µs: rank 0 waits 150 µs of its 400 µs busy time; rank 1 waits for nobody
    early = _rank(0, 1_000_000, [("gemm", 0.0, 100.0), ("all_reduce", 100.0, 400.0)])
    late = _rank(1, 1_050_000, [("gemm", 0.0, 200.0), ("all_reduce", 200.0, 350.0)])
    assert peer_wait_share(_run(early, late)) == (pytest.approx(150 / 400), 1, None)
    # a wait is at most the op's own duration (the op ended: the rest was not in it)
    short = _rank(0, 1_000_000, [("gemm", 0.0, 100.0), ("all_reduce", 100.0, 120.0)])
    assert peer_wait_share(_run(short, late))[0] == pytest.approx(20 / 120)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda run: run["distributed"]["rank_results"].pop(), "not a torchrun run with 2 or more ranks"),
        (lambda run: run["distributed"]["rank_results"][1]["metadata"].clear(), "window start"),
        (lambda run: run["distributed"]["rank_results"][0].pop("op_intervals"), "no op rows"),
    ],
)
def test_what_it_cannot_measure_is_null_with_a_reason(change: Any, reason: str) -> None:
    run = _run(
        _rank(0, 0, [("all_reduce", 0.0, 10.0)]),
        _rank(1, 0, [("all_reduce", 0.0, 10.0)]),
    )
    change(run)
    share, matched, why = peer_wait_share(run)
    assert share is None and matched is None and why is not None and reason in why
    no_collective = _run(_rank(0, 0, [("gemm", 0.0, 10.0)]), _rank(1, 0, [("gemm", 0.0, 10.0)]))
    assert peer_wait_share(no_collective) == (None, None, "no collective op in the ranks' op rows")


def _recompute(run: dict[str, Any]) -> float:
    """The same figure another way: per collective ordinal, every rank's absolute entry/exit in
    ns, the last entry minus each rank's own, clipped to its op; the largest rank's share."""
    ranks = run["distributed"]["rank_results"]
    per_rank = []
    for rank in ranks:
        table = rank["op_intervals"]
        origin = rank["metadata"]["window_start_monotonic_ns"]
        rows = table["rows"]
        busy = sum(r[6] - r[5] for r in rows) * 1000
        spans = sorted(
            (origin + r[5] * 1000, origin + r[6] * 1000)
            for r in rows
            if table["labels"][r[3]] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
        )
        per_rank.append((busy, spans))
    n = min(len(s) for _, s in per_rank)
    shares = []
    for busy, spans in per_rank:
        waited = 0.0
        for k in range(n):
            last = max(s[k][0] for _, s in per_rank)
            waited += max(0.0, min(last, spans[k][1]) - spans[k][0])
        shares.append(waited / busy)
    return max(shares)


def test_recorded_runs_match_a_recomputation_and_the_threshold_separates_them() -> None:
    unmodified = json.loads((FIXTURES / "comms_unmodified.json").read_text())
    late = json.loads((FIXTURES / "comms_late_rank.json").read_text())
    for run in (unmodified, late):
        share, matched, why = peer_wait_share(run)
        assert why is None and matched == 60  # 20 iterations x 3 all-reduces, every rank
        assert share == pytest.approx(_recompute(run), rel=1e-9)
    assert peer_wait_share(unmodified)[0] < PEER_WAIT_SHARE_MIN / 2  # 0.11 measured
    assert peer_wait_share(late)[0] > PEER_WAIT_SHARE_MIN * 1.5  # 0.55 measured


def test_the_late_rank_runs_are_diagnosed_collective_bound() -> None:
    late = json.loads((FIXTURES / "comms_late_rank.json").read_text())
    unmodified = json.loads((FIXTURES / "comms_unmodified.json").read_text())
    found = diagnose_point([late, copy.deepcopy(late), copy.deepcopy(late)])
    top = [c for c in found["causes"] if c["cause"] == "collective_bound"]
    assert top and top[0]["confidence"] == "high" and top[0]["evidence"]["collectives_matched"] == 60
    assert "waited inside collectives for a later peer" in top[0]["text"]
    quiet = {c["cause"]: c["status"] for c in diagnose_point([unmodified] * 3)["checked"]}
    assert quiet["collective_bound"] == "not_supported"
    one_rank = {c["cause"]: c for c in diagnose_point([{"stream_count": 2}])["checked"]}
    assert one_rank["collective_bound"]["status"] == "not_measured"
    assert "no peers to wait for" in one_rank["collective_bound"]["reason"]

"""analysis/diagnosis.py on runs whose evidence is known: each documented cause is named (first,
with the confidence the repeats give) when its figures hold, and not otherwise; a sweep that
scales names none; unmeasured causes are listed as such; the sweep file keeps it schema'd."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from aorta.hw_queue_eval.analysis import diagnosis, scaling
from aorta.hw_queue_eval.report.tables import diagnosis_lines
from aorta.hw_queue_eval.results.validation import SWEEP_SCHEMA, problem
from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of
from factories import op_intervals, run_result, stats

WINDOW_MS = 100.0


def _rows(streams: int, pool: int, iterations: int = 10) -> list[list[Any]]:
    """Op rows: every op ready at its iteration's start; ops sharing a queue run one after
    another in stream order, 1 ms each. On a queue shared by two streams the second op waits
    1 ms behind the first: 1 ms queued of 1 + 2 ms ready→end, a head-of-line share of 1/3."""
    rows = []
    for i in range(iterations):
        base = i * 10_000.0
        for s in range(streams):
            k = s // pool  # position on its queue (queue = s % pool)
            rows.append([i, s, s % pool, 0, base, base + k * 1000.0, base + (k + 1) * 1000.0])
    return rows


def _run(streams: int, tput: float, **ev: Any) -> dict[str, Any]:
    """A run of `streams` streams with throughput `tput` and the given evidence figures."""
    pool = ev.get("pool", 4)
    result = run_result(
        streams=streams,
        throughput=tput,
        pool_size=pool,
        iteration_times_ms=[10.0] * 10,
        work_per_iteration=1e9 * streams,  # per-stream work: ideal throughput grows with n
    )
    conc = result["concurrency"]
    conc.update(
        achieved=ev.get("achieved2" if streams == 2 and "achieved2" in ev else "achieved"),
        window_ms=WINDOW_MS,
        on_cpu_queues=ev.get("on_cpu", 0.5 * streams),
        on_cpu_reason=None,
        host_on_cpu=ev.get("host", 0.1),
        host_run_queue_wait=ev.get("host_wait", 0.0),
        queue_run_queue_wait_share=ev.get("runq", 0.02),
        queue_run_queue_wait_ms=ev.get("qwait_ms", 0.0),
        cpu_wait_reason=None,
    )
    starv = result["switch_latency"]["launch_starvation"]
    starv.update(share_of_lane_time=ev.get("starv", 0.01), cross_stream_waits=0, gaps=5)
    result["per_stream_times_ms"] = [ev.get("busy", 40.0)] * streams
    result["ops"]["ready_to_start_ms"] = stats([ev.get("hol", 0.01)] * 3)
    rows = _rows(streams, pool)
    for row in rows[: int(len(rows) * ev.get("copying", 0.0))]:
        row[3] = 1  # label h2d_copy
    result["op_intervals"] = op_intervals(rows, ["gemm", "h2d_copy"])
    if "needless" in ev or "missing" in ev:
        needless = [{"producer": 0, "consumer": 1, "waits": 10}] * ev.get("needless", 0)
        result["stream_order"] = {
            "declared": [],
            "edges": needless,
            "missing_synchronisation": [{"producer": 1, "consumer": 0}] * ev.get("missing", 0),
            "needless_serialisation": needless,
        }
    if "reclaim" in ev:
        result["ebpf_memory_metrics"] = {"status": "ok", "host_memcg_reclaim_episodes": ev["reclaim"]}
    return result


def _sweep(per_point: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [r for runs in per_point.values() for r in runs]


def _diagnose(results: list[dict[str, Any]]) -> dict[str, Any]:
    analysis = scaling.analyze(results, "per_stream")
    assert analysis is not None
    return diagnosis.diagnose_sweep(results, analysis.to_dict())


def _flat(n: int, jitter: list[float], **ev: Any) -> list[dict[str, Any]]:
    return [_run(n, 100.0 + j, **ev) for j in jitter]


JITTER = [0.0, 1.0, -1.0]


def test_every_figure_a_rule_names_is_a_numeric_field_of_the_evidence():
    # rules name their figures by the keys the diagnosis writes: a typo must fail here, not in a run
    numeric = {
        f.name
        for f in dataclasses.fields(diagnosis.RunEvidence)
        if "float" in str(f.type) or "int" in str(f.type)
    }
    named = {rule.primary for rule in diagnosis.RULES}
    named |= {key for keys in diagnosis.EVIDENCE_FIGURES.values() for key in keys}
    assert named <= numeric, sorted(named - numeric)
    assert (
        set(diagnosis.EVIDENCE_FIGURES) == {rule.cause for rule in diagnosis.RULES} == set(diagnosis.CAUSES)
    )


def test_scaling_sweep_names_no_cause():
    results = _sweep({1: _flat(1, JITTER), 2: [_run(2, 200.0 + j) for j in JITTER]})
    found = _diagnose(results)
    assert found["subject"] == "scales" and found["causes"] == []


def test_launch_starvation_with_a_busy_host_is_named_high():
    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)}))
    assert found["subject"] == "no_scaling" and found["examined_streams"] == 2
    top = found["causes"][0]
    assert (top["cause"], top["confidence"]) == ("host_launch_bound", "high")
    assert top["evidence"]["launch_starvation_share"] == pytest.approx(0.6)
    assert top["evidence"]["host_cpu_share"] == pytest.approx(0.95 / (0.95 + 0.2))


def test_a_busy_host_with_lanes_in_flight_is_not_launch_bound():
    """The host is busy, but the lanes are busy too (no waited gaps, ops always in flight)."""
    ev = {"starv": 0.0, "host": 0.95, "on_cpu": 0.2, "achieved": 1.0}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev, achieved2=2.0)}))
    assert "host_launch_bound" not in [c["cause"] for c in found["causes"]]
    # the same busy host with streams idle most of the window (no lane gaps to count) is
    ev = {"starv": 0.0, "host": 0.95, "on_cpu": 0.2, "achieved": 0.2}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)}))
    assert found["causes"][0]["cause"] == "host_launch_bound"


def test_a_starved_lane_behind_an_idle_host_is_not_launch_bound():
    """Lanes wait, but the host was neither on a CPU nor waiting for one: not the host's launch."""
    ev = {"starv": 0.6, "host": 0.2, "host_wait": 0.1}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)}))
    assert "host_launch_bound" not in [c["cause"] for c in found["causes"]]
    status = {c["cause"]: c["status"] for c in found["checked"]}
    assert status["host_launch_bound"] == "not_supported"


def test_streams_sharing_one_busy_queue_are_multiplexing():
    one = _flat(1, JITTER, pool=1, busy=90.0)
    two = _flat(2, JITTER, pool=1, busy=45.0)  # 2 × 45 ms on the one queue: 90 % busy
    found = _diagnose(_sweep({1: one, 2: two}))
    top = found["causes"][0]
    assert (top["cause"], top["confidence"]) == ("queue_multiplexing", "high")
    assert top["evidence"]["head_of_line_share"] == pytest.approx(1 / 3)
    assert top["evidence"]["busiest_shared_queue_busy"] == pytest.approx(0.9)
    assert "2 streams on 1 queue(s)" in top["text"]


def test_queued_waits_without_shared_queues_are_not_multiplexing():
    one, two = _flat(1, JITTER), _flat(2, JITTER, hol=0.8)  # 2 streams on 2 queues, slow dispatch
    assert "queue_multiplexing" not in [c["cause"] for c in _diagnose(_sweep({1: one, 2: two}))["causes"]]


def test_busy_cores_and_a_growing_run_queue_are_saturation():
    one = _flat(1, JITTER, on_cpu=0.9, host=0.1, runq=0.05)
    two = _flat(2, JITTER, on_cpu=0.9, host=0.1, runq=0.5)
    for run in [*one, *two]:
        run["environment"]["cpus_pinned"] = {"cpus": [0], "mapping": {}, "host": [0], "queues": []}
    found = _diagnose(_sweep({1: one, 2: two}))
    top = found["causes"][0]
    assert (top["cause"], top["confidence"]) == ("device_saturated", "high")
    assert top["evidence"]["usable_cpus"] == 1


def test_run_queue_wait_with_idle_cores_is_not_saturation():
    """Our threads wait for CPUs other processes hold: no claim that this workload saturates."""
    found = _diagnose(_sweep({1: _flat(1, JITTER, runq=0.05), 2: _flat(2, JITTER, on_cpu=0.3, runq=0.7)}))
    assert "device_saturated" not in [c["cause"] for c in found["causes"]]


def test_reclaim_in_the_window_is_memory_pressure_and_unmeasured_without_the_trace():
    ev = {"reclaim": 30}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)}))
    assert found["causes"][0]["cause"] == "memory_pressure"
    quiet = _diagnose(_sweep({1: _flat(1, JITTER), 2: _flat(2, JITTER)}))
    status = {c["cause"]: c for c in quiet["checked"]}
    assert status["memory_pressure"]["status"] == "not_measured"
    assert "--ebpf-memory-trace" in status["memory_pressure"]["reason"]
    for cause in ("collective_bound", "synchronisation"):
        assert status[cause]["status"] == "not_measured"
    assert status["copy_bound"]["status"] == "not_supported"  # op rows with no copy: measured 0
    assert quiet["causes"] == [] and "no documented cause" in quiet["text"]


def test_an_undeclared_wait_is_needless_serialisation_and_a_clean_order_claims_nothing():
    found = _diagnose(_sweep({1: _flat(1, JITTER, needless=0), 2: _flat(2, JITTER, needless=1)}))
    top = found["causes"][0]
    assert (top["cause"], top["confidence"]) == ("synchronisation", "high")
    assert top["evidence"]["needless_serialisation"] == 1 and top["evidence"]["needless_waits"] == 10
    racy = _diagnose(_sweep({1: _flat(1, JITTER, missing=1), 2: _flat(2, JITTER, missing=1)}))
    assert racy["causes"][0]["evidence"]["missing_synchronisation"] == 1
    clean = _diagnose(_sweep({1: _flat(1, JITTER, needless=0), 2: _flat(2, JITTER, needless=0)}))
    status = {c["cause"]: c["status"] for c in clean["checked"]}
    assert status["synchronisation"] == "not_supported" and clean["causes"] == []


def test_copy_share_is_the_ops_busy_time_in_copies_on_known_rows():
    """Two 1 ms ops and one 3 ms copy (labels by index or by name): 3 of 5 ms; no rows: unmeasured."""
    rows = [[0, 0, 0, 0, 0.0, 0.0, 1000.0], [0, 1, 1, 0, 0.0, 0.0, 1000.0], [0, 0, 0, 1, 0.0, 1000.0, 4000.0]]
    result = {"op_intervals": op_intervals(rows, ["gemm", "d2h_copy"])}
    assert diagnosis.copy_share(result) == (pytest.approx(0.6), 1, None)
    named = [[*r[:3], ("gemm", "gemm", "h2d_copy")[i], *r[4:]] for i, r in enumerate(rows)]
    by_name = {"op_intervals": {**result["op_intervals"], "rows": named}}
    assert diagnosis.copy_share(by_name)[0] == pytest.approx(0.6)
    share, ops, reason = diagnosis.copy_share({})
    assert (share, ops) == (None, None) and "no op rows" in reason


def test_copies_taking_most_of_the_busy_time_are_copy_bound():
    found = _diagnose(_sweep({1: _flat(1, JITTER, copying=0.9), 2: _flat(2, JITTER, copying=0.9)}))
    top = found["causes"][0]
    assert (top["cause"], top["confidence"]) == ("copy_bound", "high")
    assert top["evidence"]["copy_share"] == pytest.approx(0.9, abs=0.05)
    some = _diagnose(_sweep({1: _flat(1, JITTER, copying=0.3), 2: _flat(2, JITTER, copying=0.3)}))
    assert "copy_bound" not in [c["cause"] for c in some["causes"]]


def test_confidence_follows_the_runs():
    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    # one run per point: at most low
    found = _diagnose([_run(1, 100.0, **ev), _run(2, 100.0, **ev)])
    assert found["causes"][0]["confidence"] == "low"
    # two of three runs hold: medium
    two = [_run(2, 100.0, **ev), _run(2, 101.0, **ev), _run(2, 99.0, starv=0.6, host=0.1, on_cpu=0.2)]
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: two}))
    assert found["causes"][0]["confidence"] == "medium"
    # every run holds but the spread is wider than the margin over the threshold: medium
    wide = [_run(2, 100.0, starv=0.6, host=h, on_cpu=0.2) for h in (0.21, 0.5, 0.95)]  # 51–83 %
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: wide}))
    assert found["causes"][0]["confidence"] == "medium"


def test_sweep_file_carries_a_schemad_diagnosis_and_the_console_prints_it():
    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    points = [
        {"key": {"workload": "hetero_kernels", "streams": r["stream_count"]}, "status": "ok", "result": r}
        for r in _sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)})
    ]
    analysis = analysis_of(points, "per_stream")
    assert analysis is not None
    assert analysis["diagnosis"]["causes"][0]["cause"] == "host_launch_bound"
    sweep = {"kind": "sweep", "workload": "hetero_kernels", "points": points, "analysis": analysis}
    assert problem(sweep, SWEEP_SCHEMA) is None
    bad = copy.deepcopy(sweep)
    bad["analysis"]["diagnosis"]["causes"][0]["cause"] = "cosmic_rays"
    assert problem(bad, SWEEP_SCHEMA) is not None
    lines = diagnosis_lines(analysis["diagnosis"])
    cause_lines = [line for line in lines if line.startswith("  cause: ")]
    assert cause_lines and "host launch-bound" in cause_lines[0] and "confidence high" in cause_lines[0]
    unmeasured = [line for line in lines if line.startswith("  not measured in this sweep:")]
    assert unmeasured and "collective_bound" in unmeasured[0]


def test_report_lists_each_cause_linked_to_the_examined_points_timeline():
    from aorta.hw_queue_eval.report.html import sweep_page

    def page(**ev: Any) -> tuple[str, list[Any], list[str]]:
        points = [
            {"key": {"workload": "w", "streams": r["stream_count"]}, "status": "ok", "result": r}
            for r in _sweep({1: _flat(1, JITTER), 2: _flat(2, JITTER, **ev)})
        ]
        analysis = analysis_of(points, "per_stream")
        return sweep_page({"kind": "sweep", "workload": "w", "points": points, "analysis": analysis})

    body, figures, notes = page(needless=1)
    section = body[body.index("<h2>Diagnosis</h2>") : body.index("<h2>Points</h2>")]
    assert "<li>synchronisation (confidence high)" in section
    timeline = [f for f in figures if f.filename == "diagnosis_timeline.png"]
    if timeline:  # linked to the figure the page carries
        assert '<a href="#diagnosis_timeline.png">timeline at 2 streams</a>' in section
        assert 'id="diagnosis_timeline.png"' in body and "2 streams" in timeline[0].title
    else:  # or says why there is none
        assert "href" not in section and any(n.startswith("diagnosis timeline at 2") for n in notes)
    quiet, figures, _ = page()
    assert "<li>" not in quiet[quiet.index("<h2>Diagnosis</h2>") : quiet.index("<h2>Points</h2>")]
    assert all(f.filename != "diagnosis_timeline.png" for f in figures)


def test_single_run_interpretation_names_what_applies():
    from aorta.hw_queue_eval.report.console import diagnosis_sentences

    assert diagnosis_sentences(_run(2, 100.0)) == []
    (line,) = diagnosis_sentences(_run(2, 100.0, starv=0.6, host=0.95, on_cpu=0.2))
    assert "host launch-bound" in line and "confidence low" in line


def test_a_cause_holding_in_one_run_of_three_is_not_supported():
    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    two = [_run(2, 100.0, **ev), _run(2, 101.0, host=0.1), _run(2, 99.0, host=0.1)]
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: two}))
    assert found["causes"] == []
    status = {c["cause"]: c for c in found["checked"]}
    assert status["host_launch_bound"]["status"] == "not_supported"
    assert "holds in 1/3 runs" in status["host_launch_bound"]["reason"]


def test_unestablished_scaling_is_checked_at_the_last_point():
    """No knee, but the rise is within the runs' spread: the causes are checked, not skipped."""
    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    one = [_run(1, t, **ev) for t in (100.0, 60.0, 140.0)]
    two = [_run(2, t, **ev) for t in (150.0, 90.0, 210.0)]
    found = _diagnose(_sweep({1: one, 2: two}))
    assert found["subject"] == "scaling_uncertain" and found["examined_streams"] == 2
    assert found["causes"][0]["cause"] == "host_launch_bound"
    assert "not established" in found["text"]


def test_the_sweep_plot_names_the_cause_at_the_knee():
    from aorta.hw_queue_eval.report import plots

    ev = {"starv": 0.6, "host": 0.95, "on_cpu": 0.2}
    found = _diagnose(_sweep({1: _flat(1, JITTER, **ev), 2: _flat(2, JITTER, **ev)}))
    fig = plots.new_figure()
    ax = fig.add_subplot()
    plots._annotate_diagnosis(ax, found)
    assert [t.get_text() for t in ax.texts] == ["cause: host launch-bound (high)"]


def test_head_of_line_counts_only_waits_behind_other_streams():
    """Two ops of s0 back to back on q0 (the second waits behind its own stream: order, not
    head-of-line), then s1's op on q0 ready at 0, queued behind both: 2 ms of its 3 ms."""
    rows = [
        [0, 0, 0, 0, 0.0, 0.0, 1000.0],
        [0, 0, 0, 0, 0.0, 1000.0, 2000.0],
        [0, 1, 0, 0, 0.0, 2000.0, 3000.0],
    ]
    result = {"op_intervals": op_intervals(rows, ["gemm"])}
    share, reason = diagnosis.head_of_line_share(result)
    assert reason is None
    assert share == pytest.approx(2000.0 / (1000.0 + 2000.0 + 3000.0))
    assert diagnosis.head_of_line_share({"op_intervals": None}) == (None, diagnosis.head_of_line_share({})[1])


def test_waiting_beside_other_load_with_demand_over_one_is_not_saturation():
    """The unmodified sweep's false positive on a loaded machine (stored rows of a bench run):
    2 usable CPUs, our threads on a CPU 35 % of them and waiting enough to read demand 1.1: the
    CPUs they waited for were others'. Held at 70 % of the CPUs, the same wait is ours."""

    def point(streams: int, on_cpu: float, runq: float) -> list[dict[str, Any]]:
        runs = _flat(streams, JITTER, on_cpu=on_cpu, host=0.1, runq=runq, qwait_ms=1.5 * WINDOW_MS)
        for run in runs:
            run["environment"]["cpus_allowed"] = [0, 1]
            run["environment"].pop("cpus_pinned", None)
        return runs

    busy_elsewhere = _diagnose(_sweep({1: point(1, 0.5, 0.05), 2: point(2, 0.6, 0.62)}))
    ours = _diagnose(_sweep({1: point(1, 0.9, 0.05), 2: point(2, 1.3, 0.62)}))
    assert "device_saturated" not in [c["cause"] for c in busy_elsewhere["causes"]]
    checked = {c["cause"]: c for c in busy_elsewhere["checked"]}
    assert checked["device_saturated"]["status"] == "not_supported"
    top = ours["causes"][0]
    assert top["cause"] == "device_saturated"
    assert top["evidence"]["usable_cpus"] == 2
    assert top["evidence"]["cpu_demand"] == pytest.approx((1.3 + 1.5 + 0.1) / 2)
    assert top["evidence"]["cores_busy"] == pytest.approx((1.3 + 0.1) / 2)


def test_a_race_beside_saturation_is_named_first():
    """Both high: the missing synchronisation (an exact count) leads, saturation (a larger score
    over its threshold) follows; the order rule is documented in docs/sweep-compare-report.md."""
    pinned = {"cpus": [0], "mapping": {}, "host": [0], "queues": []}
    one = _flat(1, JITTER, on_cpu=0.9, host=0.1, runq=0.05, missing=1)
    two = _flat(2, JITTER, on_cpu=0.9, host=0.1, runq=0.5, missing=1)
    for run in [*one, *two]:
        run["environment"]["cpus_pinned"] = pinned
    causes = [(c["cause"], c["confidence"]) for c in _diagnose(_sweep({1: one, 2: two}))["causes"]]
    assert causes[:2] == [("synchronisation", "high"), ("device_saturated", "high")]

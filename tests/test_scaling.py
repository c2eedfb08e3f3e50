"""Scaling analysis on synthetic sweep points with a known knee."""

from __future__ import annotations

import pytest

from aorta.hw_queue_eval.analysis.scaling import UnstablePoint, analyze
from factories import queue_section, queue_summary, run_result


def _result(streams, throughput, p99, work, pool=4, backend="cpu", cores=64, dispatch=None):
    """A run result from the test factory (iterations all `p99` ms long), traced when `dispatch`
    (the summary family's submit→dispatch P99, µs) is given."""
    return run_result(
        streams=streams,
        throughput=throughput,
        iteration_times_ms=[p99] * 5,
        work_per_iteration=work,
        pool_size=pool,
        backend=backend,
        cpu_count=cores,
        ebpf_queue_metrics=None if dispatch is None else queue_section("cpu_sched", p99_us=dispatch),
    )


def _per_stream_sweep(**kw):
    # work grows with the streams; time per iteration constant up to 4 streams, then grows
    return [
        _result(1, 10, 1.0, 100, **kw),
        _result(2, 20, 1.0, 200, **kw),
        _result(4, 40, 1.0, 400, **kw),
        _result(8, 41, 2.0, 800, **kw),
        _result(16, 42, 4.0, 1600, **kw),
    ]


def test_knee_at_pool_size_per_stream_work():
    a = analyze(_per_stream_sweep(), "per_stream")
    assert a.knee_streams == 4
    assert a.peak_streams == 16
    assert a.efficiency[:3] == pytest.approx([1.0, 1.0, 1.0])
    assert a.efficiency[3] == pytest.approx(41 / 10 / 8)
    assert a.latency_jump_streams == 8
    assert a.verdict.startswith("throughput stops scaling at 4 streams = the hardware-queue pool")


def test_knee_before_a_later_peak_gives_its_reason_on_screen():
    """Knee 4, peak 16: the reason names the best later capture (4→8: (41/40 − 1)/(2 − 1)) and
    the rise to the peak (42/40 − 1 = 5 %, ideal 1600/400 − 1 = +300 %), and the sweep prints it."""
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.tables import render_sweep

    results = _per_stream_sweep()
    a = analyze(results, "per_stream")
    best = (41 / 40 - 1) / (800 / 400 - 1)
    assert a.knee_reason == (
        f"from 4 streams on, no added stream captures 20% of the ideal extra throughput "
        f"(best: 4→8 captures {best:.0%}); throughput still rises to the peak at 16 streams "
        f"by 5.0% over 4 (ideal +300%)"
    )
    out = io.StringIO()
    sweep = {
        "workload": "w",
        "throughput_unit": "GFLOPS",
        "points": [{"key": {"streams": r["stream_count"]}, "status": "ok", "result": r} for r in results],
        "analysis": a.to_dict(),
    }
    render_sweep(sweep, Console(file=out, width=300))
    text = out.getvalue()
    assert "peak throughput: 42.00 GFLOPS at 16 streams" in text
    assert f"  why: {a.knee_reason}\n" in text
    # no knee: no reason
    assert analyze(results[:3], "per_stream").knee_reason is None


def test_knee_at_core_count_is_named_as_such():
    a = analyze(_per_stream_sweep(pool=8, cores=4), "per_stream")
    assert "= the CPU core count (4)" in a.verdict
    assert "before the queue pool (8) is full" in a.verdict


def test_knee_explained_by_neither():
    a = analyze(_per_stream_sweep(pool=16, cores=64), "per_stream")
    assert a.verdict.startswith("throughput stops scaling at 4 streams (pool 16, 64 cores)")


def test_fixed_work_uses_stream_ratio():
    results = [_result(1, 10, 10.0, 100), _result(2, 19, 5.2, 100), _result(4, 20, 5.0, 100)]
    a = analyze(results, "fixed")
    assert a.efficiency == pytest.approx([1.0, 0.95, 0.5])
    assert a.knee_streams == 2
    assert a.latency_jump_streams is None  # latency fell as ideal: no jump


def test_still_scaling_and_unknown_pool():
    results = [
        _result(1, 10, 1.0, 100, pool=None, backend="gpu"),
        _result(2, 20, 1.0, 200, pool=None, backend="gpu"),
    ]
    a = analyze(results, "per_stream")
    assert a.knee_streams is None
    assert a.pool_size is None
    assert a.verdict.startswith("throughput still scales up to 2 streams (the largest measured)")
    assert a.confidence == "unknown"
    assert "--repeats" in a.verdict


def test_dispatch_jump_from_ebpf_section():
    results = [_result(n, 10 * n, 1.0, 100 * n, dispatch=d) for n, d in ((1, 10), (2, 11), (4, 40))]
    a = analyze(results, "per_stream")
    assert a.dispatch_jump_streams == 4
    assert "dispatch P99 jumps at 4 streams" in a.verdict


def test_dispatch_p99_is_read_by_its_documented_key_only():
    """Another family's figure never stands in for the summary's, and a failed trace has none."""
    from aorta.hw_queue_eval.analysis.scaling import dispatch_avg_us, dispatch_p99_us

    other = {"summary": queue_summary("gpu_scheduler", avg_us=500.0, p99_us=999.0)}
    section = queue_section("cpu_sched", avg_us=None, p99_us=12.5, other_families={"gpu_scheduler": other})
    result = run_result(ebpf_queue_metrics=section)
    assert dispatch_p99_us(result) == 12.5
    assert dispatch_avg_us(result) is None  # not measured: not borrowed from elsewhere
    result["ebpf_queue_metrics"]["submit_to_dispatch_p99_us"] = None
    assert dispatch_p99_us(result) is None
    result["ebpf_queue_metrics"].update(status="error", submit_to_dispatch_p99_us=12.5)
    assert dispatch_p99_us(result) is None


def test_needs_two_points():
    assert analyze([_result(1, 10, 1.0, 100)], "per_stream") is None


def test_flat_step_followed_by_scaling_is_not_the_knee():
    # 2→4 captures little, 4→8 scales again, 8→16 is flat: scaling stopped at 8, not 2
    results = [
        _result(2, 100, 1.0, 200),
        _result(4, 110, 1.0, 400),
        _result(8, 200, 1.0, 800),
        _result(16, 205, 2.0, 1600),
    ]
    a = analyze(results, "per_stream")
    assert a.knee_streams == 8


# --- repeats: medians with CIs, confidence, unstable points, property test ----------------------

import random  # noqa: E402

from aorta.hw_queue_eval.analysis.scaling import KNEE_GAIN_FRACTION, ideal_growth  # noqa: E402
from aorta.hw_queue_eval.analysis.stats import median_ci  # noqa: E402
from aorta.hw_queue_eval.report.tables import sweep_table  # noqa: E402


def _runs(streams, tputs, work, iqr=0.02, **kw):
    out = []
    for t in tputs:
        r = _result(streams, t, 1.0, work, **kw)
        r["latency_ms"].update({"p50": 1.0, "iqr": iqr})
        out.append(r)
    return out


def test_repeats_with_separated_cis_give_high_confidence():
    results = (
        _runs(1, [10, 10.2, 9.9, 10.1, 9.8], 100)
        + _runs(2, [20, 19.5, 20.3, 19.9, 20.1], 200)
        + _runs(4, [21, 20.6, 21.2, 20.8, 21.1], 400)
    )
    a = analyze(results, "per_stream")
    assert a.knee_streams == 2
    assert a.runs_per_point == [5, 5, 5]
    assert a.confidence == "high"
    assert "[confidence high" in a.verdict
    assert a.throughput_ci[0] == [9.8, 10.2]
    assert a.ci_level == pytest.approx(0.9375)
    assert [s["trend"] for s in a.steps] == ["rising", "rising"]  # 20→21: CIs [19.5,20.3] [20.6,21.2]


def test_overlapping_cis_give_low_confidence_and_uncertain_steps():
    results = _runs(1, [10, 14, 6], 100) + _runs(2, [16, 9, 12], 200) + _runs(4, [12, 15, 9], 400)
    a = analyze(results, "per_stream")
    assert a.confidence == "low"
    assert {s["trend"] for s in a.steps} == {"uncertain"}


def test_unstable_points_are_flagged_and_weaken_the_verdict():
    results = (
        _runs(1, [10, 10.1, 9.9], 100, iqr=0.5)
        + _runs(2, [20, 20.1, 19.9], 200)
        + _runs(4, [20.5, 20.4, 20.6], 400)
    )
    a = analyze(results, "per_stream")
    assert a.unstable_points == [UnstablePoint(streams=1, iqr_over_median=0.5)]
    assert a.to_dict()["unstable_points"] == [{"streams": 1, "iqr_over_median": 0.5}]
    assert a.confidence == "low"
    assert "weakened by unstable points" in a.confidence_reason
    assert "unstable points at 1 streams" in a.verdict
    assert a.warnings


def test_resume_under_other_load_is_flagged():
    from aorta.hw_queue_eval.sweeps.stream_sweep import analysis_of

    def point(streams, tput, pid, load):
        return {
            "key": {"workload": "w", "streams": streams},
            "status": "ok",
            "result": _result(streams, tput, 1.0, 100 * streams),
            "conditions": {"loadavg_1m": load, "cpu_count": 2, "session_pid": pid},
        }

    one_go = analysis_of([point(1, 10, 7, 0.2), point(2, 20, 7, 0.3)], "per_stream")
    assert not one_go.get("mixed_conditions")
    mixed = analysis_of([point(1, 10, 7, 0.2), point(2, 20, 8, 3.5)], "per_stream")
    assert mixed["mixed_conditions"] is True
    assert any("2 sessions (--resume)" in w and "load differed" in w for w in mixed["warnings"])


@pytest.mark.parametrize("seed", range(60))
def test_verdict_never_contradicts_the_table(seed):
    """Random sweeps (1, 3 or 5 runs per point): knee, peak, efficiency and the verdict agree
    with the medians the table shows."""
    rng = random.Random(seed)
    counts = sorted(rng.sample([1, 2, 4, 8, 16, 32], rng.randint(2, 6)))
    repeats = rng.choice([1, 3, 5])
    scaling = rng.choice(["per_stream", "fixed"])
    results = []
    for n in counts:
        level = rng.uniform(5, 100)
        results += [_result(n, level * rng.uniform(0.7, 1.3), 1.0, 100 * n) for _ in range(repeats)]
    rng.shuffle(results)
    a = analyze(results, scaling)
    sweep = {
        "throughput_unit": "GFLOPS",
        "analysis": a.to_dict(),
        "points": [
            {
                "key": {
                    "workload": "w",
                    "streams": r["stream_count"],
                    **({"repeat": i} if repeats > 1 else {}),
                },
                "status": "ok",
                "result": r,
            }
            for i, r in enumerate(results)
        ],
    }
    _, rows = sweep_table(sweep)
    medians = {
        n: median_ci([r["throughput"] for r in results if r["stream_count"] == n]).median for n in counts
    }
    col = 3 if repeats > 1 else 2
    for row in rows:  # the table shows the medians the analysis used
        assert row[col].split(" ")[0] == f"{medians[int(row[0])]:.2f}"
    assert a.peak_streams == max(counts, key=lambda n: medians[n])
    assert a.peak_throughput == medians[a.peak_streams]
    points = {p: a.stream_counts.index(p) for p in counts}
    first = _result(counts[0], 1, 1, 100 * counts[0])

    def gain(k, b):
        pk = type("P", (), {"streams": k, "work_per_iteration": 100 * k})
        pb = type("P", (), {"streams": b, "work_per_iteration": 100 * b})
        ideal = ideal_growth(pk, pb, scaling)
        return None if ideal <= 1 else (medians[b] / medians[k] - 1) / (ideal - 1)

    for n in counts:
        pn = type("P", (), {"streams": n, "work_per_iteration": 100 * n})
        p0 = type(
            "P", (), {"streams": counts[0], "work_per_iteration": first["metadata"]["work_per_iteration"]}
        )
        assert a.efficiency[points[n]] == pytest.approx(
            medians[n] / medians[counts[0]] / ideal_growth(p0, pn, scaling)
        )
    knee = a.knee_streams
    if knee is None:
        assert a.verdict.startswith("throughput still scales")
        for k in counts[:-1]:  # from every point scaling resumes somewhere later
            assert any((g := gain(k, b)) is not None and g >= KNEE_GAIN_FRACTION for b in counts if b > k)
    else:
        assert f"stops scaling at {knee} streams" in a.verdict
        later = [gain(knee, b) for b in counts if b > knee]
        assert all(g is None or g < KNEE_GAIN_FRACTION for g in later)  # never resumes
        for k in counts[: counts.index(knee)]:  # and it is the first such point
            assert any((g := gain(k, b)) is not None and g >= KNEE_GAIN_FRACTION for b in counts if b > k)
    assert ("confidence unknown" in a.verdict) == (repeats == 1)


@pytest.mark.parametrize("tiny", [5e-324, 1e-300])
def test_a_tiny_throughput_gives_no_infinite_ratio(tiny):
    """5e-324 (a subnormal) as the first throughput: every ratio over it would be infinite, which
    is no JSON (the sweep file could not be written) and no measurement; it is shown as none."""
    import json

    sweep = [_result(1, tiny, 1.0, 10), _result(2, 1e10, 1.0, 20), _result(4, 2e10, 1.0, 40)]
    analysis = analyze(sweep, "per_stream")
    text = json.dumps(analysis.to_dict(), allow_nan=False)  # raises on inf/NaN
    assert "Infinity" not in text
    assert analysis.to_dict()["efficiency"][1:] == [None, None]

"""Percentiles you can trust: exact from the bounded store, else log-linear with its bound;
the kernel-side bucket code checked against real bpftrace on known values (lseek offsets)."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest

from aorta.ebpf import engine, hist
from aorta.ebpf.probes.base import (
    CollectContext,
    FamilyResult,
    ProbeCode,
    ProbeFamily,
    RenderContext,
    TraceTarget,
)


def test_loglinear_buckets_tile_the_line_with_at_most_25_percent_width():
    previous_high = 0
    for index in range(4 * 40):
        low, high = hist.loglinear_bounds(index)
        assert low == previous_high  # contiguous, no gaps, no overlaps
        previous_high = high
        if low >= 4:
            assert (high - low) / low <= 0.25
    for value in (0, 1, 3, 4, 5, 7, 8, 1000, 123_456, 2**40 + 17):
        low, high = hist.loglinear_bounds(hist.loglinear_index(value))
        assert low <= value < high


def _dist_from(values: list[int], cap: int | None) -> hist.Distribution:
    """What the recorder's maps hold after `values` on one CPU with `cap` slots."""
    ll: dict[str, int] = {}
    for v in values:
        key = str(hist.loglinear_index(v))
        ll[key] = ll.get(key, 0) + 1
    kept = values if cap is None else values[:cap]
    maps = {"@d_ll": ll, "@d_ev": {f"0, {i}": v for i, v in enumerate(kept)}, "@d_seq": {"0": len(values)}}
    return hist.distribution(maps, "d")


def test_exact_when_the_store_holds_every_event():
    values = [random.Random(1).randint(1000, 200_000) for _ in range(83)]
    p = hist.quantile(_dist_from(values, None), 0.99)
    assert p["method"] == "exact"
    assert p["count"] == 83
    assert p["value"] == pytest.approx(float(np.percentile(values, 99)))
    assert "exact, 83 events" in hist.describe(p)


def test_log_linear_with_bound_when_the_store_overflowed():
    rng = random.Random(2)
    values = [rng.randint(1000, 200_000) for _ in range(5000)]
    p = hist.quantile(_dist_from(values, 64), 0.99)
    assert p["method"] == "log-linear"
    assert p["count"] == 5000
    true = float(np.percentile(values, 99))
    assert p["bucket_min"] <= true <= p["bucket_max"]
    assert abs(p["value"] - true) / true <= p["error_bound_pct"] / 100 <= 0.25
    assert "log-linear" in hist.describe(p)
    assert "±" in hist.describe(p)


def test_recorder_names_are_validated():
    with pytest.raises(ValueError):
        hist.record_code('x; system("id")', "1")


class LseekOffsets(ProbeFamily):
    """Test family: records the offset of every lseek() of the traced process (known values)."""

    name = "t_dist"
    section = "queue"
    description = "test"

    def __init__(self, cap: int) -> None:
        self.cap = cap

    def wanted_events(self) -> list[str]:
        return ["syscalls:sys_enter_lseek"]

    def render(self, ctx: RenderContext) -> ProbeCode:
        body = hist.record_code("t_dist_off", ctx.dialect.arg("offset"), self.cap)
        return ProbeCode(
            probes=[f"tracepoint:syscalls:sys_enter_lseek\n/{ctx.pid_filter} && {ctx.gate}/\n{{\n{body}\n}}"],
            used_events=["syscalls:sys_enter_lseek"],
        )

    def collect(self, maps: dict[str, Any], context: CollectContext) -> FamilyResult:
        return FamilyResult(self.name, self.section, {"summary": None}, {})


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.parametrize("cap", [4096, 16])
def test_kernel_recorder_matches_known_values(ebpf_ready: None, tmp_path, cap: int) -> None:
    rng = random.Random(cap)
    values = [rng.choice([0, 1, 3, 5, 9]) for _ in range(10)] + [
        rng.randint(100, 5_000_000) for _ in range(190)
    ]
    ready = engine.check_readiness()
    family = LseekOffsets(cap)
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[family]
    )
    session = engine.start_session(program, ready)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        session.window_start()
        for v in values:
            os.lseek(fd, v, os.SEEK_SET)
        session.window_stop()
    except BaseException:
        session.abort()
        raise
    finally:
        os.close(fd)
    out = session.stop()
    assert out.exit_code == 0, out.stderr
    assert out.lost_events == 0, out.stderr
    assert not out.helper_errors, out.stderr
    dist = hist.distribution(out.maps, "t_dist_off")
    assert dist.count == len(values)
    expected: dict[int, int] = {}
    for v in values:
        expected[hist.loglinear_index(v)] = expected.get(hist.loglinear_index(v), 0) + 1
    got = {int(k): int(c) for k, c in hist.keyed(out.maps["@t_dist_off_ll"]).items()}
    assert got == expected  # the kernel's bucket index is the documented one, value by value
    p = hist.quantile(dist, 0.99)
    true = float(np.percentile(values, 99))
    if cap >= len(values):
        assert p["method"] == "exact"
        assert p["value"] == pytest.approx(true)
    else:
        assert p["method"] == "log-linear"
        assert p["bucket_min"] <= true <= p["bucket_max"]


def test_tail_band_is_decided_only_when_the_whole_bucket_is_in_one_band():
    from aorta.ebpf.engine import interpret_queue
    from aorta.hw_queue_eval.report.ebpf_blocks import p99_text

    exact = {
        "submit_to_dispatch_avg_us": 10.0,
        "submit_to_dispatch_p99_us": 25.0,
        "submit_to_dispatch_p99": {
            "method": "exact",
            "count": 83,
            "value": 25_000.0,
            "bucket_min": 25_000.0,
            "bucket_max": 25_000.0,
        },
    }
    assert "P99 is 2.5x the average (exact): good (< 3x avg)" in interpret_queue(exact, None)
    assert p99_text(exact) == "25.0 us (exact, 83 events)"
    # a log2 bucket [16, 32) us with avg 10 us: 1.6x..3.2x straddles "good" and "uneven"
    log2 = {
        "submit_to_dispatch_avg_us": 10.0,
        "submit_to_dispatch_p99_us": 28.0,
        "submit_to_dispatch_p99_bucket_us": [16.0, 32.0],
    }
    line = next(x for x in interpret_queue(log2, None) if x.startswith("P99"))
    assert "not decidable" in line
    assert "1.6–3.2x" in line
    assert p99_text(log2) == "28.0 us (log2 bucket: in 16.0–32.0 us, ±100 %)"
    # a log-linear bucket inside one band decides it, with the bucket shown
    fine = {
        "submit_to_dispatch_avg_us": 10.0,
        "submit_to_dispatch_p99_us": 150.0,
        "submit_to_dispatch_p99": {
            "method": "log-linear",
            "count": 5000,
            "value": 150_000.0,
            "bucket_min": 139_264.0,
            "bucket_max": 163_840.0,
        },
    }
    line = next(x for x in interpret_queue(fine, None) if x.startswith("P99"))
    assert line.endswith("stalls (> 10x avg)")
    assert "log-linear 139.3–163.8 us" in line

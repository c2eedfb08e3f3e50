"""Map routing, histogram maths, lost-event parsing and family collect(): pure Python."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from aorta.ebpf import hist, procstat
from aorta.ebpf.probes.amdgpu import AmdgpuFamily
from aorta.ebpf.probes.base import CollectContext, FamilyResult, QueueWorker
from aorta.ebpf.probes.cpu_sched import CpuSchedFamily
from aorta.ebpf.probes.gpu_scheduler import GpuSchedulerFamily
from aorta.ebpf.probes.kfd import multiplexing_verdict
from aorta.ebpf.program import Program
from aorta.ebpf.session import TraceSession


def _session() -> TraceSession:
    return TraceSession(Program(text="", token=1, families=[]), "/bin/false", [])


def test_lost_events_json_and_text_and_memlock_noise() -> None:
    s = _session()
    s.handle_line('{"type": "lost_events", "data": {"events": 7}}')
    s.handle_line("Lost 5 events")
    s.handle_stderr("Lost 3 events\n")
    s.handle_stderr("ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace.\n")
    s.handle_stderr("ERROR: something real\n")
    assert s.output.lost_events == 15
    assert s.output.lost_records == 3
    assert s.output.stderr == ["ERROR: something real"]


def test_handshake_needs_both_probes() -> None:
    s = _session()
    s.handle_line('{"type": "printf", "data": "aorta_ready 1\\n"}')
    assert not s._ready_event.is_set()
    s.handle_line('{"type": "printf", "data": "aorta_ready 2\\n"}')
    assert s._ready_event.is_set()


def test_percentile_inside_bucket() -> None:
    h = [(0, 0, 0), (1024, 2047, 99), (4096, 8191, 1)]
    p = hist.percentile(h, 0.99)
    assert p is not None
    assert 1024 <= p["estimate"] <= 2048
    assert hist.percentile([], 0.5) is None


DOORBELL_EVENTS = ("sched:sched_switch", "syscalls:sys_enter_write", "syscalls:sys_exit_read")


def test_cpu_sched_attributes_doorbells_to_queues() -> None:
    # queue 0 rang 3 times (delays 1000, 0, 5000 ns), queue 1 once (2000 ns)
    maps = {
        "@cpu_sched_seq": {"0": 3, "1": 1},
        "@cpu_sched_s2d_s": {
            "0": {"count": 3, "average": 2000, "total": 6000},
            "1": {"count": 1, "average": 2000, "total": 2000},
        },
        "@cpu_sched_s2d": {
            f"{q},{hist.loglinear_index(d)}": 1 for q, d in ((0, 1000), (0, 0), (0, 5000), (1, 2000))
        },
        "@cpu_sched_ring": {"0,0": 100, "0,1": 200, "0,2": 300, "1,0": 150},
        "@cpu_sched_sub": {"0,0": 1000, "0,1": 0, "0,2": 5000, "1,0": 2000},
        "@cpu_sched_cpus": {"11,1": 1},
    }
    workers = (QueueWorker(11, 0, streams=(0, 2)), QueueWorker(12, 1, streams=(1,)))

    def counters(exec_ns: int, vol: int, invol: int, comm: str = "aorta-hwq0") -> procstat.ThreadCounters:
        return procstat.ThreadCounters(
            pid=1,
            comm=comm,
            exec_ns=exec_ns,
            run_delay_ns=exec_ns // 10,
            voluntary=vol,
            involuntary=invol,
            cpu=0,
        )

    snaps = {
        "cpu_sched": {
            "start": {
                11: counters(1_000_000, 10, 1),
                12: counters(0, 0, 0),
                99: counters(0, 0, 0, "aorta-hwq1"),
            },
            "stop": {
                11: counters(6_000_000, 12, 2),
                12: counters(1_000_000, 1, 1),
                13: counters(0, 0, 0),
                99: counters(10, 0, 0, "aorta-hwq1"),
            },
        }
    }
    context = CollectContext(workers=workers, submitter_tids=(7,), snapshots=snaps, attached=DOORBELL_EVENTS)
    r = CpuSchedFamily().collect(maps, context)
    s = r.metrics["summary"]
    assert s["total_submissions"] == 4
    assert s["total_dispatches"] == 4
    assert s["submissions_per_queue"] == {"0": 3, "1": 1}
    assert s["hw_rings_used"] == [0, 1]
    assert s["submit_to_dispatch_avg_us"] == 8000 / 4 / 1e3
    # all 4 samples kept: exact nearest-rank P99 = the largest
    assert s["submit_to_dispatch_p99_us"] == 5.0
    assert s["submit_to_dispatch_p99_method"].startswith("exact")
    assert s["per_submission_cap_per_queue"] == 16384 // 2
    assert r.metrics["per_submission"] == [
        [0, 0, 100, 1000],
        [0, 1, 200, 0],
        [0, 2, 300, 5000],
        [1, 0, 150, 2000],
    ]
    q0 = next(t for t in r.metrics["threads"] if t["tid"] == 11)
    assert q0["submissions"] == 3
    assert q0["dispatches"] == 3
    assert q0["submit_to_dispatch_avg_us"] == 2.0
    assert q0["switches"] == 3
    assert q0["involuntary"] == 1
    assert q0["on_cpu_ms"] == 5.0
    assert q0["comm"] == "aorta-hwq0"
    assert q0["kernel_run_delay_ms"] == 0.5
    assert q0["cpus"] == [0, 1]
    assert 13 not in {t["tid"] for t in r.metrics["threads"]}  # did not run in the window
    helper = next(t for t in r.metrics["threads"] if t["tid"] == 99)
    assert helper["queue"] is None
    assert helper["helper_of_queue"] == 1
    assert helper["submissions"] is None  # not a queue worker: not measured there, not 0
    assert helper["dispatches"] is None
    # every dispatch of queue 0 was recorded: its P99 is exact (nearest rank of 1000, 0, 5000 ns)
    assert q0["submit_to_dispatch_p99_us"] == 5.0
    assert q0["submit_to_dispatch_p99_method"] == "exact"
    assert s["kernel_run_delay_total_ms"] == 0.5 + 0.1
    # the per-submission store missed one: P99 from the log-linear histogram, its bucket holds 5 µs
    partial = {**maps, "@cpu_sched_sub": {k: v for k, v in maps["@cpu_sched_sub"].items() if k != "1,0"}}
    est = CpuSchedFamily().collect(partial, context).metrics["summary"]
    assert est["submit_to_dispatch_p99_method"].startswith("log-linear")
    rec = est["submit_to_dispatch_p99"]
    low, high = rec["bucket_min"] / 1e3, rec["bucket_max"] / 1e3
    assert low <= 5.0 < high
    assert rec["error_bound_pct"] <= 25.0
    # per thread too: queue 1 lost its only record, so its P99 is the histogram's, marked so
    rows = {t["tid"]: t for t in CpuSchedFamily().collect(partial, context).metrics["threads"]}
    assert rows[12]["submit_to_dispatch_p99_method"] == "log-linear estimate"
    assert rows[11]["submit_to_dispatch_p99_method"] == "exact"
    # the doorbell probes were not attached: no summary rather than zeros
    assert CpuSchedFamily().collect(maps, replace(context, attached=())).metrics["summary"] is None


def test_the_marker_threads_row_is_its_own_reads_at_the_markers() -> None:
    """The harness thread runs at both edges and reads every thread's /proc counters on its own
    time outside the window: its row takes on-CPU time and switches from its reads right before
    the markers (MarkerClock); another thread's row, or a clock missing an edge, keeps /proc's."""

    def counters(exec_ns: int, vol: int, invol: int) -> procstat.ThreadCounters:
        return procstat.ThreadCounters(1, "python", exec_ns, 0, vol, invol, 0)

    snaps = {
        "cpu_sched": {
            "start": {7: counters(1_000_000, 5, 1), 8: counters(0, 0, 0)},
            "stop": {7: counters(9_000_000, 9, 2), 8: counters(2_000_000, 3, 0)},
        }
    }
    clock = procstat.MarkerClock(
        7, procstat.OwnCounters(1_500_000, 6, 1), procstat.OwnCounters(4_500_000, 8, 1)
    )

    def rows(marker_clock: procstat.MarkerClock | None) -> dict[int, dict[str, object]]:
        context = CollectContext(submitter_tids=(7,), snapshots=snaps, marker_clock=marker_clock)
        return {r["tid"]: r for r in CpuSchedFamily().collect({}, context).metrics["threads"]}

    marked = rows(clock)
    assert (marked[7]["on_cpu_ms"], marked[7]["switches"], marked[7]["involuntary"]) == (3.0, 2, 0)
    assert (marked[8]["on_cpu_ms"], marked[8]["switches"]) == (2.0, 3)
    assert (rows(None)[7]["on_cpu_ms"], rows(None)[7]["switches"]) == (8.0, 5)
    unfinished = procstat.MarkerClock(7, clock.start)  # the window never closed: no stop read
    assert rows(unfinished)[7]["on_cpu_ms"] == 8.0


def test_own_counters_are_the_threads_proc_counters_brought_up_to_date() -> None:
    """own_counters reads the same kernel counters as /proc (switches equal; the CPU clock at or
    past schedstat's value, which shows a running thread's time as of its last tick or switch)."""
    task = f"/proc/self/task/{threading.get_native_id()}"
    before = procstat.own_counters()
    with open(f"{task}/schedstat") as f:
        sched_ns = int(f.read().split()[0])
    with open(f"{task}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    after = procstat.own_counters()
    assert before.exec_ns <= after.exec_ns and sched_ns <= after.exec_ns
    if (before.voluntary, before.involuntary) == (after.voluntary, after.involuntary):  # no switch between
        assert int(status["voluntary_ctxt_switches"]) == after.voluntary
        assert int(status["nonvoluntary_ctxt_switches"]) == after.involuntary


def test_exact_percentile_nearest_rank() -> None:
    from aorta.ebpf.probes.cpu_sched import exact_percentile

    values = list(range(1, 101))
    assert exact_percentile(values, 0.99) == 99
    assert exact_percentile(values, 0.5) == 50
    assert exact_percentile([7], 0.99) == 7


def _subs(*rows: tuple) -> list:
    from aorta.hw_queue_eval.backends.base import SubmissionRecord

    return [SubmissionRecord(*row) for row in rows]


def test_comparison_matches_the_same_submissions() -> None:
    from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness

    section = {"status": "ok", "source": "cpu_sched", "total_submissions": 3, "lost_events": 0}
    # (queue, seq, ring, rung, start, kind): harness delays 3000, 5000, 10000 ns
    subs = _subs(
        (0, 0, 1000, 1100, 4000, "op"), (0, 1, 2000, 2100, 7000, "marker"), (1, 0, 1500, 1600, 11500, "op")
    )
    kernel = [[0, 0, 1050, 1000], [0, 1, 2050, 2000], [1, 0, 1550, 4000]]
    c = compare_with_harness(section, subs, kernel)
    assert c["harness_submissions"] == 3
    assert c["kernel_submissions"] == 3
    assert c["submissions_equal"]
    assert c["matched_submissions"] == 3
    assert c["coverage_pct"] == 100.0
    assert c["compared"] == 3
    assert c["kernel_submit_to_dispatch_ms"] == 7000 / 3 / 1e6
    assert c["harness_submit_to_start_ms"] == 18000 / 3 / 1e6
    assert c["kernel_visible_share_pct"] == 100 * 7000 / 18000
    assert c["first_task_kinds"] == {"op": 2, "marker": 1}
    assert c["op_submissions"]["count"] == 2
    assert c["op_submissions"]["kernel_ms"] == 5000 / 2 / 1e6
    # a kernel write outside the harness's bracket, and a missing record, are not matches
    moved = [[0, 0, 1200, 1000], [1, 0, 1550, 4000]]
    c = compare_with_harness({**section, "total_submissions": 2}, subs, moved)
    assert c["matched_submissions"] == 1
    assert c["coverage_pct"] == 100 / 3
    assert c["unmatched"] == {"no_kernel_record": 1, "write_outside_bracket": 1, "not_dispatched": 0}
    assert not c["submissions_equal"]
    # past the kernel's per-submission record cap, coverage is over the recordable rings only
    c = compare_with_harness(
        {**section, "per_submission_cap_per_queue": 1}, subs, [[0, 0, 1050, 1000], [1, 0, 1550, 4000]]
    )
    assert c["beyond_record_cap"] == 1
    assert c["matched_submissions"] == 2
    assert c["coverage_pct"] == 100.0
    assert c["submissions_equal"]  # the totals are still compared exactly


def test_broken_kernel_timing_reads_as_no_agreement() -> None:
    """Kernel delays perturbed (×3 and +1 ms): coverage, a count, is unchanged, but nothing reads
    100 % — the timing check counts every submission whose kernel dispatch comes after the
    harness saw its work start, the console warns and prints no percentage of agreement."""
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_comparison_block
    from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness

    section = {"status": "ok", "source": "cpu_sched", "total_submissions": 3, "lost_events": 0}
    # (queue, seq, ring, rung, start, kind); kernel records [queue, seq, write ns, delay ns]
    subs = _subs(
        (0, 0, 1000, 1100, 4000, "op"), (0, 1, 2000, 2100, 7000, "marker"), (1, 0, 1500, 1600, 11500, "op")
    )
    true = [[0, 0, 1050, 1000], [0, 1, 2050, 2000], [1, 0, 1550, 4000]]
    good = compare_with_harness(section, subs, true)
    assert good["timing_checked"] == 3
    assert good["timing_inconsistent"] == 0
    assert good["accuracy_pct"] == good["coverage_pct"] == 100.0
    for broken in (
        [[q, s, w, 3 * d] for q, s, w, d in true],
        [[q, s, w, d + 1_000_000] for q, s, w, d in true],
    ):
        c = compare_with_harness(section, subs, broken)
        assert c["coverage_pct"] == 100.0  # the same submissions were seen: a count
        assert c["timing_inconsistent"] == 3
        out = io.StringIO()
        render_comparison_block(c, Console(file=out, width=200))
        text = out.getvalue()
        assert "Timing check:         0 of 3 matched: kernel dispatch before the harness's start" in text
        assert "kernel timing inconsistent: 3 of 3 matched submissions" in text
        assert "100.0%" not in text and "100 %" not in text
        assert "accuracy" not in text.lower().replace("accuracy_pct is its legacy alias", "")


def test_comparison_without_handoffs_is_null_with_reason() -> None:
    from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness

    c = compare_with_harness(
        {"status": "ok", "source": "amdgpu", "submit_to_dispatch_avg_us": 12.0}, None, None
    )
    assert c["coverage_pct"] is None
    assert c["harness_submit_to_start_ms"] is None
    assert c["reason"]
    assert c["kernel_submit_to_dispatch_ms"] == 0.012


def test_cpu_sched_without_registry_has_no_summary() -> None:
    r = CpuSchedFamily().collect({"@cpu_sched_seq": {"0": 1}}, CollectContext(attached=DOORBELL_EVENTS))
    assert r.metrics["summary"] is None


def test_amdgpu_collect_separates_internal_jobs() -> None:
    maps = {
        "@amdgpu_submits": {"gfx_0.0.0": 3},
        "@amdgpu_dispatches": {"gfx_0.0.0": 3},
        "@amdgpu_internal_jobs": {"sdma0": 9},
        "@amdgpu_s2d": {"count": 3, "average": 3000, "total": 9000},
    }
    r = AmdgpuFamily().collect(
        maps, CollectContext(attached=("amdgpu:amdgpu_cs_ioctl", "amdgpu:amdgpu_sched_run_job"))
    )
    assert r.metrics["summary"]["total_submissions"] == 3
    assert r.metrics["summary"]["hw_rings_used"] == ["gfx_0.0.0"]
    assert r.metrics["jobs_without_traced_submission"] == {"sdma0": 9}
    assert "user-mode queues" in r.coverage["statement"]


@pytest.mark.parametrize("family", [AmdgpuFamily, GpuSchedulerFamily])
def test_job_family_that_attached_nothing_reports_null_not_zero(family: type) -> None:
    """No amdgpu/drm_sched tracepoint attached (this machine): the counts were not measured, so
    they are null with the reason, never 0; an attached family with no events does say 0."""
    r = family().collect({}, CollectContext(attached=()))
    summary = r.metrics["summary"]
    for key in ("total_submissions", "total_dispatches", "hw_rings_used"):
        assert summary[key] is None, key
    assert summary["summary_reason"].startswith("not measured: ")
    assert all(v is None for k, v in r.metrics.items() if k.endswith("_per_ring"))
    assert r.metrics["jobs_without_traced_submission"] is None
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_queue_block

    out = io.StringIO()
    section = {
        "status": "ok",
        "total_submissions": None,
        "lost_events": 0,
        "families": {
            r.family: {"metrics": r.metrics, "events_attached": [], "events_missing": {"e": "absent"}}
        },
    }
    render_queue_block(section, Console(file=out, width=200))
    assert (
        f"not attached on this machine (not measured, null in the JSON): {r.family} (absent)"
        in out.getvalue()
    )
    attached = family().collect({}, CollectContext(attached=tuple(family().wanted_events())))
    assert attached.metrics["summary"]["total_submissions"] == 0
    assert "summary_reason" not in attached.metrics["summary"]


def test_multiplexing_verdict() -> None:
    inv = {"queues": [{"type": "compute"}] * 4}
    assert multiplexing_verdict([], inv, 8)["verdict"] == "multiplexed"
    assert (
        multiplexing_verdict([], {"queues": [{"type": "compute"}] * 8}, 8)["verdict"]
        == "one hardware queue per stream"
    )
    assert multiplexing_verdict([], {"queues": None}, 8)["verdict"] is None


def test_interpretation_bands() -> None:
    from aorta.ebpf.engine import interpret_queue

    lines = interpret_queue(
        {
            "submit_to_dispatch_avg_us": 150.0,
            "submit_to_dispatch_p99_us": 2000.0,
            "hw_rings_used": [0, 1, 2, 3],
        },
        8,
    )
    assert "contention" in lines[0]
    assert "stalls" in lines[1]
    assert "multiplexed" in lines[2]
    assert interpret_queue({"submit_to_dispatch_avg_us": None, "hw_rings_used": None}, 8) == []


def test_probe_cost_without_bpf_programs_says_why() -> None:
    import os

    from aorta.ebpf.session import probe_cost

    cost = probe_cost(os.getpid())
    assert cost["programs"] == 0
    assert cost["run_time_ms"] is None
    assert cost["reason"]


def test_queue_block_renders_unknown_counters_as_na() -> None:
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_queue_block

    row = {
        "tid": 5,
        "comm": "x",
        "queue": None,
        "helper_of_queue": None,
        "submitter": False,
        "streams": None,
        "submissions": 3,
        "dispatches": 3,
        "submit_to_dispatch_avg_us": 1.0,
        "submit_to_dispatch_p99_us": None,
        "on_cpu_ms": None,
        "kernel_run_delay_ms": None,
        "switches": None,
        "involuntary": None,
        "cpus": [],
    }
    section = {
        "status": "ok",
        "total_submissions": None,
        "lost_events": 0,
        "families": {"cpu_sched": {"metrics": {"threads": [row]}, "events_attached": ["e"]}},
    }
    out = io.StringIO()
    render_queue_block(section, Console(file=out, width=200))
    assert "n/a" in out.getvalue()
    assert "Total submissions:" in out.getvalue()


def test_per_thread_p99_estimate_is_marked_beside_an_exact_one() -> None:
    """The headline P99 says "exact"; a per-thread P99 from the histogram carries ≈ (legend in
    the header), an exact one none, and a thread that is no traced worker shows n/a, not 0."""
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_queue_block

    def row(tid: int, queue: int | None, p99: float | None, method: str | None) -> dict:
        return {
            "tid": tid,
            "comm": "aorta-hwq0" if queue is not None else "python",
            "queue": queue,
            "helper_of_queue": None,
            "submitter": False,
            "streams": [queue] if queue is not None else None,
            "submissions": 4 if queue is not None else None,
            "dispatches": 4 if queue is not None else None,
            "submit_to_dispatch_avg_us": 1.0 if queue is not None else None,
            "submit_to_dispatch_p99_us": p99,
            "submit_to_dispatch_p99_method": method,
            "on_cpu_ms": 1.0,
            "kernel_run_delay_ms": 0.1,
            "switches": 3,
            "involuntary": 1,
            "cpus": [0],
        }

    threads = [row(11, 0, 12.5, "exact"), row(12, 1, 40.25, "log-linear estimate"), row(13, None, None, None)]
    section = {
        "status": "ok",
        "total_submissions": 8,
        "submit_to_dispatch_p99_us": 40.0,
        "submit_to_dispatch_p99": {"value": 40000.0, "method": "exact", "count": 8},
        "lost_events": 0,
        "families": {"cpu_sched": {"metrics": {"threads": threads}, "events_attached": ["e"]}},
    }
    out = io.StringIO()
    render_queue_block(section, Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    assert "(exact, 8 events)" in out.getvalue()
    assert "≈ = log-linear histogram estimate" in out.getvalue()
    by_tid = {line.split()[2]: line for line in lines if line.strip().startswith(("q0", "q1", "-"))}
    assert " 12.5us " in by_tid["11"] and "≈12.5us" not in by_tid["11"]
    assert "≈40.2us" in by_tid["12"]
    assert by_tid["13"].split()[3:6] == ["n/a", "n/a", "n/a"]


def test_comparison_block_prints_counts_and_reads_old_files() -> None:
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_blocks import render_comparison_block
    from aorta.hw_queue_eval.tracing.harness_comparison import compare_with_harness

    section = {"status": "ok", "source": "cpu_sched", "total_submissions": 1, "lost_events": 0}
    c = compare_with_harness(section, _subs((0, 0, 1000, 1100, 5000, "op")), [[0, 0, 1050, 3000]])
    out = io.StringIO()
    render_comparison_block(c, Console(file=out, width=200))
    text = out.getvalue()
    assert "eBPF submit→dispatch: 0.003 ms  (n=1)" in text
    assert "Harness submit→start: 0.004 ms  (n=1)" in text
    assert "eBPF vs HARNESS COMPARISON (CPU queue hand-offs):" in text
    assert "CUDA" not in text
    assert "Coverage:             1 of 1 harness submissions matched by a kernel record" in text
    assert "(kernel counted 1 of 1; lost events 0)" in text
    assert "Timing check:         1 of 1 matched: kernel dispatch before the harness's start" in text
    assert "Measurement accuracy" not in text
    assert "Kernel-visible share: 75.0%" in text
    old = {
        "status": "ok",
        "ebpf_submit_to_dispatch_ms": 0.01,
        "harness_dispatch_delay_ms": 0.2,
        "measurement_accuracy_pct": 5.0,
    }
    out = io.StringIO()
    render_comparison_block(old, Console(file=out, width=200))
    assert "Kernel-visible share: 5.0%" in out.getvalue()
    assert "old result file" in out.getvalue()
    assert "Measurement accuracy" not in out.getvalue()


def _queue_result(family: str, submissions: int, p99_us: float) -> FamilyResult:
    """A queue family's collect output with only the summary keys every family reports."""
    summary = {
        "source": family,
        "total_submissions": submissions,
        "total_dispatches": submissions,
        "hw_rings_used": [0] if submissions else [],
        "submit_to_dispatch_avg_us": p99_us / 2 if submissions else None,
        "submit_to_dispatch_p99_us": p99_us if submissions else None,
    }
    return FamilyResult(family, "queue", {"summary": summary}, {})


def _queue_section(results: list[FamilyResult], backend: str | None) -> dict:
    from aorta.ebpf import engine
    from aorta.ebpf.session import SessionOutput

    program = Program(text="", token=1, families=[])
    ready = engine.Readiness(True, None, "/usr/bin/bpftrace", (0, 17, 0), [], "root", None, "test")
    output = SessionOutput(exit_code=0)
    return engine.build_sections(program, output, results, ready, True, False, backend)["ebpf_queue_metrics"]


def test_queue_summary_comes_from_the_backends_documented_family() -> None:
    """amdgpu precedes cpu_sched in the registry and saw events, yet a CPU run's figure is
    cpu_sched's; a GPU run's is amdgpu's. Each whole, `source` naming the family."""
    results = [_queue_result("amdgpu", 9, 900.0), _queue_result("cpu_sched", 4, 40.0)]
    cpu = _queue_section(results, "cpu")
    assert cpu["source"] == "cpu_sched"
    assert cpu["submit_to_dispatch_p99_us"] == 40.0
    assert cpu["total_submissions"] == 4
    gpu = _queue_section(results, "gpu")
    assert gpu["source"] == "amdgpu"
    assert gpu["submit_to_dispatch_p99_us"] == 900.0
    assert _queue_section(results, None)["source"] == "amdgpu"  # ebpf-attach: a GPU process


def test_queue_summary_is_null_when_the_documented_family_saw_nothing() -> None:
    """Another family's events never stand in for the documented family's missing figure."""
    results = [_queue_result("amdgpu", 9, 900.0), _queue_result("cpu_sched", 0, 0.0)]
    section = _queue_section(results, "cpu")
    assert "source" not in section
    assert section["submit_to_dispatch_p99_us"] is None
    assert section["total_submissions"] is None
    assert section["summary_reason"].startswith("no queue family saw submissions")
    assert section["families"]["amdgpu"]["metrics"]["summary"]["submit_to_dispatch_p99_us"] == 900.0


def test_memory_families_summaries_never_overwrite_each_other() -> None:
    """The memory section shows every memory family's summary side by side: their keys must be
    disjoint, or one family's figure would silently replace the other's."""
    from aorta.ebpf.probes.amd_memory import guide_summary
    from aorta.ebpf.probes.host_memory import host_summary

    gpu, host = set(guide_summary({}, None)), set(host_summary({}))
    assert gpu
    assert host
    assert not gpu & host


def test_bpftrace_version_is_asked_once_per_binary(tmp_path) -> None:
    """`bpftrace --version` runs once per executable; a rebuilt one (new size/mtime) is asked
    again, and a failure is not cached."""
    import os

    from aorta.ebpf.session import bpftrace_version

    calls = tmp_path / "calls"
    fake = tmp_path / "bpftrace"

    def write(version: str) -> None:
        fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'bpftrace {version}'\n")
        fake.chmod(0o755)

    write("v0.17.0")
    assert bpftrace_version(str(fake)) == (0, 17, 0)
    assert bpftrace_version(str(fake)) == (0, 17, 0)
    assert calls.read_text().count("x") == 1
    write("v0.21.2")
    os.utime(fake, ns=(1, 1))  # a different mtime, whatever the clock's resolution
    assert bpftrace_version(str(fake)) == (0, 21, 2)
    assert calls.read_text().count("x") == 2
    write("garbage")
    os.utime(fake, ns=(2, 2))
    assert bpftrace_version(str(fake)) is None
    assert bpftrace_version(str(fake)) is None
    assert calls.read_text().count("x") == 4


def test_reader_keeps_draining_after_a_line_it_cannot_handle() -> None:
    """A reader that stopped on one bad line would leave bpftrace blocked on a full pipe."""
    session = _session()
    seen: list[str] = []

    def handle(line: str) -> None:
        if line == "bad\n":
            raise ValueError("boom")
        seen.append(line)

    session._drain(iter(["a\n", "bad\n", "b\n"]), handle)
    assert seen == ["a\n", "b\n"]
    assert session.output.stderr == ["aorta could not decode a line (ValueError: boom)"]

"""Map routing, histogram maths, lost-event parsing and family collect(): pure Python."""

from __future__ import annotations

from aorta.ebpf import hist
from aorta.ebpf.probes.amdgpu import AmdgpuFamily
from aorta.ebpf.probes.cpu_sched import CpuSchedFamily
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
    assert s.output.lost_events == 15 and s.output.lost_records == 3
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
    assert p is not None and 1024 <= p["estimate"] <= 2048
    assert hist.percentile([], 0.5) is None


def test_cpu_sched_attributes_threads_to_queues() -> None:
    maps = {
        "@cpu_sched_wakeups": {"11": 10, "12": 4, "99": 1},
        "@cpu_sched_runq_s": {"11,0": {"count": 10, "average": 2000, "total": 20000},
                              "12,0": {"count": 4, "average": 1000, "total": 4000}},
        "@cpu_sched_runq": {"11,0": [{"min": 1024, "max": 2047, "count": 10}],
                            "12,0": [{"min": 512, "max": 1023, "count": 4}]},
        "@cpu_sched_oncpu": {"11": 5_000_000, "12": 1_000_000},
        "@cpu_sched_comm": {"11,aorta-hwq0": 3, "99,aorta-hwq1": 1},
    }
    workers = [{"tid": 11, "queue": 0, "streams": (0, 2)}, {"tid": 12, "queue": 1, "streams": (1,)}]
    r = CpuSchedFamily().collect(maps, {"workers": workers})
    s = r.metrics["summary"]
    assert s["total_submissions"] == 14 and s["total_dispatches"] == 14
    assert s["hw_rings_used"] == [0, 1]
    assert abs(s["submit_to_dispatch_avg_us"] - 24000 / 14 / 1e3) < 1e-9
    helper = next(t for t in r.metrics["threads"] if t["tid"] == 99)
    assert helper["queue"] is None and helper["helper_of_queue"] == 1


def test_cpu_sched_without_registry_has_no_summary() -> None:
    r = CpuSchedFamily().collect({"@cpu_sched_wakeups": {"5": 1}}, {"workers": []})
    assert r.metrics["summary"] is None


def test_amdgpu_collect_separates_internal_jobs() -> None:
    maps = {"@amdgpu_submits": {"gfx_0.0.0": 3}, "@amdgpu_dispatches": {"gfx_0.0.0": 3},
            "@amdgpu_internal_jobs": {"sdma0": 9},
            "@amdgpu_s2d": {"count": 3, "average": 3000, "total": 9000}}
    r = AmdgpuFamily().collect(maps, {})
    assert r.metrics["summary"]["total_submissions"] == 3
    assert r.metrics["summary"]["hw_rings_used"] == ["gfx_0.0.0"]
    assert r.metrics["jobs_without_traced_submission"] == {"sdma0": 9}
    assert "user-mode queues" in r.coverage["statement"]


def test_multiplexing_verdict() -> None:
    inv = {"queues": [{"type": "compute"}] * 4}
    assert multiplexing_verdict([], inv, 8)["verdict"] == "multiplexed"
    assert multiplexing_verdict([], {"queues": [{"type": "compute"}] * 8}, 8)["verdict"] \
        == "one hardware queue per stream"
    assert multiplexing_verdict([], {"queues": None}, 8)["verdict"] is None


def test_interpretation_bands() -> None:
    from aorta.ebpf.engine import interpret_queue

    lines = interpret_queue({"submit_to_dispatch_avg_us": 150.0, "submit_to_dispatch_p99_us": 2000.0,
                             "hw_rings_used": [0, 1, 2, 3]}, 8)
    assert "contention" in lines[0] and "stalls" in lines[1] and "multiplexed" in lines[2]
    assert interpret_queue({"submit_to_dispatch_avg_us": None, "hw_rings_used": None}, 8) == []


def test_probe_cost_without_bpf_programs_says_why() -> None:
    import os

    from aorta.ebpf.session import probe_cost

    cost = probe_cost(os.getpid())
    assert cost["programs"] == 0 and cost["run_time_ms"] is None and cost["reason"]

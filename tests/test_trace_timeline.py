"""--trace-out's eBPF timeline: on-CPU and run-queue slices per thread, doorbells with flows to
their dispatch and on to the op, bounded with exact drop counts (issue 24 items 1-2)."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import timeline
from aorta.ebpf.probes import cpu_sched
from aorta.ebpf.tracefs import kernel_btf
from aorta.hw_queue_eval.report.trace import build_trace
from conftest import load_json, run_cli_inprocess
from ebpf_support import start_attach
from factories import op_intervals, queue_section, run_result
from trace_checks import HARNESS_EDGE_SWITCHES, thread_slices, validate_trace

ORIGIN = 5_000_000_000  # window_start_monotonic_ns of the synthetic run
HOST, W0, W1 = 100, 200, 201


def _synthetic() -> dict[str, Any]:
    """A run with 2 queues, its ops (µs since ORIGIN) and a timeline the kernel could have kept."""
    us = lambda t: ORIGIN + int(t * 1000)  # noqa: E731
    rows = [  # iteration, stream, queue, label, ready, start, end
        [0, 0, 0, 0, 9.0, 12.0, 30.0],
        [0, 1, 1, 0, 9.0, 25.0, 40.0],
        [0, 0, 0, 0, 31.0, 31.0, 50.0],
    ]
    tl = {
        "threads": [
            {"tid": W0, "label": "q0", "queue": 0},
            {"tid": W1, "label": "q1", "queue": 1},
            {"tid": HOST, "label": "host", "queue": None},
        ],
        "on_cpu": {
            "rows": [
                [HOST, us(0), us(9.5), None],  # clipped at the window start: no charged time
                [W0, us(11), us(51), 39_000],
                [W1, us(24), us(41), 16_500],
                [HOST, us(20), us(60), 40_000],
            ],
            "seen": 6,
            "kept": 4,
            "dropped": 2,
        },
        "run_queue": {
            "rows": [[W1, us(15), us(24)], [HOST, us(9.5), us(20)]],
            "seen": 2,
            "kept": 2,
            "dropped": 0,
        },
        "doorbells": {
            "rows": [[0, 0, HOST, us(9), us(11)], [1, 0, HOST, us(9.2), us(24)]],
            "seen": 3,
            "kept": 2,
            "dropped": 1,
        },
    }
    result = run_result(
        streams=2,
        op_intervals=op_intervals(rows, ["mm"]),
        ebpf_queue_metrics=queue_section("cpu_sched", submissions=3, metrics={"timeline": tl}),
    )
    result["metadata"] = {**(result.get("metadata") or {}), "window_start_monotonic_ns": ORIGIN}
    return result


def _tracks(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def test_timeline_tracks_doorbells_and_flows() -> None:
    trace = build_trace(_synthetic())
    assert validate_trace(trace) == []
    names = _tracks(trace)
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == 4]
    on_cpu = defaultdict(float)
    for e in slices:
        if e["name"] == "on CPU":
            on_cpu[names[(4, e["tid"])]] += e["dur"]
    assert on_cpu == {"host tid 100 on CPU": 49.5, "q0 tid 200 on CPU": 40.0, "q1 tid 201 on CPU": 17.0}
    charged = sorted((e["ts"], e["args"]["charged_us"]) for e in slices if e["name"] == "on CPU")
    assert charged == [(0.0, None), (11.0, 39.0), (20.0, 40.0), (24.0, 16.5)]
    waits = {names[(4, e["tid"])]: (e["ts"], e["dur"]) for e in slices if e["name"] == "run queue"}
    assert waits == {"q1 tid 201 run queue": (15.0, 9.0), "host tid 100 run queue": (9.5, 10.5)}
    bells = [e for e in events if e.get("cat") == "doorbell"]
    assert [(names[(4, e["tid"])], e["ts"]) for e in bells] == [
        ("host tid 100 on CPU", 9.0),
        ("host tid 100 on CPU", 9.2),
    ]
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "dispatch"}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "dispatch"}
    hops = sorted(
        ((names[(s["pid"], s["tid"])], s["ts"]), (names[(ends[i]["pid"], ends[i]["tid"])], ends[i]["ts"]))
        for i, s in starts.items()
    )
    assert hops == [
        (("host tid 100 on CPU", 9.0), ("q0 tid 200 on CPU", 11.0)),  # doorbell → dispatch
        (("host tid 100 on CPU", 9.2), ("q1 tid 201 on CPU", 24.0)),
        (("q0 tid 200 on CPU", 11.0), ("queue 0", 12.0)),  # dispatch → the op it started
        (("q1 tid 201 on CPU", 24.0), ("queue 1", 25.0)),
    ]
    meta = trace["otherData"]["ebpf_timeline"]
    assert meta["on_cpu"] == {"seen": 6, "kept": 4, "dropped": 2, "in_trace": 4}
    assert meta["doorbells"] == {"seen": 3, "kept": 2, "dropped": 1, "in_trace": 2}


def test_memory_timeline_counter_slices_and_instants() -> None:
    result = _synthetic()
    start = ORIGIN + 2_000  # the kernel's window opened 2 µs after the ops' origin
    result["ebpf_memory_metrics"] = {
        "families": {
            "hostmem": {
                "metrics": {
                    "timeline": {
                        "page_faults_per_ms": {
                            "rows": [[0, 5], [1, 2], [4, 7]],
                            "seen": 20,
                            "kept": 14,
                            "dropped": 6,
                        },
                        "bucket_origin_monotonic_ns": start,
                        "direct_reclaim": {
                            "rows": [[HOST, start + 1000, start + 5000, None]],
                            "seen": 1,
                            "kept": 1,
                            "dropped": 0,
                        },
                        "memcg_reclaim": {"rows": [], "seen": 0, "kept": 0, "dropped": 0},
                        "migrations": {"rows": [[start + 3000, 12]], "seen": 1, "kept": 1, "dropped": 0},
                    }
                }
            }
        }
    }
    trace = build_trace(result)
    assert validate_trace(trace) == []
    mem = [e for e in trace["traceEvents"] if e["pid"] == 5 and e["ph"] != "M"]
    counter = [(e["ts"], e["args"]["faults"]) for e in mem if e["ph"] == "C"]
    assert counter == [(2.0, 5), (1002.0, 2), (2002.0, 0), (4002.0, 7), (5002.0, 0)]
    [reclaim] = [e for e in mem if e["ph"] == "X"]
    assert (reclaim["name"], reclaim["ts"], reclaim["dur"]) == ("direct reclaim", 3.0, 4.0)
    [migration] = [e for e in mem if e["ph"] == "i"]
    assert (migration["ts"], migration["args"]) == (5.0, {"pages": 12})
    assert trace["otherData"]["ebpf_memory_timeline"]["page_faults_per_ms"] == {
        "seen": 20,
        "kept": 14,
        "dropped": 6,
    }


def test_buckets_and_instants_from_printed_maps() -> None:
    maps = {
        "@hostmem_tlpf": {"0": 5, "3": 1},
        "@hostmem_tlpf_late": 4,
        "@hostmem_tlmig": {"1,0": 900, "0,0": 500},
        "@hostmem_tlmig_v": {"1,0": 3, "0,0": 8},
        "@hostmem_tlmig_n": {"0": 1, "1": 3},
    }
    assert timeline.buckets(maps, "hostmem_tlpf") == {
        "rows": [[0, 5], [3, 1]],
        "seen": 10,
        "kept": 6,
        "dropped": 4,
    }
    assert timeline.instants(maps, "hostmem_tlmig") == {
        "rows": [[500, 8], [900, 3]],
        "seen": 4,
        "kept": 2,
        "dropped": 2,
    }


def test_no_timeline_tracks_without_records() -> None:
    result = _synthetic()
    del result["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]["timeline"]
    trace = build_trace(result)
    assert not [e for e in trace["traceEvents"] if e["pid"] == 4]
    assert trace["otherData"]["ebpf_timeline"] is None


def test_validate_trace_flags_overlapping_slices_of_one_track() -> None:
    def x(ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
        return {"ph": "X", "name": "s", "pid": 4, "tid": tid, "ts": ts, "dur": dur}

    nested = {"traceEvents": [x(0, 10), x(2, 3), x(10, 5), x(1, 20, tid=2)]}
    assert validate_trace(nested) == []
    partial = {"traceEvents": [x(0, 10), x(5, 10)]}
    assert validate_trace(partial) == ["pid 4 tid 1: slice at 5 overlaps one ending at 10"]


def test_slices_from_printed_maps_count_what_the_cap_dropped() -> None:
    maps = {
        "@cpu_sched_tlon": {"0,0,7": 100, "0,1,7": 300, "1,0,8": 150},
        "@cpu_sched_tlon_e": {"0,0": 200, "0,1": 350, "1,0": 180},
        "@cpu_sched_tlon_n": {"0": 5, "1": 1},  # CPU 0 saw 5 slices and kept 2
        "@cpu_sched_tlsince": {"8": 400, "9": 990},  # 8 on a CPU at the close; 9 came after it
    }
    kind = timeline.slices(maps, "cpu_sched_tlon")
    assert kind == {
        "rows": [[7, 100, 200, None], [8, 150, 180, None], [7, 300, 350, None]],
        "seen": 6,
        "kept": 3,
        "dropped": 3,
    }
    timeline.open_slices(
        maps, "@cpu_sched_tlsince", {"start_monotonic_ns": 50, "stop_monotonic_ns": 900}, kind, 4
    )
    assert kind["rows"][-1] == [8, 400, 900, None]
    assert (kind["seen"], kind["kept"], kind["dropped"]) == (7, 4, 3)
    assert "unstarted" not in kind  # not tracked for this kind: absent, not 0
    # slices that ended in the window with no switch-in seen: 2 of thread 7 (charged 30 µs
    # together), 1 of thread 8 whose previous switch-out was not seen either (charge unknown)
    lost = {**maps, "@cpu_sched_tlon_u": {"7": 2, "8": 1}, "@cpu_sched_tlon_ux": {"7": 30_000}}
    tracked = timeline.slices(lost, "cpu_sched_tlon", unstarted=True)
    assert tracked["unstarted"] == 3 and tracked["unstarted_by_thread"] == [[7, 2, 30_000], [8, 1, None]]
    assert (tracked["seen"], tracked["kept"], tracked["dropped"]) == (6, 3, 3)  # seen: started ones


def test_slice_code_clips_to_the_window_and_caps_per_cpu() -> None:
    charged = timeline.Charged("$x", "$x0", "@cpu_sched_tlg[$p]", "@cpu_sched_tlc[$p]")
    code = "\n".join(timeline.slice_code("cpu_sched_tlon", "@cpu_sched_tlsince[$p]", "$p", 12, charged))
    assert "if ($a < $g0) { $a = $g0; }" in code  # a slice open at the start begins there
    assert "if (@aorta_gate == 0 && $g1 && $e > $g1) { $e = $g1; }" in code  # … one at the close ends there
    assert "@cpu_sched_tlon[cpu, $i, $p] = $a; @cpu_sched_tlon_e[cpu, $i] = $e;" in code
    # charged: counter at the end minus at the start; a clipped end is read at its marker instead
    assert "$c0 = $x0; if ($a != $a0) { $c0 = @cpu_sched_tlg[$p]; }" in code
    assert "$c1 = $x; if ($e != $t) { $c1 = @cpu_sched_tlc[$p]; }" in code
    assert "if ($c0 && $c1) { @cpu_sched_tlon_x[cpu, $i] = $c1 - $c0; }" in code
    assert "@cpu_sched_tlon_u" not in code  # unstarted slices only where asked
    lost = timeline.slice_code("cpu_sched_tlon", "@cpu_sched_tlsince[$p]", "$p", 12, charged, unstarted=True)
    # no switch-in seen, gate open: counted, charged from the previous switch-out (or the opening
    # marker, if later) to now
    assert lost[-1] == (
        "} else { if ($g0 && @aorta_gate) { @cpu_sched_tlon_u[$p] = count();"
        " $u0 = $x0; $u9 = @cpu_sched_tlg[$p]; if ($u9 > $u0) { $u0 = $u9; }"
        " $u1 = $x; if ($u0 && $u1) { @cpu_sched_tlon_ux[$p] = sum($u1 - $u0); } } }"
    )
    with pytest.raises(ValueError):
        timeline.slice_code("bad name", "$x", "$p", 1)


# -- real bpftrace -------------------------------------------------------------------------------


def _traced_run(tmp_path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    result_path, trace_path = tmp_path / "r.json", tmp_path / "t.json"
    proc = run_cli_inprocess(
        "run",
        "hetero_kernels",
        "--streams",
        "2",
        *extra,
        "-w",
        "2",
        "-d",
        "cpu",
        "--ebpf-trace",
        "-o",
        str(result_path),
        "--trace-out",
        str(trace_path),
    )
    assert proc.returncode == 0, proc.stderr
    result, trace = load_json(result_path), load_json(trace_path)
    assert result["ebpf_queue_metrics"]["status"] == "ok", result["ebpf_queue_metrics"].get("error")
    return result, trace


@pytest.mark.ebpf
@pytest.mark.slow
@pytest.mark.serial  # the slices must add up to the kernel's counters within 1 %: no sibling load
def test_traced_run_timeline_matches_the_aggregates(ebpf_ready: None, tmp_path: Path) -> None:
    result, trace = _traced_run(tmp_path, "-i", "150", "--ebpf-memory-trace")
    assert validate_trace(trace) == []
    faults = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "page faults per ms"]
    memory = result["ebpf_memory_metrics"]["families"]["hostmem"]["metrics"]
    assert memory["timeline"]["page_faults_per_ms"]["dropped"] == 0
    assert sum(e["args"]["faults"] for e in faults) == memory["page_faults"]["count"]  # every fault
    section = result["ebpf_queue_metrics"]
    meta = trace["otherData"]["ebpf_timeline"]
    assert meta["doorbells"]["dropped"] == 0
    events = trace["traceEvents"]
    bells = [e for e in events if e.get("cat") == "doorbell"]
    assert len(bells) == section["total_submissions"] > 0  # every doorbell, under the cap
    # no helper errors: each would be a record bpftrace prints and this process's reader thread
    # reads during the window (the unguarded deletes of absent keys made 722 in such a run)
    assert section["map_capacity"]["other_helper_errors"] == {}
    names = _tracks(trace)
    # every slice is charged: workers sleep at both window edges, and the harness thread's
    # slices the edges clip are charged from its counter read at the markers
    on_cpu = {
        tid: sum(e["args"]["charged_us"] for e in slices) / 1e3
        for (_, tid), slices in thread_slices(trace, "on CPU").items()
    }
    rows = section["families"]["cpu_sched"]["metrics"]["threads"]
    workers = [r for r in rows if r["queue"] is not None]
    assert workers
    assert section["families"]["cpu_sched"]["metrics"]["timeline"]["on_cpu"]["charged_from"] == (
        "sum_exec_runtime" if kernel_btf() else "sched_stat_runtime"
    )
    kept = section["families"]["cpu_sched"]["metrics"]["timeline"]["on_cpu"]
    assert kept["dropped"] == 0, kept  # else the kept slices cannot add up to the counter
    # + the charged time of slices whose switch-in the program did not see (counted, not drawn)
    unstarted = {tid: ns / 1e6 for tid, _, ns in kept["unstarted_by_thread"]}
    (host,) = [r for r in rows if r["submitter"]]
    for row in [*workers, host]:  # the slices add up to the kernel's own on-CPU counter of the thread
        charged_ms = on_cpu[row["tid"]] + unstarted.get(row["tid"], 0.0)
        assert charged_ms == pytest.approx(row["on_cpu_ms"], rel=0.01), (row, kept["unstarted_by_thread"])
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "dispatch"}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "dispatch"}
    from_bells = [s for s in starts.values() if s["name"].endswith("→ dispatch")]
    assert len(from_bells) == section["total_dispatches"]
    for start in from_bells:  # … to a dispatch at or after it, on its queue's worker
        end = ends[start["id"]]
        queue = start["name"].split()[1]
        assert end["ts"] >= start["ts"]
        assert names[(4, end["tid"])].startswith(f"{queue} tid ")
    for tid in {e["tid"] for e in events if e["ph"] == "X" and e["pid"] == 4}:
        track = sorted(
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e["ph"] == "X" and e.get("tid") == tid and e["pid"] == 4
        )
        assert all(a[1] <= b[0] + 1e-3 for a, b in itertools.pairwise(track))


@pytest.mark.ebpf
@pytest.mark.slow
def test_a_low_cap_drops_exactly_the_excess(
    ebpf_ready: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(timeline, "TIMELINE_EVENTS", 5 * cpus)  # 5 slices per CPU and kind
    monkeypatch.setattr(cpu_sched, "PER_SUBMISSION_CAP", 2 * 3)  # 3 doorbells per queue (2 queues)
    result, trace = _traced_run(tmp_path, "-i", "20")
    assert validate_trace(trace) == []
    section = result["ebpf_queue_metrics"]
    tl = section["families"]["cpu_sched"]["metrics"]["timeline"]
    per_queue = section["submissions_per_queue"]
    excess = sum(max(0, n - 3) for n in per_queue.values())
    assert excess > 0
    assert tl["doorbells"]["dropped"] == excess
    assert tl["doorbells"]["seen"] == section["total_submissions"]
    meta = trace["otherData"]["ebpf_timeline"]
    assert meta["doorbells"]["in_trace"] == section["total_submissions"] - excess
    skipped = section["probe_cost"]["recursion_misses"]  # program runs the kernel skipped
    for kind, count in slices_from_switches(section).items():
        assert count > 5 * cpus
        assert tl[kind]["kept"] <= 5 * cpus + len(tl["threads"])  # + slices open at the close
        # the kernel's count of what it saw against the threads' own switch counters, and dropped
        # is that count's excess over what was kept: exact for the workers; the harness thread's
        # count is off when it switches between its read and a marker (a GIL hand-off there is
        # two switches), and the kernel's count is short by any program run it skipped. A switch-in
        # the program did not see loses that slice and its run-queue wait: counted as unstarted
        low, high = count - HARNESS_EDGE_SWITCHES - skipped, count + HARNESS_EDGE_SWITCHES
        seen = tl[kind]["seen"] + tl["on_cpu"]["unstarted"]
        assert low <= seen <= high, (kind, tl[kind]["seen"], tl["on_cpu"]["unstarted"], count, skipped)
        assert low <= tl[kind]["dropped"] + tl[kind]["kept"] + tl["on_cpu"]["unstarted"] <= high
        assert meta[kind]["in_trace"] == tl[kind]["kept"]


def slices_from_switches(section: dict[str, Any]) -> dict[str, int]:
    """The on-CPU and run-queue slices the timeline must have seen, from an independent count:
    each followed thread's context switches in the window (its per-thread row: /proc status at
    the window edges; the harness thread's own getrusage right before each marker). A queue
    worker sleeps at both edges: one on-CPU slice and one run-queue wait per switch. The harness
    thread runs at both: as many waits as switches, one slice more (the one cut at the close)."""
    metrics = section["families"]["cpu_sched"]["metrics"]
    followed = {t["tid"] for t in metrics["timeline"]["threads"]}
    rows = [r for r in metrics["threads"] if r["tid"] in followed]
    assert len(rows) == len(followed) and sum(r["submitter"] for r in rows) == 1
    switches = sum(r["switches"] for r in rows)
    return {"on_cpu": switches + 1, "run_queue": switches}


@pytest.mark.parametrize("gen", ["linux-5.4", "linux-6.8", "linux-6.17"])
def test_the_timeline_is_rendered_only_when_asked(gen: str) -> None:
    from aorta.ebpf import engine
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.tracefs import Tracefs

    tf = Tracefs(Path(__file__).parent / "fixtures" / "tracefs" / gen)
    base = {"pids": (4242,), "thread_labels": {4243: "q0", 4242: "host"}, "doorbells": ((4242, 9, 4243, 0),)}
    plain = engine.make_program(True, True, TraceTarget(**base), tf, (0, 17, 0), token=7)
    traced = engine.make_program(True, True, TraceTarget(**base, timeline_events=64), tf, (0, 17, 0), token=7)
    assert "_tl" not in plain.text  # aggregates alone: no per-event store
    assert "@cpu_sched_tlon[cpu, $i, $p]" in traced.text
    assert "@cpu_sched_ringt[$q, $s] = tid;" in traced.text
    assert "@cpu_sched_tlwait[(int64)args" in traced.text  # sched_wakeup is in every fixture
    # sched_stat_runtime is not in the recorded formats: slices then carry no charged time
    assert traced.missing["cpu_sched"]["sched:sched_stat_runtime"].startswith("tracepoint absent")
    assert "@cpu_sched_tlon_x" not in traced.text


def test_charged_time_is_read_from_the_task_counter_where_the_kernel_has_btf() -> None:
    """With BTF the slice's charged time is the switched-out task's sum_exec_runtime (exact); the
    sched_stat_runtime sum is only the fallback: its program is skipped when a tick lands while
    another BPF program runs, which lost 2.4 % of a worker's on-CPU time in CI."""
    from aorta.ebpf import engine, marker
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.tracefs import Tracefs

    tf = Tracefs(Path(__file__).parent / "fixtures" / "tracefs" / "linux-6.8", btf=True)
    target = TraceTarget(
        (4242,), thread_labels={4243: "q0"}, doorbells=((4242, 9, 4243, 0),), timeline_events=64
    )
    traced = engine.make_program(True, True, target, tf, (0, 17, 0), token=7)
    assert "$x = curtask->se.sum_exec_runtime + 1;" in traced.text
    assert "@cpu_sched_tlon_x[cpu, $i] = $c1 - $c0;" in traced.text
    assert "sched_stat_runtime" not in traced.text  # no program on every tick of the machine
    assert "sched:sched_stat_runtime" not in traced.missing.get("cpu_sched", {})
    # the thread sending the markers (the harness) has its counter read in its marker syscall
    counter = "curtask->se.sum_exec_runtime"
    edges = (
        f"tracepoint:syscalls:sys_enter_prctl\n/args->option == {marker.MAGIC} && args->arg3 == 7 "
        "&& @cpu_sched_track[tid]/\n{\n  $p = (int64)tid;\n"
        f"  if (args->arg2 == {marker.WINDOW_START}) {{ @cpu_sched_tlg[$p] = {counter} + 1; }}\n"
        f"  if (args->arg2 == {marker.WINDOW_STOP}) {{ @cpu_sched_tlc[$p] = {counter} + 1; }}\n}}"
    )
    assert edges in traced.text


def test_the_harness_thread_is_followed_on_a_backend_without_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU backend has no queue workers: the harness thread, which makes its runtime calls, is
    still registered, so its on-CPU and run-queue slices are kept (the timeline's switch probe and
    its marker probe are rendered for it) and it is the per-thread table's submitter."""
    import threading

    from aorta.ebpf import engine
    from aorta.ebpf.tracefs import Tracefs
    from aorta.hw_queue_eval.tracing.window_tracer import EbpfTracer
    from ebpf_support import FakeGpuBackend

    tf = Tracefs(Path(__file__).parent / "fixtures" / "tracefs" / "linux-6.8", btf=True)
    ready = engine.Readiness(True, None, "/usr/bin/bpftrace", (0, 17, 0), [], "root", tf, "recorded")
    started: list[Any] = []
    monkeypatch.setattr(engine, "start_session", lambda program, ready: started.append(program))
    tracer = EbpfTracer(True, False, ready=ready, timeline=True)
    tracer.prepare(FakeGpuBackend([0x7000]), None)
    (program,) = started
    me = threading.get_native_id()
    assert tracer.submitter_tid == me and program.target.thread_labels == {me: cpu_sched.SUBMITTER_LABEL}
    assert f"@cpu_sched_track[{me}] = 1;" in program.text
    assert "sched:sched_switch (timeline)" not in program.missing["cpu_sched"]  # no "no registered threads"
    assert "@cpu_sched_tlon[cpu, $i, $p] = $a;" in program.text and "@cpu_sched_tlg[$p]" in program.text


@pytest.mark.ebpf
@pytest.mark.slow
def test_ebpf_attach_trace_out_draws_every_doorbell(ebpf_ready: None, tmp_path: Path) -> None:
    """ebpf-attach --trace-out on a live CPU-backend process: one doorbell instant per counted
    submission, each with a flow to a dispatch at or after it on its worker's track."""
    import json
    import subprocess
    import sys

    from test_ebpf_engine import ATTACH_TARGET

    target = subprocess.Popen(
        [sys.executable, "-c", ATTACH_TARGET.replace("HANDOFFS", "50")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, trace_path = tmp_path / "a.json", tmp_path / "a.trace.json"
    try:
        assert target.stdout is not None and target.stdin is not None
        target.stdout.readline()
        attach = start_attach(target.pid, "-o", str(out), "--trace-out", str(trace_path))
        target.stdin.write("go\n")
        target.stdin.flush()
        _, err = attach.communicate(timeout=120)
        assert attach.returncode == 0, err
    finally:
        target.kill()
        target.wait()
    data, trace = json.loads(out.read_text()), load_json(trace_path)
    assert validate_trace(trace) == []
    section = data["ebpf_queue_metrics"]
    bells = [e for e in trace["traceEvents"] if e.get("cat") == "doorbell"]
    assert len(bells) == section["total_submissions"] > 0
    names = _tracks(trace)
    starts = [e for e in trace["traceEvents"] if e["ph"] == "s" and e["name"].endswith("→ dispatch")]
    ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == section["total_dispatches"]
    for start in starts:
        end = ends[start["id"]]
        assert end["ts"] >= start["ts"]
        assert names[(4, end["tid"])].startswith(start["name"].split()[1] + " tid ")


@pytest.mark.parametrize("bad", [-1, True, 1.5, "16"])
def test_a_bad_timeline_size_is_refused(bad: Any) -> None:
    from aorta.ebpf.probes.base import TraceTarget
    from aorta.ebpf.program import ProgramError, validate_target

    with pytest.raises(ProgramError, match="invalid timeline_events"):
        validate_target(TraceTarget(pids=(1,), timeline_events=bad))


def test_wait_idle_waits_for_every_worker_to_sleep_on_its_doorbell() -> None:
    """The harness calls it before each tracer edge so that no edge cuts a worker's slice."""
    import time

    from aorta.hw_queue_eval.backends.cpu import CpuBackend

    backend = CpuBackend(2, pool_size=2)
    try:
        assert backend.wait_idle(5.0)
        backend.streams[0].launch(lambda: time.sleep(0.3), "long")
        began = time.monotonic()
        assert not backend.wait_idle(0.05)  # a worker is inside an op (not idle, though asleep)
        assert time.monotonic() - began >= 0.05
        backend.synchronize()
        assert backend.wait_idle(5.0)
        assert all(q._idle for q in backend._queues)
    finally:
        backend.close()


def test_a_worker_asleep_on_a_lock_is_not_waiting_on_its_doorbell() -> None:
    """State S is not enough: a worker past its idle flag also sleeps while it waits for the GIL
    or a lock, and runs the rest of its loop after the edge. Only the doorbell read counts."""
    import threading
    import time

    from aorta.hw_queue_eval.backends.cpu import _waits_on

    fd, lock = os.eventfd(0), threading.Lock()
    lock.acquire()
    on_fd = threading.Thread(target=os.eventfd_read, args=(fd,), daemon=True)
    on_lock = threading.Thread(target=lock.acquire, daemon=True)
    on_fd.start()
    on_lock.start()
    try:
        deadline = time.monotonic() + 10
        while not _waits_on(on_fd.native_id or 0, fd):
            assert time.monotonic() < deadline, "the eventfd reader never showed as blocked on it"
            time.sleep(0.01)
        assert not _waits_on(on_lock.native_id or 0, fd)  # asleep (S), but on the lock
        assert not _waits_on(threading.get_native_id(), fd)  # running: this thread
    finally:
        os.eventfd_write(fd, 1)
        lock.release()
        on_fd.join(5)
        on_lock.join(5)
        os.close(fd)

"""gpu_runtime's per-call timeline (--trace-out) and its trace process "GPU runtime (eBPF uprobes)".

Ground truth: the vendor driver's plan (tests/vendor_driver.py) of calls on the real libcudart:
every call of the window is one slice on its stream's track, each record → wait pair one flow.
The non-slow tests build the trace from a section recorded on that run
(fixtures/gpu_runtime_timeline_cudart.json: the printed @gpu_runtime_tl* maps and the window)
and from hand-made maps whose calls overlap, nest and exceed the cap. The last test drives the
real `run` path (harness → GPU backend → window tracer → result → trace) on tests/fake_cuda.py's
device, whose stream operations call the real libcudart: its log of those calls is the truth.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes import gpu_runtime_timeline as gtl
from aorta.ebpf.probes.base import CollectContext, RenderContext, StreamHandle, TraceTarget, Window
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.probes.gpu_runtime_apis import API_BY_ID, APIS
from aorta.ebpf.runtime_libs import MappedLibrary
from aorta.ebpf.session import stop_timeout_s
from aorta.hw_queue_eval.report.trace import PID_THREADS, build_trace
from aorta.hw_queue_eval.report.trace_gpu_runtime import PID_GPU_RUNTIME, lanes
from conftest import unavailable, vendor_library
from trace_checks import HARNESS_EDGE_SWITCHES, thread_slices, validate_trace
from vendor_driver import PLANS, Call

ROLE = {a.name: a.role for a in APIS}
FIXTURE = Path(__file__).parent / "fixtures" / "gpu_runtime_timeline_cudart.json"
KIND_ID = {name: ident for name, (ident, _) in gtl.KINDS.items()}


def harness_streams() -> dict[int, int]:
    """The handles of the cudart plan but the highest get a harness index (as in the vendor test)."""
    handles = sorted({c.stream for phase in ("before", "window") for c in PLANS["cudart"][phase]})
    return {h: i for i, h in enumerate(handles[:-1])}


def context(window: dict[str, Any]) -> CollectContext:
    """The collect context of a window given as the result's `window` block."""
    handles = tuple(StreamHandle(i, h) for h, i in harness_streams().items())
    edges = Window(window.get("start_monotonic_ns"), window.get("stop_monotonic_ns"))
    return CollectContext(window=edges, stream_handles=handles)


def result_with(tl: dict[str, Any], origin: int) -> dict[str, Any]:
    """A run result holding only the gpu_runtime timeline (what trace.py reads)."""
    return {
        "workload_name": "vendor plan",
        "stream_count": 0,
        "metadata": {"window_start_monotonic_ns": origin},
        "ebpf_queue_metrics": {"families": {"gpu_runtime": {"metrics": {"timeline": tl}}}},
    }


def strict_overlaps(trace: dict[str, Any], pid: int) -> list[str]:
    """Slices of one track of process `pid` that overlap at all (nesting counts too)."""
    tracks: dict[int, list[tuple[float, float]]] = {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "X" and ev["pid"] == pid:
            tracks.setdefault(ev["tid"], []).append((ev["ts"], ev["ts"] + ev["dur"]))
    problems = []
    for tid, slices in tracks.items():
        slices.sort()
        for (_, end), (start, _) in itertools.pairwise(slices):
            if start < end - 1e-6:
                problems.append(f"track {tid}: a slice starts at {start} before one ends at {end}")
    return problems


def gpu_slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == PID_GPU_RUNTIME]


def track_names(trace: dict[str, Any]) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["pid"] == PID_GPU_RUNTIME and e["name"] == "thread_name"
    }


def expected_per_stream(window: list[Call], index: dict[int, int]) -> Counter[tuple[str | None, str]]:
    """(stream track label, api) → calls, from the plan (device/event syncs have no stream);
    `index`: stream handle → harness stream index."""
    api = {a.name: a for a in APIS}
    out: Counter[tuple[str | None, str]] = Counter()
    for c in window:
        if ROLE[c.api] not in gtl.KIND_OF_ROLE:
            continue
        label = None if api[c.api].stream is None else _label(c.stream, index)
        out[(label, c.api)] += c.n
    return out


def _label(handle: int, index: dict[int, int]) -> str:
    i = index.get(handle)
    return f"stream {i} ({hex(handle)})" if i is not None else f"stream {hex(handle)}"


def expected_flows(window: list[Call]) -> Counter[tuple[str, str, str]]:
    """(event, producer stream, consumer stream) → waits whose event was recorded in the window."""
    last: dict[int, int] = {}
    out: Counter[tuple[str, str, str]] = Counter()
    for c in window:
        if ROLE[c.api] == "event_record":
            last[c.event] = c.stream
        elif ROLE[c.api] == "stream_wait" and c.event in last:
            out[(hex(c.event), hex(last[c.event]), hex(c.stream))] += c.n
    return out


def observed(trace: dict[str, Any]) -> tuple[Counter[tuple[str | None, str]], Counter[tuple[str, str, str]]]:
    """Slices per (track label without lane, api) and flows per (event, producer, consumer)."""
    names = track_names(trace)
    per: Counter[tuple[str | None, str]] = Counter()
    slices = gpu_slices(trace)
    for s in slices:
        label = names[s["tid"]].split(" · ")[0]
        per[(None if label.startswith("no stream") else label, s["name"])] += 1
    at = {(s["tid"], s["ts"]): s for s in slices}
    starts = {e["id"]: e for e in trace["traceEvents"] if e.get("ph") == "s" and e["pid"] == PID_GPU_RUNTIME}
    flows: Counter[tuple[str, str, str]] = Counter()
    for f in (e for e in trace["traceEvents"] if e.get("ph") == "f" and e["pid"] == PID_GPU_RUNTIME):
        src, dst = at[(starts[f["id"]]["tid"], starts[f["id"]]["ts"])], at[(f["tid"], f["ts"])]
        assert src["args"]["call_kind"] == "event_record" and dst["args"]["call_kind"] == "stream_wait"
        assert src["args"]["stream"] in names[starts[f["id"]]["tid"]]  # on the producer's track
        assert dst["args"]["stream"] in names[f["tid"]]  # it ends on the consumer's track
        assert src["args"]["event"] == dst["args"]["event"]
        assert src["ts"] <= dst["ts"]
        flows[(dst["args"]["event"], src["args"]["stream"], dst["args"]["stream"])] += 1
    return per, flows


# -- from a recorded section (no eBPF) ----------------------------------------------------------
def test_trace_from_the_recorded_cudart_section_has_every_planned_call_and_flow() -> None:
    section = json.loads(FIXTURE.read_text())
    window = section["window"]
    tl = gtl.collect(section["maps"], context(window), 1024)
    trace = trace_matching_the_plan(tl, window)
    plan = PLANS["cudart"]["window"]
    assert all(s["dur"] >= 0 and s["args"]["host_call_us"] == s["dur"] for s in gpu_slices(trace))
    copies = [s for s in gpu_slices(trace) if s["args"]["call_kind"] == "copy"]
    planned_bytes = Counter(
        (c.api, c.size) for c in plan for _ in range(c.n) if ROLE[c.api] in ("copy", "memset")
    )
    assert Counter((s["name"], s["args"]["bytes"]) for s in copies) == planned_bytes
    meta = trace["otherData"]["ebpf_gpu_runtime_timeline"]
    n_planned = Counter(
        gtl.KIND_OF_ROLE[ROLE[c.api]][0] for c in plan for _ in range(c.n) if ROLE[c.api] in gtl.KIND_OF_ROLE
    )
    for kind, part in meta["kinds"].items():
        assert part["seen"] == part["kept"] == part["in_trace"] == n_planned.get(kind, 0)
        assert part["dropped"] == 0 and part["complete_until_ns"] is None
    # e(7) was recorded before the window, e(9) never: their waits have no record to point at
    assert meta["waits_without_record"] == 2 and meta["flows"] == sum(expected_flows(plan).values())
    names = set(track_names(trace).values())
    assert _label(0x5101000, harness_streams()) in names and "stream 0x5106000" in names  # left out


def _maps(
    calls: list[tuple[int, int, int, int | None, int, int, int]], seen: dict[tuple[int, int], int]
) -> dict[str, Any]:
    """Printed maps of calls (tid, kind id, start, end, api id, stream, extra) in slot order."""
    maps: dict[str, dict[str, Any]] = {gtl.TL: {}, f"{gtl.TL}e": {}}
    slot: Counter[tuple[int, int]] = Counter()
    for tid, k, start, end, api, stream, extra in calls:
        key = f"{tid},{k},{slot[(tid, k)]}"
        slot[(tid, k)] += 1
        maps[gtl.TL][key] = [start, stream, api, extra]
        if end is not None:
            maps[f"{gtl.TL}e"][key] = end
    maps[f"{gtl.TL}n"] = {f"{t},{k}": n for (t, k), n in seen.items()}
    return maps


def test_overlapping_calls_of_two_threads_go_to_lanes_and_capped_records_draw_no_flow() -> None:
    launch, rec, wait = KIND_ID["launch"], KIND_ID["event_record"], KIND_ID["stream_wait"]
    s1, ev = 0x5101000, 0xE100100
    calls = [  # µs after the origin; two threads on stream s1
        (10, launch, 1_000, 5_000, 11, s1, 0),
        (20, launch, 2_000, 3_000, 11, s1, 0),  # inside thread 10's call: lane 2
        (20, launch, 3_000, 6_000, 11, s1, 0),  # starts as the last ends: lane 2 again
        (10, launch, 5_000, 5_500, 11, s1, 0),  # thread 10's next call: lane 1
        (10, rec, 7_000, 7_100, 183, s1, ev),
        (20, wait, 8_000, 8_200, 193, 0x5102000, ev),  # recorded before: a flow
        (20, wait, 9_000, None, 193, 0x5102000, ev),  # never returned: not drawn, unfinished
    ]
    seen = {(10, launch): 2, (20, launch): 2, (10, rec): 3, (20, wait): 2}  # 2 records dropped
    window = {"start_monotonic_ns": 0, "stop_monotonic_ns": 20_000}
    tl = gtl.collect(_maps(calls, seen), context(window), 1)
    assert tl["kinds"]["event_record"]["dropped"] == 2
    assert tl["kinds"]["event_record"]["complete_until_ns"] == 7_000
    assert tl["kinds"]["stream_wait"]["unfinished"] == 1
    trace = build_trace(result_with(tl, 0))
    assert validate_trace(trace) == [] and strict_overlaps(trace, PID_GPU_RUNTIME) == []
    names = track_names(trace)
    lanes_of = sorted(
        (names[s["tid"]], s["ts"]) for s in gpu_slices(trace) if s["name"] == "cudaLaunchKernel"
    )
    assert [n.endswith("lane 2 (calls overlapping in time from other threads)") for n, _ in lanes_of] == [
        False,
        False,
        True,
        True,
    ]
    meta = trace["otherData"]["ebpf_gpu_runtime_timeline"]
    # the wait at 8 µs entered after the records were capped (7 µs): a dropped one may be its producer
    assert meta["flows"] == 0 and meta["waits_after_records_dropped"] == 1
    assert meta["kinds"]["stream_wait"]["in_trace"] == 1
    tl["kinds"]["event_record"]["complete_until_ns"] = None  # as if none was dropped
    trace = build_trace(result_with(tl, 0))
    assert trace["otherData"]["ebpf_gpu_runtime_timeline"]["flows"] == 1


def test_lanes_first_fit() -> None:
    rows = [{"start_ns": a, "end_ns": b} for a, b in ((0, 10), (2, 4), (3, 5), (4, 8), (10, 11))]
    assert lanes(rows) == [0, 1, 2, 1, 0]


def test_timeline_off_renders_the_default_program_and_on_only_adds_blocks(tmp_path: Path) -> None:
    from gpu_standins import build, gcc

    if gcc() is None:
        unavailable("gcc not installed (apt-get install gcc): the stand-in libraries are built with it")
    lib = build(tmp_path)["libcudart.so.12"]
    family = GpuRuntimeFamily(libraries=[MappedLibrary("cudart", str(lib), str(lib), 1)])

    def render(events: int) -> list[str]:
        ctx = RenderContext(None, None, TraceTarget((1,), timeline_events=events), "1", "1")  # type: ignore[arg-type]
        return family.render(ctx).probes

    off, on = render(0), render(32)
    assert family.timeline_cap == 2
    assert not any(gtl.TL in b for b in off)
    assert [b for b in on if gtl.TL not in b] == off
    wanted = [a for a in family.attached if gtl.wanted(next(x for x in APIS if x.name == a.api))]
    assert len(on) - len(off) == 2 * len(wanted)  # one entry and one return block each
    assert all("if ($n < 2)" in b for b in on if gtl.TL in b and b.startswith("uprobe:"))


def test_packed_api_and_kind_decode() -> None:
    api = next(a for a in API_BY_ID.values() if a.name == "cudaMemcpyAsync")
    row = gtl._row("copy", 5, 1, 2, api.ident | (2 << 16), 0x10, 4096)
    assert list(row) == [5, 1, 2, "cudaMemcpyAsync", "0x10", 4096, "D2H", None, None]
    nccl = next(a for a in API_BY_ID.values() if a.name == "ncclAllReduce")
    row = gtl._row("collective", 5, 1, 2, nccl.ident | (7 << 16), 0x10, 100)
    assert list(row[5:8]) == [400, "float32", 100]
    sync = next(a for a in API_BY_ID.values() if a.name == "cudaDeviceSynchronize")
    assert gtl._row("sync", 5, 1, 2, sync.ident, 0, None)[4] is None  # no stream argument


# -- real bpftrace on the real libcudart --------------------------------------------------------
def run_cudart_plan(timeline_events: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The vendor driver's cudart plan traced with the timeline on: the family's timeline and
    the window."""
    from ebpf_support import require_ebpf

    require_ebpf()
    path = vendor_library("cudart")
    driver = Path(__file__).parent / "vendor_driver.py"
    child = subprocess.Popen(
        [sys.executable, "-I", str(driver), "cudart", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def phase(name: str) -> None:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(name + "\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "done"

    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        ready = engine.check_readiness()
        family = GpuRuntimeFamily()
        target = TraceTarget((child.pid,), timeline_events=timeline_events)
        program = engine.make_program(True, False, target, ready.tracefs, ready.version, families=[family])
        session = engine.start_session(program, ready)
        try:
            phase("before")
            session.window_start()
            phase("window")
            session.window_stop()
            phase("after")
        except BaseException:
            session.abort()
            raise
        out = session.stop(timeout_s=stop_timeout_s(session.output.attached_probes))
    finally:
        child.kill()
        child.wait()
    assert out.exit_code == 0, out.stderr
    window = engine.window_info(out)
    metrics = engine.collect_results(program, out, context(window))[0].metrics
    return metrics["timeline"], window


def trace_matching_the_plan(tl: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    """The trace of a timeline, checked valid, overlap-free and equal to the cudart plan's calls
    per stream and record → wait flows."""
    trace = build_trace(result_with(tl, window["start_monotonic_ns"]))
    assert validate_trace(trace) == []
    assert strict_overlaps(trace, PID_GPU_RUNTIME) == []
    plan = PLANS["cudart"]["window"]
    per, flows = observed(trace)
    assert per == expected_per_stream(plan, harness_streams())
    assert flows == expected_flows(plan)
    return trace


@pytest.mark.slow
@pytest.mark.ebpf
def test_real_libcudart_every_call_is_one_slice_on_its_stream_and_waits_flow_from_records() -> None:
    tl, window = run_cudart_plan(gtl.THREAD_SHARE * 1024)
    trace = trace_matching_the_plan(tl, window)
    for s in gpu_slices(trace):
        assert s["dur"] >= 0
        assert 0 <= s["ts"] <= (window["stop_monotonic_ns"] - window["start_monotonic_ns"]) / 1e3
    for kind in tl["kinds"].values():
        assert kind["dropped"] == 0 and kind["unfinished"] == 0 and kind["nested"] == 0
        assert all(r[2] >= r[1] for r in kind["rows"])


@pytest.mark.slow
@pytest.mark.ebpf
def test_real_libcudart_cap_drops_exactly_the_excess_and_keeps_the_first_calls() -> None:
    cap = 2
    tl, window = run_cudart_plan(gtl.THREAD_SHARE * cap)
    plan = PLANS["cudart"]["window"]
    order = [c for c in plan for _ in range(c.n) if ROLE[c.api] in gtl.KIND_OF_ROLE]
    for kind, part in tl["kinds"].items():
        planned = [c for c in order if gtl.KIND_OF_ROLE[ROLE[c.api]][0] == kind]
        assert part["seen"] == len(planned)
        assert part["kept"] == min(cap, len(planned))
        assert part["dropped"] == len(planned) - min(cap, len(planned))  # one driver thread
        assert [r[3] for r in part["rows"]] == [c.api for c in planned[:cap]]
        if part["dropped"]:
            assert part["complete_until_ns"] == part["rows"][-1][1]
    trace = build_trace(result_with(tl, window["start_monotonic_ns"]))
    assert validate_trace(trace) == [] and strict_overlaps(trace, PID_GPU_RUNTIME) == []
    meta = trace["otherData"]["ebpf_gpu_runtime_timeline"]
    assert {k: v["dropped"] for k, v in meta["kinds"].items()} == {
        k: v["dropped"] for k, v in tl["kinds"].items()
    }


# -- the real run path: `run -d cuda:0` on the fake device over the real libcudart ---------------
STREAMS, ITERATIONS = 4, 5
RUN = ("run", "graph_subgraphs", "--streams", str(STREAMS), "-d", "cuda:0", "--size", "small")
RUN_OPTIONS = ("-i", str(ITERATIONS), "-w", "2", "--ebpf-trace", "--ebpf-gpu-runtime")


def run_on_fake_gpu(tmp_path: Path) -> tuple[list[Call], dict[int, int], dict[str, Any], dict[str, Any]]:
    """`run graph_subgraphs` (fork/join: cross-stream waits) on the GPU backend with --ebpf-trace
    --ebpf-gpu-runtime --trace-out, through cli_with_fakes --fake-cuda-runtime (tests/fake_cuda.py's
    device, its stream operations calling the real libcudart): the calls made in the tracer's
    window, stream handle → harness index (GpuBackend creates its streams in index order, then
    its timer), the result and the trace."""
    from conftest import run_cli
    from ebpf_support import require_ebpf

    require_ebpf()
    vendor_library("cudart")
    log, result, trace = (tmp_path / name for name in ("calls.json", "result.json", "trace.json"))
    outputs = ("--trace-out", str(trace), "-o", str(result))
    proc = run_cli(*RUN, *RUN_OPTIONS, *outputs, fakes=("--fake-cuda-runtime", str(log)))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(log.read_text())
    window = [Call(api, 1, stream, event=event) for api, stream, event in made["window"]]
    index = {handle: i for i, handle in enumerate(made["streams"][:STREAMS])}
    return window, index, json.loads(result.read_text()), json.loads(trace.read_text())


def edges_of(window: list[Call], index: dict[int, int]) -> Counter[tuple[str, int | None, str, int | None]]:
    """(producer handle, its harness index, consumer handle, its index) → waits, from the calls
    (each wait's event was recorded in them)."""
    out: Counter[tuple[str, int | None, str, int | None]] = Counter()
    for (_, producer, consumer), n in expected_flows(window).items():
        p, c = int(producer, 16), int(consumer, 16)
        out[(producer, index.get(p), consumer, index.get(c))] += n
    return out


def check_result(window: list[Call], index: dict[int, int], result: dict[str, Any]) -> None:
    """gpu_runtime's launches and record → wait edges per stream handle and harness index are the
    calls made; launches the ops the harness issued; edges between harness streams the declared."""
    metrics = result["ebpf_queue_metrics"]["families"]["gpu_runtime"]["metrics"]
    launched = Counter((hex(c.stream), index[c.stream]) for c in window if c.api == "cudaLaunchKernel")
    assert {(r["handle"], r["stream_index"]): r["launches"] for r in metrics["streams"]} == launched
    assert {i: n for (_, i), n in launched.items()} == dict(enumerate(result["per_stream_op_counts"]))
    assert metrics["stream_handles_joined"] == {
        "harness_streams": STREAMS,
        "matched": STREAMS,
        "ebpf_streams_not_in_harness": 0,
    }
    comparison = result["ebpf_vs_cuda_comparison"]
    assert comparison["launches_matched"] == comparison["harness_ops"] == sum(launched.values())
    graph = metrics["stream_graph"]
    edges = {
        (e["producer"], e["producer_index"], e["consumer"], e["consumer_index"]): e["waits"]
        for e in graph["edges"]
    }
    assert edges == edges_of(window, index) and graph["waits_producer_unknown"] == []
    joined = {(p, c): n for (_, p, _, c), n in edges.items() if p is not None and c is not None}
    declared = {(d["producer"], d["consumer"]) for d in result["stream_order"]["declared"]}
    assert joined == dict.fromkeys(declared, ITERATIONS)


def check_trace(
    window: list[Call], index: dict[int, int], result: dict[str, Any], trace: dict[str, Any]
) -> None:
    """Process 7 has a track per harness stream named by its index (the timer stream by handle,
    device syncs on the no-stream track), each call of the window one slice inside it, no two
    overlapping on a track, one flow from each wait's record, and counts that say so."""
    assert validate_trace(trace) == [] and strict_overlaps(trace, PID_GPU_RUNTIME) == []
    timer = {c.stream for c in window if c.stream and c.stream not in index}
    assert len(timer) == 1
    assert set(track_names(trace).values()) == {
        *(_label(h, index) for h in (*index, *timer)),
        "no stream (device / event syncs)",
    }
    waits = sum(1 for c in window if c.api == "cudaStreamWaitEvent")
    per, flows = observed(trace)
    assert per == expected_per_stream(window, index)
    assert flows == expected_flows(window) and sum(flows.values()) == waits
    window_us = (result["ebpf_queue_metrics"]["window"]["stop_monotonic_ns"] - trace_origin(result)) / 1e3
    assert all(s["ts"] > 0 and s["ts"] + s["dur"] < window_us for s in gpu_slices(trace))
    meta = trace["otherData"]["ebpf_gpu_runtime_timeline"]
    kinds = Counter(gtl.KIND_OF_ROLE[ROLE[c.api]][0] for c in window)
    for kind, part in meta["kinds"].items():
        assert part["seen"] == part["kept"] == part["in_trace"] == kinds.get(kind, 0), kind
        assert part["dropped"] == part["nested"] == part["unfinished"] == 0, kind
    assert meta["flows"] == waits and meta["waits_without_record"] == meta["waits_after_records_dropped"] == 0


def check_host_thread(window: list[Call], result: dict[str, Any], trace: dict[str, Any]) -> None:
    """The harness thread, which makes every runtime call of a GPU run, has its eBPF thread
    tracks: on-CPU slices that never overlap, each charged, adding up to the result's per-thread
    on-CPU time (its CPU clock at the markers) within 1 % as the CPU backend's workers do. Each
    device sync of the window blocks it (fake_cuda's sync_block_s): at least one more slice than
    syncs. It runs at both edges: one more slice than its switches in the window, whose count the
    result reads right before each marker (give or take a switch between that read and the
    marker; fewer by the program runs the kernel skipped, probe_cost.recursion_misses)."""
    metrics = result["ebpf_queue_metrics"]["families"]["cpu_sched"]["metrics"]
    assert metrics["timeline"]["threads"] == [
        {"tid": row["tid"], "label": "host", "queue": None} for row in metrics["threads"] if row["submitter"]
    ]
    (row,) = [r for r in metrics["threads"] if r["submitter"]]
    assert metrics["timeline"]["on_cpu"]["dropped"] == metrics["timeline"]["run_queue"]["dropped"] == 0
    slices = thread_slices(trace, "on CPU")[("host", row["tid"])]
    waits = thread_slices(trace, "run queue").get(("host", row["tid"]), [])
    syncs = sum(1 for c in window if c.api == "cudaDeviceSynchronize")
    assert syncs > 0 and len(slices) >= syncs + 1
    skipped = result["ebpf_queue_metrics"]["probe_cost"]["recursion_misses"]  # runs the kernel skipped
    # slices whose switch-in the program did not see: counted with their charged ns, not drawn
    (lost, lost_ns) = next(
        ((n, ns) for tid, n, ns in metrics["timeline"]["on_cpu"]["unstarted_by_thread"] if tid == row["tid"]),
        (0, 0),
    )
    edge = HARNESS_EDGE_SWITCHES
    assert row["switches"] + 1 - edge - skipped <= len(slices) + lost <= row["switches"] + 1 + edge
    assert row["switches"] - edge - skipped <= len(waits) + lost <= row["switches"] + edge
    assert strict_overlaps(trace, PID_THREADS) == []
    assert all(s["args"]["charged_us"] is not None for s in slices)  # the edges too: read at the markers
    charged_ms = (sum(s["args"]["charged_us"] for s in slices) * 1e3 + lost_ns) / 1e6
    assert charged_ms == pytest.approx(row["on_cpu_ms"], rel=0.01), (row, len(slices), lost)


def trace_origin(result: dict[str, Any]) -> int:
    """The trace's origin: the GPU backend's window start, before the tracer's gate opened."""
    origin = result["metadata"]["window_start_monotonic_ns"]
    assert isinstance(origin, int) and origin < result["ebpf_queue_metrics"]["window"]["start_monotonic_ns"]
    return origin


@pytest.mark.slow
@pytest.mark.ebpf
def test_run_on_the_gpu_backend_traces_every_runtime_call_of_its_streams(tmp_path: Path) -> None:
    """harness → GPU backend → window tracer → result → --trace-out, every figure against the
    fake's log of the calls it made into the real libcudart inside the window, and the harness
    thread's on-CPU track against its counters in the result."""
    window, index, result, trace = run_on_fake_gpu(tmp_path)
    assert Counter(c.api for c in window)["cudaLaunchKernel"] == STREAMS * 2 * ITERATIONS  # 2 ops each
    check_result(window, index, result)
    check_trace(window, index, result, trace)
    check_host_thread(window, result, trace)

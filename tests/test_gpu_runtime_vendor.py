"""gpu_runtime against the real vendor libraries PyPI wheels ship (no GPU needed).

AMD's libamdhip64 and libhsa-runtime64 (ROCm 5.x, versioned exports), NVIDIA's libcudart.so.12
and libcudart.so.13 (CUDA 13: what torch 2.11's cu130 build loads) and libnccl.so.2 (weak
aliases) are fetched by `scripts/setup.sh --test` (tests/vendor_libs.py: pinned versions and
hashes, cached outside the checkout). A driver process (tests/vendor_driver.py) dlopens one of
them and makes a known plan of calls on fake stream/event handles; every call fails early, after
its entry uprobe fired. Ground truth: the plan itself (counts, bytes, directions, edges).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf import engine
from aorta.ebpf.elfsyms import function_addresses
from aorta.ebpf.probes.base import CollectContext, RenderContext, StreamHandle, TraceTarget, Window
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.probes.gpu_runtime_apis import APIS, MEMCPY_KINDS, NCCL_TYPE_SIZES, MissedProbe
from aorta.ebpf.probes.gpu_runtime_calibration import HitCosts
from aorta.ebpf.probes.gpu_runtime_views import ALL_VIEWS, DEFAULT_VIEWS
from aorta.ebpf.runtime_libs import RUNTIME_LIBS, MappedLibrary, own_libc
from conftest import unavailable, vendor_library
from ebpf_support import attached_probe
from vendor_driver import PLANS

ROLE = {a.name: a.role for a in APIS}
API = {a.name: a for a in APIS}
KIND = {"rocm": "hip", "hsa": "hsa", "cudart": "cudart", "cudart13": "cudart", "nccl": "nccl"}
# entry points of the family these library versions do not export (listed, with the reason)
ABSENT = {
    "rocm": {
        "hipLaunchKernelExC",
        "hipDrvLaunchKernelEx",
        "hipModuleLaunchKernel_spt",
        "hipModuleLaunchCooperativeKernel",
    },
    "hsa": set(),
    "cudart": set(),
    "cudart13": set(),  # CUDA 13 removed none of the probed entry points (its symbol table)
    "nccl": set(),
}
# probed functions whose first instruction is not a push (single-stepped: dearer per hit)
NOT_PUSH = {
    "nccl": {"ncclBcast"},  # sub $0x10,%rsp
    # ROCr's exported wrappers load the API table first: mov 0x…(%rip),%rax, then jump
    "hsa": {"hsa_queue_create", "hsa_signal_store_screlease", "hsa_signal_store_relaxed"},
}


def _render(family: GpuRuntimeFamily, pids: tuple[int, ...] = ()) -> list[str]:
    ctx = RenderContext(None, None, TraceTarget(pids), "1", "1")  # type: ignore[arg-type]
    return family.render(ctx).probes


def first_mnemonic(path: Path, address: int) -> str:
    """The mnemonic of the instruction at `address` in `path`, decoded by binutils' objdump."""
    objdump = shutil.which("objdump")
    if objdump is None:
        unavailable("objdump (binutils) not installed: cannot decode the entry instructions")
    out = subprocess.run(
        [objdump, "-d", f"--start-address={address:#x}", f"--stop-address={address + 8:#x}", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = next(x for x in out.splitlines() if x.strip().startswith(f"{address:x}:"))
    return line.split("\t")[2].split()[0]


def _library(key: str) -> Path:
    """The real library of `key`; hsa: the libhsa-runtime64.so of the ROCm wheel."""
    if key == "hsa":
        return vendor_library("rocm").with_name("libhsa-runtime64.so")
    return vendor_library(key)


@pytest.mark.slow  # reads libnccl.so.2 (470 MB)
@pytest.mark.parametrize("key", ["rocm", "hsa", "cudart", "cudart13", "nccl"])
def test_real_library_symbols_resolve_and_each_address_is_probed_once(key: str) -> None:
    path = _library(key)
    # the file name as a process maps it is matched to its runtime kind (runtime_libs)
    assert [kind for kind, pattern in RUNTIME_LIBS.items() if pattern.match(path.name)] == [KIND[key]]
    views = (*DEFAULT_VIEWS, "doorbells") if key == "hsa" else DEFAULT_VIEWS  # HSA: the doorbells view
    family = GpuRuntimeFamily(libraries=[MappedLibrary(KIND[key], str(path), str(path), 1)], views=views)
    probes = _render(family)
    attached = {a.api: a for a in family.attached}
    wanted = {a.name for a in APIS if a.lib == KIND[key]}
    assert set(attached) == wanted - ABSENT[key]
    assert {n.api for n in family.not_attached} == ABSENT[key]
    planned = {c.api for phase in PLANS.get(key, {}).values() for c in phase}
    assert planned <= set(attached)  # every API the driver calls is probed
    addresses = function_addresses(path)
    # probed by address (bpftrace 0.17 would also attach a plain name to every C++ function whose
    # demangled name starts with it: ncclGroupEnd → ncclGroupEndInternal(...), counted twice)
    heads = [b.splitlines()[0] for b in probes if b.startswith("uprobe:") and "// cost calibration" not in b]
    points = [int(h.rsplit(":", 1)[1], 16) for h in heads]
    # each probed function's first instruction as objdump decodes it: a push in all but NOT_PUSH
    # (single-stepped); one calibration probe per class
    first = {a.api: first_mnemonic(path, addresses[a.symbol].address) for a in family.attached}
    assert {a.api: a.entry_instruction for a in family.attached} == {
        api: "push" if m == "push" else "other" for api, m in first.items()
    }
    assert {api for api, m in first.items() if m != "push"} == NOT_PUSH.get(key, set())
    calibration = [b for b in probes if "// cost calibration" in b]
    assert len(calibration) == len({a.entry_instruction for a in family.attached})
    assert all(b.startswith(f"uprobe:{own_libc()}:") for b in calibration)
    assert len(points) == len(attached)
    assert len(set(points)) == len(points)  # one entry uprobe per address
    assert sorted(points) == sorted(addresses[a.symbol].address for a in family.attached)
    assert all(int(a.address, 16) == addresses[a.symbol].address for a in family.attached)
    assert all(f.offset == f.address for f in (addresses[a.symbol] for a in family.attached))
    if key == "nccl":
        assert addresses["ncclAllReduce"] == addresses["pncclAllReduce"]  # weak alias
        assert attached["ncclAllReduce"].symbol == "ncclAllReduce"
        assert not any(a.symbol.startswith("pnccl") for a in family.attached)
        assert attached["ncclAllToAll"].symbol == "ncclAlltoAll"  # NCCL's spelling
    if key == "rocm":  # versioned exports (hipLaunchKernel@@hip_4.2) resolve by their plain name
        assert attached["hipLaunchKernel"].symbol == "hipLaunchKernel"
        assert attached["hipGraphLaunch_spt"].symbol == "hipGraphLaunch_spt"
        assert attached["hipExtModuleLaunchKernel"].symbol.startswith("_Z24hipExtModuleLaunchKernel")


def _expected(key: str) -> dict[str, Any]:
    """Every count, byte and edge the window phase must produce (from the plan)."""
    launches: dict[str, dict[str, int]] = {}
    copies: dict[tuple[str, str], dict[str, Any]] = {}
    colls: dict[tuple[str, str], dict[str, Any]] = {}
    last = {c.event: c.stream for c in PLANS[key]["before"] if ROLE[c.api] == "event_record"}
    edges: dict[tuple[str, str], int] = {}
    unknown: dict[str, int] = {}
    syncs: dict[str, int] = {}
    other_syncs: dict[str, int] = {}
    groups: dict[str, int] = {}
    for c in PLANS[key]["window"]:
        role, h = ROLE[c.api], hex(c.stream)
        if role in ("launch", "graph_launch"):
            by_api = launches.setdefault(h, {})
            by_api[c.api] = by_api.get(c.api, 0) + c.n
        elif role in ("copy", "memset"):
            way = API[c.api].direction or MEMCPY_KINDS[c.kind]
            row = copies.setdefault((h, way), {"calls": 0, "bytes": 0, "by_api": {}})
            row["calls"] += c.n
            row["bytes"] += c.n * c.size
            row["by_api"][c.api] = row["by_api"].get(c.api, 0) + c.n
        elif role == "collective":
            row = colls.setdefault((h, c.api), {"calls": 0, "elements": 0, "bytes": 0})
            row["calls"] += c.n
            row["elements"] += c.n * c.size
            size = NCCL_TYPE_SIZES.get(c.kind)
            row["bytes"] = (
                None if size is None or row["bytes"] is None else row["bytes"] + c.n * c.size * size
            )
        elif role == "group":
            groups[c.api] = groups.get(c.api, 0) + c.n
        elif role == "event_record":
            last[c.event] = c.stream
        elif role == "stream_wait":
            if c.event in last:
                pair = (hex(last[c.event]), h)
                edges[pair] = edges.get(pair, 0) + c.n
            else:
                unknown[h] = unknown.get(h, 0) + c.n
        elif role == "sync_stream":
            syncs[h] = syncs.get(h, 0) + c.n
        else:
            other_syncs[c.api] = other_syncs.get(c.api, 0) + c.n
    return {
        "launches": launches,
        "copies": copies,
        "colls": colls,
        "groups": groups,
        "edges": edges,
        "unknown": unknown,
        "syncs": syncs,
        "other_syncs": other_syncs,
    }


def _harness_streams(key: str) -> dict[int, int]:
    """Fake harness streams: every plan stream handle but the highest gets an index (as the GPU
    backend's `stream_handles` does from torch's `cuda_stream`); the one left out plays a stream
    the harness did not create (torch's timing stream, a library's internal stream)."""
    handles = sorted({c.stream for phase in ("before", "window") for c in PLANS[key][phase]})
    return {h: i for i, h in enumerate(handles[:-1])}


def _phase(child: subprocess.Popen, name: str) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(name + "\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "done"


def _run_plan(key: str, views: tuple[str, ...] = DEFAULT_VIEWS) -> dict[str, Any]:
    """Trace the driver process through before / window / after; the family's metrics."""
    from ebpf_support import require_ebpf

    require_ebpf()
    path = vendor_library(key)
    driver = Path(__file__).parent / "vendor_driver.py"
    child = subprocess.Popen(
        [sys.executable, "-I", str(driver), key, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        ready = engine.check_readiness()
        family = GpuRuntimeFamily(views=views)
        program = engine.make_program(
            True, False, TraceTarget((child.pid,)), ready.tracefs, ready.version, families=[family]
        )
        session = engine.start_session(program, ready)
        try:
            _phase(child, "before")
            session.window_start()
            _phase(child, "window")
            session.window_stop()
            _phase(child, "after")
        except BaseException:
            session.abort()
            raise
        out = session.stop()
    finally:
        child.kill()
        child.wait()
    assert out.exit_code == 0, out.stderr
    assert out.lost_events == 0, out.stderr
    handles = tuple(StreamHandle(i, h) for h, i in _harness_streams(key).items())
    context = CollectContext(window=engine.window_edges(out), stream_handles=handles)
    return engine.collect_results(program, out, context)[0].metrics


def _check(key: str, m: dict[str, Any]) -> None:
    want = _expected(key)
    rows = {r["handle"]: r for r in m["streams"]}
    got_launches = {h: r["by_api"] for h, r in rows.items() if r["by_api"]}
    assert got_launches == want["launches"]
    for h, by_api in want["launches"].items():
        graphs = sum(n for a, n in by_api.items() if ROLE[a] == "graph_launch")
        assert rows[h]["graph_launches"] == graphs
        assert rows[h]["launches"] == sum(by_api.values()) - graphs
    copies = {(r["stream"], r["direction"]): r for r in m["copies"]}
    assert {k: {f: r[f] for f in ("calls", "bytes", "by_api")} for k, r in copies.items()} == want["copies"]
    if "times" in m["views_probed"]:  # host call time: entry → return
        assert all(r["host_call_ms"] is not None and r["host_call_ms"] > 0 for r in copies.values())
    else:  # not timed: null, never 0
        assert all(r["host_call_ms"] is None for r in copies.values())
        assert m["views"]["times"]["reason"] == "not probed: switched off (--ebpf-gpu-runtime-views)"
    colls = {(r["stream"], r["op"]): r for r in m["collectives"]}
    assert {k: {f: r[f] for f in ("calls", "elements", "bytes")} for k, r in colls.items()} == want["colls"]
    assert m["collective_groups"] == want["groups"]
    graph = m["stream_graph"]
    assert {(e["producer"], e["consumer"]): e["waits"] for e in graph["edges"]} == want["edges"]
    assert {w["consumer"]: w["waits"] for w in graph["waits_producer_unknown"]} == want["unknown"]
    assert {h: r["sync_calls"] for h, r in rows.items() if r["sync_calls"]} == want["syncs"]
    assert {d["api"]: d["calls"] for d in m["device_and_event_syncs"]} == want["other_syncs"]
    _check_joined(key, m)


def _check_joined(key: str, m: dict[str, Any]) -> None:
    """Every view's rows carry the harness's stream index through the same join as launches."""
    index = _harness_streams(key)
    at = lambda handle: index.get(int(handle, 16))  # noqa: E731
    assert all(r["stream_index"] == at(r["handle"]) for r in m["streams"])
    assert all(r["stream_index"] == at(r["stream"]) for r in m["copies"] + m["collectives"])
    graph = m["stream_graph"]
    for e in graph["edges"]:
        assert (e["producer_index"], e["consumer_index"]) == (at(e["producer"]), at(e["consumer"]))
    assert all(w["consumer_index"] == at(w["consumer"]) for w in graph["waits_producer_unknown"])
    joined = m["views_joined"]
    n_edges = sum(1 for e in graph["edges"] if None not in (at(e["producer"]), at(e["consumer"])))
    assert joined["stream_edges"] == {"joined": n_edges, "not_joined": len(graph["edges"]) - n_edges}
    n_copies = sum(1 for r in m["copies"] if at(r["stream"]) is not None)
    assert joined["copies"] == {"joined": n_copies, "not_joined": len(m["copies"]) - n_copies}
    rows = m["copies"] + m["collectives"] + m["streams"]
    assert any(r.get("stream_index") is None for r in rows) or not rows  # the left-out handle


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.parametrize("views", [DEFAULT_VIEWS, ALL_VIEWS], ids=["default_views", "all_views"])
@pytest.mark.parametrize("key", ["cudart", "cudart13"])  # CUDA 12 and CUDA 13's libcudart
def test_real_libcudart_every_launch_copy_event_and_sync_counted_exactly(
    key: str, views: tuple[str, ...]
) -> None:
    m = _run_plan(key, views)
    _check(key, m)
    assert m["views"]["collectives"]["probed"] == []
    assert "libnccl/librccl" in m["views"]["collectives"]["reason"]


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.parametrize("views", [DEFAULT_VIEWS, ALL_VIEWS], ids=["default_views", "all_views"])
def test_real_libamdhip64_every_launch_copy_event_and_sync_counted_exactly(views: tuple[str, ...]) -> None:
    m = _run_plan("rocm", views)
    _check("rocm", m)


@pytest.mark.slow
@pytest.mark.ebpf
@pytest.mark.parametrize("views", [DEFAULT_VIEWS, ALL_VIEWS], ids=["default_views", "all_views"])
def test_real_libnccl_collectives_counted_with_bytes_per_stream_and_op(views: tuple[str, ...]) -> None:
    m = _run_plan("nccl", views)
    _check("nccl", m)
    unknown = {r["op"]: r for r in m["collectives"] if r["bytes"] is None}
    assert set(unknown) == {"ncclAllReduce"}  # one call with datatype 99 spoils that row's bytes
    assert "datatype 99" in unknown["ncclAllReduce"]["bytes_reason"]
    assert m["views"]["launches"]["reason"].startswith("no ")


def test_views_from_printed_maps_recomputed_by_hand() -> None:
    """Maps as bpftrace 0.17 prints them (three-part keys, stats values, signed handles) → the
    copy / collective / stream-graph views and their console block; views not probed say why."""
    import io

    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_gpu_runtime import render_gpu_runtime_rows

    family = GpuRuntimeFamily(libraries=[], views=ALL_VIEWS)
    family.attached = [
        attached_probe(n, "other" if n == "cudaMemcpyAsync" else "push")
        for n in ("cudaMemcpyAsync", "cudaGraphLaunch", "cudaEventRecord")
    ]
    family.not_attached = [MissedProbe("ncclAllReduce", "/x/libnccl.so.2", "r")]
    st = lambda n, total: {"count": n, "average": total // n, "total": total}  # noqa: E731
    maps = {
        "@gpu_runtime_launches": {"11,4096": 3, "103,4096": 2},  # 103: cudaGraphLaunch
        "@gpu_runtime_copies": {
            "121,4096,1": st(3, 3 * 4096),  # cudaMemcpyAsync H2D
            "122,4096,1": st(1, 100),  # cudaMemcpyAsync_ptsz H2D, same row
            "123,-4096,2": st(2, 512),  # cudaMemcpy2DAsync D2H on a "negative" (high) handle
            "141,8192,0": st(1, 10),  # cudaMemsetAsync: direction from the API
            "121,8192,77": st(1, 5),  # an unknown kind value: named, not dropped
        },
        "@gpu_runtime_copies_ns": {"121,4096,1": st(3, 30000)},
        "@gpu_runtime_colls": {"151,4096,7": st(2, 1000), "151,4096,99": st(1, 8), "152,8192,9": st(1, 16)},
        "@gpu_runtime_colls_ns": {"152,8192,9": st(1, 5000)},
        "@gpu_runtime_groups": {"171": 4, "172": 4},
        "@gpu_runtime_edges": {"193,4096,8192": 3, "194,4096,8192": 1, "193,8192,4096": 2},
        "@gpu_runtime_wait_unknown": {"193,12288": 5},
        "@gpu_runtime_records": {"183,4096": 2},
    }
    start = HitCosts({"push": 1000, "other": 5000}, 2000, {}, "")  # pairs: 3000, 7000
    context = CollectContext(
        snapshots={"gpu_runtime": {"start": start}},
        window=Window(1, 1 + 10_000_000),  # 10 ms
        stream_handles=(StreamHandle(0, 4096), StreamHandle(1, 8192)),
    )
    m = family.collect(maps, context).metrics
    # probe cost: pairs = 2 graph launches (push first: 3000 ns) + 8 copies (another first
    # instruction: 7000 ns); entries (push: 1000 ns) = 2 records + 6 waits with a producer + 5
    # without. No kernel-launch or collective entry point was probed here, so their calls have
    # no cost class: null, and so are the totals and the cost per launch, with the reason
    cost = m["probe_cost"]
    assert cost["hits_in_window"] == 2 * (3 + 2 + 8 + 4) + (2 + 6 + 5 + 8)
    by_kind = cost["by_kind"]
    assert by_kind["copies"] == {
        "calls": 8,
        "hits": 16,
        "entry_instruction": "other",
        "probe_time_ms": 8 * 7000 / 1e6,
    }
    assert by_kind["event_records_and_waits"] == {
        "calls": 13,
        "hits": 13,
        "entry_instruction": "push",
        "probe_time_ms": 13 * 1000 / 1e6,
    }
    assert by_kind["graph_launches"]["probe_time_ms"] == 2 * 3000 / 1e6
    assert by_kind["collective_groups"] == {
        "calls": 8,
        "hits": 8,
        "entry_instruction": None,
        "probe_time_ms": None,
    }
    assert cost["per_launch_us"] is None
    assert cost["probe_time_in_window_ms"] is None and cost["window_share_pct"] is None
    assert cost["reason"] == (
        "no calibration probe of the entry-instruction class of: launches, collectives, collective_groups"
    )
    rows = {r["handle"]: r for r in m["streams"]}
    assert rows["0x1000"]["launches"] == 3
    assert rows["0x1000"]["graph_launches"] == 2
    assert m["graph_launches_total"] == 2
    assert m["launches_total"] == 3  # a graph launch is not a kernel launch
    copies = {(r["stream"], r["direction"]): r for r in m["copies"]}
    assert copies[("0x1000", "H2D")]["calls"] == 4
    assert copies[("0x1000", "H2D")]["bytes"] == 3 * 4096 + 100
    assert copies[("0x1000", "H2D")]["by_api"] == {"cudaMemcpyAsync": 3, "cudaMemcpyAsync_ptsz": 1}
    assert copies[("0x1000", "H2D")]["host_call_avg_us"] == 30000 / 3 / 1e3
    assert copies[("0xfffffffffffff000", "D2H")]["bytes"] == 512
    assert copies[("0xfffffffffffff000", "D2H")]["host_call_ms"] is None  # no return seen: null
    assert copies[("0x2000", "memset")]["bytes"] == 10
    assert copies[("0x2000", "kind 77")]["calls"] == 1
    colls = {(r["stream"], r["op"]): r for r in m["collectives"]}
    assert colls[("0x1000", "ncclAllReduce")]["calls"] == 3
    assert colls[("0x1000", "ncclAllReduce")]["elements"] == 1008
    assert colls[("0x1000", "ncclAllReduce")]["bytes"] is None  # datatype 99: size unknown
    assert colls[("0x2000", "ncclAllGather")]["bytes"] == 32  # 16 bfloat16
    assert colls[("0x2000", "ncclAllGather")]["host_call_avg_us"] == 5.0
    assert m["collective_groups"] == {"ncclGroupStart": 4, "ncclGroupEnd": 4}
    graph = m["stream_graph"]
    assert graph["edges"] == [
        {
            "producer": "0x1000",
            "consumer": "0x2000",
            "waits": 4,
            "by_api": {"cudaStreamWaitEvent": 3, "cudaStreamWaitEvent_ptsz": 1},
            "producer_index": 0,
            "consumer_index": 1,
        },
        {
            "producer": "0x2000",
            "consumer": "0x1000",
            "waits": 2,
            "by_api": {"cudaStreamWaitEvent": 2},
            "producer_index": 1,
            "consumer_index": 0,
        },
    ]
    assert graph["waits_producer_unknown"] == [{"consumer": "0x3000", "waits": 5, "consumer_index": None}]
    assert graph["event_records"] == [{"stream": "0x1000", "records": 2, "stream_index": 0}]
    assert copies[("0xfffffffffffff000", "D2H")]["stream_index"] is None  # not a harness stream
    assert colls[("0x2000", "ncclAllGather")]["stream_index"] == 1
    assert m["views_joined"] == {
        "copies": {"joined": 3, "not_joined": 1},
        "collectives": {"joined": 2, "not_joined": 0},
        "stream_edges": {"joined": 2, "not_joined": 0},
    }
    v = m["views"]
    assert v["copies"]["probed"] == ["cudaMemcpyAsync"] and v["copies"]["reason"] is None
    assert v["collectives"]["reason"] == "entry points not in the mapped libraries: ncclAllReduce"
    section = {"families": {"gpu_runtime": {"events_attached": ["x"], "metrics": m}}}
    out = io.StringIO()
    render_gpu_runtime_rows(section, Console(file=out, width=200))
    text = out.getvalue()
    assert "graph launches: 2" in text
    assert "uprobe time by kind: launches n/a, graph_launches 0.01 ms, copies 0.06 ms" in text
    assert "an entry hit: 5.00 us where it starts otherwise, +2.00 us with its return probe; 1.00 us" in text
    assert "0x1000 (s0)  H2D            4        12388" in text
    assert "0xfffffffffffff000 D2H" in text  # a handle the harness did not create: no index
    assert "0x1000 (s0) → 0x2000 (s1): 4 waits" in text
    assert "? → 0x3000: 5 waits" in text
    assert "not probed: launches (" in text and "collectives (entry points not in" in text
    empty = family.collect({}, CollectContext()).metrics  # probed but nothing seen: no view block printed
    out = io.StringIO()
    render_gpu_runtime_rows(
        {"families": {"gpu_runtime": {"events_attached": ["x"], "metrics": empty}}},
        Console(file=out, width=200),
    )
    assert "copies and memsets" not in out.getvalue() and "stream dependencies" not in out.getvalue()


def test_two_entry_points_at_one_address_are_probed_once(tmp_path: Path) -> None:
    """A library exporting one function under two probed names (an alias, as NCCL's weak
    ncclX / pncclX): the second is listed as counted under the first, never probed twice."""
    from gpu_standins import gcc

    if gcc() is None:
        unavailable("gcc not installed: cannot build the alias library")
    src = tmp_path / "alias.c"
    src.write_text(
        "int cudaEventRecord(void *e, void *s) { return 35; }\n"
        'int cudaEventRecord_ptsz(void *e, void *s) __attribute__((alias("cudaEventRecord")));\n'
    )
    lib = tmp_path / "libcudart.so.12"
    subprocess.run([gcc(), "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    family = GpuRuntimeFamily(libraries=[MappedLibrary("cudart", str(lib), str(lib), 1)])
    probes = _render(family)
    assert [a.api for a in family.attached] == ["cudaEventRecord"]
    reasons = {n.api: n.reason for n in family.not_attached}
    assert reasons["cudaEventRecord_ptsz"] == "same address as cudaEventRecord (an alias): counted there"
    assert len([b for b in probes if b.startswith("uprobe:") and "// cost calibration" not in b]) == 1


def test_late_program_maps_are_added_key_by_key() -> None:
    """The main and a late program's printed maps summed: counts, stats (average recomputed),
    keys in one only kept (late_runtimes.add_maps, used by absorb)."""
    from aorta.ebpf.late_runtimes import add_maps

    a = {"1,4096": 3, "1,8192": 1}
    b = {"1,4096": 2, "11,4096": 5}
    assert add_maps(a, b) == {"1,4096": 5, "1,8192": 1, "11,4096": 5}
    sa = {"121,4096,1": {"count": 2, "average": 10, "total": 20}}
    sb = {"121,4096,1": {"count": 1, "average": 40, "total": 40}}
    assert add_maps(sa, sb) == {"121,4096,1": {"count": 3, "average": 20, "total": 60}}
    assert add_maps(None, b) == b
    assert add_maps(3, 4) == 7

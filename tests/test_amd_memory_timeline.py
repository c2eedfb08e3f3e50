"""AMD GPU memory on the --trace-out timeline (issue 24 item 1): BO move hops and KFD
evict/restore events kept as bounded instants (seen/kept/dropped), rendered against each
recorded kernel generation's formats, collected from printed maps and drawn in the trace."""

from __future__ import annotations

import re
from typing import Any

import pytest

from aorta.ebpf import memory_metrics as mm
from aorta.ebpf.probes.amd_memory import TL_BO, TL_KFD, AmdMemoryFamily, kfd_timeline, unpack_bo_move
from aorta.ebpf.probes.base import CollectContext, RenderContext, TraceTarget
from aorta.ebpf.program import GATE
from aorta.ebpf.tracefs import Tracefs
from aorta.hw_queue_eval.report.trace import build_trace
from factories import op_intervals, run_result
from test_amd_memory_render import DIALECTS, FIXTURES, GENERATIONS, PID_FILTER, _blocks
from trace_checks import validate_trace

ORIGIN = 3_000_000_000


def _render(gen: str, keep: int, dialect: str = "0.17"):
    tracefs = Tracefs(FIXTURES / gen)
    family = AmdMemoryFamily()
    target = TraceTarget((4242,), timeline_events=keep)
    return tracefs, family, family.render(RenderContext(tracefs, DIALECTS[dialect], target, PID_FILTER, GATE))


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("gen", GENERATIONS)
def test_timeline_records_only_with_the_timeline_and_only_known_fields(gen: str, dialect: str) -> None:
    tracefs, family, code = _render(gen, keep=64, dialect=dialect)
    _, _, plain = _render(gen, keep=0, dialect=dialect)
    assert family.timeline_cap >= 1
    arg_re = re.compile(r"args(?:->|\.)(\w+)")
    for attach, body in _blocks(code.probes):
        _, system, event = attach.split(":")
        fmt = tracefs.read_format(system, event)
        assert all(f in fmt.fields for f in arg_re.findall(body)), (gen, attach)
        bo = "bo_move" in event
        kfd = system == "amdkfd" and "map_memory" not in event
        assert (f"@{TL_BO}_n[cpu]" in body) == bo, (gen, attach)
        assert (f"@{TL_KFD}_n[cpu]" in body) == kfd, (gen, attach)
        if bo or kfd:  # bounded per CPU: the store is sized up front
            assert f"if ($i < {family.timeline_cap})" in body
    assert not any("_tl" in p for p in plain.probes)  # aggregates only without --trace-out
    assert code.used_events == plain.used_events  # the timeline adds no attach point


def test_node_programs_keep_no_timeline() -> None:
    tracefs = Tracefs(FIXTURES / "rocm-dkms-pid")
    family = AmdMemoryFamily()
    target = TraceTarget((1, 2), timeline_events=64, rank_keys=True)
    ctx = RenderContext(tracefs, DIALECTS["0.17"], target, PID_FILTER, GATE, rank="$r")
    code = family.render(ctx)
    assert family.timeline_cap == 0 and not any("_tl" in p for p in code.probes)


def _printed(name: str, per_cpu: dict[int, list[tuple[int, int]]], seen: dict[int, int]) -> dict[str, Any]:
    """Maps as bpftrace prints them for instant_code: @n[cpu,i] = ns, @n_v[cpu,i], @n_n[cpu]."""
    maps: dict[str, Any] = {f"@{name}": {}, f"@{name}_v": {}, f"@{name}_n": {}}
    for cpu, events in per_cpu.items():
        for i, (ns, value) in enumerate(events):
            maps[f"@{name}"][f"{cpu},{i}"] = ns
            maps[f"@{name}_v"][f"{cpu},{i}"] = value
        maps[f"@{name}_n"][str(cpu)] = seen[cpu]
    return maps


def _packed_move(size: int, traced: int, old: int, new: int) -> int:
    return (size << 17) | (traced << 16) | (old << 8) | new


def _packed_kfd(kind: int, ident: int) -> int:
    return (kind << 32) | ident


def test_collect_unpacks_moves_pairs_kfd_slices_and_counts_the_drops() -> None:
    _, family, _ = _render("rocm-dkms-pid", keep=64)
    t = ORIGIN
    moves = {  # cap forced low: CPU 0 saw 5 hops but kept 2, CPU 1 saw and kept 1
        0: [(t + 100, _packed_move(1 << 30, 1, 2, 1)), (t + 300, _packed_move(4096, 0, 1, 0))],
        1: [(t + 200, _packed_move(8 << 20, 1, 1, 2))],
    }
    kfd = {
        0: [(t + 1000, _packed_kfd(mm.KFD_EVICT_START, 77)), (t + 5000, _packed_kfd(mm.KFD_EVICT_END, 77))],
        1: [
            (t + 6000, _packed_kfd(mm.KFD_RESTORE_START, 77)),
            (t + 9000, _packed_kfd(mm.KFD_RESTORE_END, 77)),
            (t + 9500, _packed_kfd(mm.KFD_EVICT_START, 78)),  # its end is past the cap
        ],
    }
    maps = {**_printed(TL_BO, moves, {0: 5, 1: 1}), **_printed(TL_KFD, kfd, {0: 2, 1: 4})}
    res = family.collect(maps, CollectContext())
    tl = res.metrics["timeline"]
    assert tl["bo_moves"]["rows"] == [
        [t + 100, 2, 1, 1, 1 << 30],
        [t + 200, 1, 2, 1, 8 << 20],
        [t + 300, 1, 0, 0, 4096],
    ]
    assert (tl["bo_moves"]["seen"], tl["bo_moves"]["kept"], tl["bo_moves"]["dropped"]) == (6, 3, 3)
    assert tl["kfd"]["slices"] == [[77, "evict", t + 1000, t + 5000], [77, "restore", t + 6000, t + 9000]]
    assert [e[1] for e in tl["kfd"]["events"]][-1] == "evict_worker_start"
    assert (tl["kfd"]["seen"], tl["kfd"]["kept"], tl["kfd"]["dropped"]) == (6, 5, 1)


def test_unpack_round_trips_the_probe_packing() -> None:
    for size, traced, old, new in [(0, 0, 0, 0), ((1 << 40) + 3, 1, 2, 1), (4096, 0, 7, 255)]:
        assert unpack_bo_move(_packed_move(size, traced, old, new)) == {
            "old_placement": old,
            "new_placement": new,
            "traced": traced,
            "bytes": size,
        }


def test_unpaired_kfd_end_is_an_instant_only() -> None:
    out = kfd_timeline({"rows": [[5, _packed_kfd(mm.KFD_EVICT_END, 9)]], "seen": 1, "kept": 1, "dropped": 0})
    assert out["slices"] == [] and out["events"] == [[5, "evict_worker_end", 9]]


def test_trace_draws_bo_moves_and_kfd_slices_on_the_ops_clock() -> None:
    us = lambda t: ORIGIN + int(t * 1000)  # noqa: E731
    result = run_result(streams=1, op_intervals=op_intervals([[0, 0, 0, 0, 1.0, 2.0, 50.0]], ["mm"]))
    result["metadata"] = {**(result.get("metadata") or {}), "window_start_monotonic_ns": ORIGIN}
    kfd = kfd_timeline(
        {
            "rows": [
                [us(10), _packed_kfd(mm.KFD_EVICT_START, 77)],
                [us(14), _packed_kfd(mm.KFD_EVICT_END, 77)],
                [us(20), _packed_kfd(mm.KFD_EVICT_START, 77)],
                [us(25), _packed_kfd(mm.KFD_EVICT_END, 77)],
                [us(30), _packed_kfd(mm.KFD_RESTORE_START, 77)],
                [us(40), _packed_kfd(mm.KFD_RESTORE_END, 77)],
            ],
            "seen": 7,
            "kept": 6,
            "dropped": 1,
        }
    )
    moves = {"rows": [[us(12), 2, 1, 1, 4096]], "seen": 1, "kept": 1, "dropped": 0}
    result["ebpf_memory_metrics"] = {
        "families": {"amdmem": {"metrics": {"timeline": {"bo_moves": moves, "kfd": kfd}}}}
    }
    trace = build_trace(result)
    assert validate_trace(trace) == []  # includes: slices on one track never overlap
    gpu = [e for e in trace["traceEvents"] if e["pid"] == 6]
    names = {e["tid"]: e["args"]["name"] for e in gpu if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = [(names[e["tid"]], e["name"], e["ts"], e["dur"]) for e in gpu if e["ph"] == "X"]
    assert slices == [
        ("KFD process 77 evict", "KFD evict", 10.0, 4.0),
        ("KFD process 77 evict", "KFD evict", 20.0, 5.0),
        ("KFD process 77 restore", "KFD restore", 30.0, 10.0),
    ]
    [move] = [e for e in gpu if e["ph"] == "i" and e["tid"] == 1]
    assert (move["name"], move["ts"], move["args"]) == (
        "BO VRAM→TT",
        12.0,
        {"bytes": 4096, "in_traced_process": True},
    )
    assert sum(1 for e in gpu if e["ph"] == "i" and e["name"].startswith("KFD")) == 6
    assert trace["otherData"]["ebpf_gpu_memory_timeline"] == {
        "bo_moves": {"seen": 1, "kept": 1, "dropped": 0},
        "kfd": {"seen": 7, "kept": 6, "dropped": 1},
    }
    del result["ebpf_memory_metrics"]
    assert not [e for e in build_trace(result)["traceEvents"] if e["pid"] == 6]

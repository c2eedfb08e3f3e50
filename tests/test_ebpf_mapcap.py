"""Map capacity: a forced tiny map drops updates, and the result says how many and in which map."""

from __future__ import annotations

import os

import pytest

from aorta.ebpf import engine, mapcap
from aorta.ebpf.probes.base import CollectContext, TraceTarget
from ebpf_support import many_keys

PROGRAM = "BEGIN\n{\n  @a_x = 1;\n}\n\ntp:x\n{\n  @a_many[nsecs] = count(); @a_few[1] = hist(2);\n}\n"


def test_map_at_finds_the_map_a_statement_writes():
    assert mapcap.map_at(PROGRAM, 8, 19) == "@a_many"  # bpftrace points at count()
    assert mapcap.map_at(PROGRAM, 8, 46) == "@a_few"
    assert mapcap.map_at(PROGRAM, 3, 10) == "@a_x"
    assert mapcap.map_at(PROGRAM, 99, 1) is None


def test_capacity_report_counts_drops_per_map_and_flags_full_maps():
    errors = {("map_update_elem", -7, 8, 19): 42, ("map_delete_elem", -2, 8, 30): 3}
    maps = {"@a_many": {str(i): 1 for i in range(8)}, "@a_few": {"1": [{"min": 2, "max": 3, "count": 5}]}}
    report = mapcap.capacity_report(PROGRAM, errors, maps, keys_max=8)
    assert report.dropped_updates == {"@a_many": 42}
    assert report.dropped_updates_total == 42
    assert set(report.full_maps) == {"@a_many"}
    assert report.other_helper_errors == {"map_delete_elem -2": 3}
    assert list(report.to_json()) == [
        "keys_max",
        "keys_max_source",
        "dropped_updates",
        "dropped_updates_total",
        "full_maps",
        "other_helper_errors",
    ]
    quiet = mapcap.capacity_report(PROGRAM, {}, maps, keys_max=100)
    assert quiet.dropped_updates_total == 0
    assert quiet.full_maps == {}


def test_flags_per_bpftrace_version():
    assert mapcap.bpftrace_flags((0, 17, 0)) == ["-k"]
    assert mapcap.bpftrace_flags((0, 20, 2)) == ["-k"]
    assert mapcap.bpftrace_flags((0, 23, 0)) == []
    assert mapcap.bpftrace_flags(None) == ["-k"]


@pytest.mark.slow
@pytest.mark.ebpf
def test_tiny_map_drops_are_counted_by_map_name(ebpf_ready: None) -> None:
    ready = engine.check_readiness()
    family = many_keys()
    program = engine.make_program(
        True, False, TraceTarget((os.getpid(),)), ready.tracefs, ready.version, families=[family]
    )
    session = engine.start_session(program, ready, map_keys_max=8)
    try:
        session.window_start()
        for _ in range(50):
            os.getppid()
        session.window_stop()
    except BaseException:
        session.abort()
        raise
    out = session.stop()
    assert out.exit_code == 0, out.stderr
    assert out.lost_events == 0, out.stderr
    assert len(out.maps["@t_many_keys"]) == 8
    assert out.maps["@t_many_n"] == 50
    results = engine.collect_results(program, out, CollectContext())
    section = engine.build_sections(program, out, results, ready, True, False)["ebpf_queue_metrics"]
    assert section["lost_events"] == 0
    assert section["dropped_updates"] == 50 - 8
    assert section["map_capacity"]["dropped_updates"] == {"@t_many_keys": 42}
    assert "@t_many_keys" in section["map_capacity"]["full_maps"]
    assert "@t_many_n" not in section["map_capacity"]["full_maps"]
    assert "42 map updates dropped" in section["warning"]
    assert "@t_many_keys" in section["warning"]

"""Runtimes mapped after attach: when the kernel saw them mapped, from when their calls counted,
and what was not counted in between (docs/ebpf.md, "Late-loaded runtimes").

Ground truths: the traced process's own CLOCK_MONOTONIC timestamps (bpftrace's `nsecs` clock)
around its dlopen and around every call it makes, and the uprobe's breakpoint byte in its copy of
the function (tests/late_load_child.py); hand-made mapping records for the pure report.
"""

from __future__ import annotations

from pathlib import Path

from aorta.ebpf.probes import gpu_runtime_loads as loads
from aorta.ebpf.probes.base import BpftraceDialect, RenderContext, TraceTarget
from aorta.ebpf.tracefs import Tracefs

# the two formats as linux 6.18 (this VM) prints them; the fields are the same since 4.x
MMAP_FORMATS = {
    "sys_enter_mmap": (
        "name: sys_enter_mmap\nID: 174\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n"
        "\tfield:unsigned long addr;\toffset:16;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long len;\toffset:24;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long prot;\toffset:32;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long flags;\toffset:40;\tsize:8;\tsigned:0;\n"
        "\tfield:unsigned long fd;\toffset:48;\tsize:8;\tsigned:0;\n"
        '\tfield:unsigned long off;\toffset:56;\tsize:8;\tsigned:0;\n\nprint fmt: ""\n'
    ),
    "sys_exit_mmap": (
        "name: sys_exit_mmap\nID: 173\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n"
        '\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n\nprint fmt: ""\n'
    ),
}


def _tracefs(root: Path, events: dict[str, str]) -> Tracefs:
    for name, text in events.items():
        folder = root / "events" / "syscalls" / name
        folder.mkdir(parents=True)
        (folder / "format").write_text(text)
    return Tracefs(root)


def _ctx(tracefs: Tracefs, pids: tuple[int, ...]) -> RenderContext:
    return RenderContext(tracefs, BpftraceDialect((0, 17, 0)), TraceTarget(pids), "@aorta_pids[pid]", "1")


# -- no eBPF needed ---------------------------------------------------------------------------------
def test_mapping_probes_record_numbers_of_traced_processes_only(tmp_path: Path) -> None:
    """Two blocks: PROT_EXEC file mappings (not anonymous) of traced pids; no string is read in
    BPF; nothing without traced pids or without the tracepoints, with the reason."""
    tracefs = _tracefs(tmp_path / "t", MMAP_FORMATS)
    probes = loads.render(_ctx(tracefs, (4242,)))
    assert probes.reason is None
    enter, leave = probes.blocks
    assert enter.startswith("tracepoint:syscalls:sys_enter_mmap\n/@aorta_pids[pid] && (args->prot & 0x4)")
    assert "!(args->flags & 0x20)" in enter
    assert leave.startswith("tracepoint:syscalls:sys_exit_mmap\n/@gpu_runtime_xmap_len[tid]/")
    assert f"@gpu_runtime_xmaps_n < {loads.MAX_RECORDS}" in leave
    assert "str(" not in enter + leave
    assert "no traced processes" in str(loads.render(_ctx(tracefs, ())).reason)
    bare = _tracefs(tmp_path / "bare", {"sys_enter_mmap": MMAP_FORMATS["sys_enter_mmap"]})
    assert loads.render(_ctx(bare, (4242,))).blocks == ()
    assert "missing on this kernel" in str(loads.render(_ctx(bare, (4242,))).reason)


def test_mapping_records_are_read_back_and_matched_by_address() -> None:
    maps = {
        "@gpu_runtime_xmaps": {
            "7,139672848171008,2843008": 300,  # 0x7f081e800000, as bpftrace prints it
            "7,4096,8192": 100,
            "8,139672848171008,2843008": 50,  # another process, same address
            "7,139672848171008,4096": 400,  # the same start remapped later, shorter
        },
        "@gpu_runtime_xmaps_over": 3,
    }
    found = loads.records(maps)
    assert [r.ns for r in found] == [50, 100, 300, 400]
    assert loads.dropped(maps) == 3 and loads.dropped({}) == 0
    start = 0x7F081E800000
    assert loads.mapped_at(found, 7, start + 0x1000) == loads.ExecMapping(7, start, 2843008, 300)
    assert loads.mapped_at(found, 7, start) == loads.ExecMapping(7, start, 4096, 400)  # the latest
    assert loads.mapped_at(found, 9, start) is None

"""AMD memory probes rendered against the recorded formats of each kernel/driver generation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aorta.ebpf.probes.amd_memory import AmdMemoryFamily
from aorta.ebpf.probes.base import BpftraceDialect, RenderContext, TraceTarget
from aorta.ebpf.program import GATE
from aorta.ebpf.tracefs import Tracefs

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tracefs"
GENERATIONS = ["linux-4.x", "linux-5.4", "linux-6.8", "linux-6.17", "rocm-dkms-pasid", "rocm-dkms-pid"]
DIALECTS = {"0.17": BpftraceDialect((0, 17, 0)), "0.20": BpftraceDialect((0, 20, 0))}
PID_FILTER = "@aorta_pid[pid]"


def render(gen: str, dialect: str = "0.17"):
    tracefs = Tracefs(FIXTURES / gen)
    ctx = RenderContext(tracefs, DIALECTS[dialect], TraceTarget((4242,)), PID_FILTER, GATE)
    return tracefs, AmdMemoryFamily().render(ctx)


def _blocks(probes: list[str]) -> list[tuple[str, str]]:
    """(attach point, body) of each probe block."""
    out = []
    for block in probes:
        head, _, _ = block.partition("\n")
        out.append((head.split()[0], block))
    return out


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("gen", GENERATIONS)
def test_every_referenced_field_exists_in_that_generation(gen, dialect):
    tracefs, code = render(gen, dialect)
    arg_re = re.compile(r"args(?:->|\.)(\w+)")
    assert code.probes
    for attach, body in _blocks(code.probes):
        _, system, event = attach.split(":")
        fmt = tracefs.read_format(system, event)
        assert fmt is not None, attach
        for field in arg_re.findall(body):
            assert field in fmt.fields, f"{gen}: {attach} uses missing field {field}"
            assert not fmt.fields[field].is_string, "no string fields are needed here"
        other = "args." if dialect == "0.17" else "args->"
        assert other not in body


@pytest.mark.parametrize("gen", ["linux-5.4", "linux-6.8", "linux-6.17"])
def test_mainline_kernels_have_amdgpu_events_but_no_amdkfd(gen):
    _, code = render(gen)
    assert code.used_events == [
        "amdgpu:amdgpu_bo_move",
        "amdgpu:amdgpu_bo_create",
        "amdgpu:amdgpu_vm_bo_map",
        "amdgpu:amdgpu_vm_bo_unmap",
    ]
    assert "DKMS" in code.missing["amdkfd:kfd_evict_process_worker_start"]
    assert "amdkfd:kfd_map_memory_to_gpu_start" in code.missing


def test_old_kernel_uses_the_old_bo_move_name():
    _, code = render("linux-4.x")
    assert "amdgpu:amdgpu_ttm_bo_move" in code.used_events
    assert any(p.startswith("tracepoint:amdgpu:amdgpu_ttm_bo_move\n") for p in code.probes)


@pytest.mark.parametrize(
    ("gen", "id_field", "variant"), [("rocm-dkms-pasid", "pasid", 2), ("rocm-dkms-pid", "pid", 1)]
)
def test_kfd_events_attributed_by_their_own_id_never_by_pid_filter(gen, id_field, variant):
    _, code = render(gen)
    kfd = [
        b for a, b in _blocks(code.probes) if a.startswith("tracepoint:amdkfd:kfd_") and "map_memory" not in a
    ]
    assert len(kfd) == 5  # evict start/end, restore start/end, schedule
    for body in kfd:
        assert PID_FILTER not in body, "kworker events must not be filtered by the benchmark pid"
        assert GATE in body
        assert f"(uint64)args->{id_field}]" in body
    assert f"@amdmem_kfd_variant[1] = {variant};" in code.begin
    sched = next(b for b in kfd if "schedule_evict" in b)
    assert "@amdmem_kfd_delay[(uint64)args->delay_jiffies]" in sched
    # map-to-GPU runs in the process's own ioctl: there the pid filter applies
    mapping = next(b for a, b in _blocks(code.probes) if a.endswith("kfd_map_memory_to_gpu_start"))
    assert PID_FILTER in mapping
    assert code.missing["amdkfd:kfd_evict_process"].startswith("old name, not needed")


def test_old_kfd_names_used_only_when_detected(tmp_path):
    """kfd_evict_process / kfd_restore_process: a detected alternative when the workers are absent."""
    for name in ("kfd_evict_process", "kfd_restore_process"):
        folder = tmp_path / "events" / "amdkfd" / name
        folder.mkdir(parents=True)
        (folder / "format").write_text(
            f"name: {name}\nID: 9\nformat:\n"
            "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
            "\tfield:unsigned int pasid;\toffset:8;\tsize:4;\tsigned:0;\n\n"
            'print fmt: "pasid=%u", REC->pasid\n'
        )
    ctx = RenderContext(Tracefs(tmp_path), DIALECTS["0.20"], TraceTarget((1,)), PID_FILTER, GATE)
    code = AmdMemoryFamily().render(ctx)
    assert code.used_events == ["amdkfd:kfd_evict_process", "amdkfd:kfd_restore_process"]
    assert "@amdmem_kfd_log[nsecs, 6, (uint64)args.pasid]" in "\n".join(code.probes)
    assert "amdgpu:amdgpu_bo_move" in code.missing


def test_bo_move_probe_pairs_in_kernel_and_clears_its_scratch_maps():
    _, code = render("linux-6.17")
    body = next(b for a, b in _blocks(code.probes) if a.endswith("amdgpu_bo_move"))
    assert "@amdmem_twohop[$first, $new, $traced]" in body
    assert "@amdmem_pend_tid[$bo] == tid" in body
    assert "clear(@amdmem_pend);" in code.end
    assert "clear(@amdmem_pend_ts);" in code.end


def test_empty_tree_renders_nothing_and_lists_everything(tmp_path):
    (tmp_path / "events").mkdir()
    ctx = RenderContext(Tracefs(tmp_path), DIALECTS["0.17"], TraceTarget((1,)), PID_FILTER, GATE)
    fam = AmdMemoryFamily()
    code = fam.render(ctx)
    assert code.probes == []
    assert code.used_events == []
    listed = set(code.missing)
    assert {
        "amdgpu:amdgpu_bo_move",
        "amdgpu:amdgpu_bo_create",
        "amdgpu:amdgpu_vm_bo_map",
        "amdkfd:kfd_evict_process_worker_start",
    } <= listed


@pytest.mark.slow
@pytest.mark.parametrize(("gen", "id_field"), [("rocm-dkms-pasid", "pasid"), ("rocm-dkms-pid", "pid")])
def test_show_script_through_aorta_tracefs(cli, gen, id_field):
    res = cli("ebpf-info", "--show-script", "--ebpf-memory-trace", "--tracefs", str(FIXTURES / gen))
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "families amdmem, hostmem" in text
    assert "tracepoint:amdgpu:amdgpu_bo_move\n" in text
    assert f"@amdmem_kfd_log[nsecs, 1, (uint64)args->{id_field}] = count();" in text
    # kworker events: only the window gate (the engine's own expression), never the pid filter
    assert f"tracepoint:amdkfd:kfd_evict_process_worker_start\n/{GATE}/" in text

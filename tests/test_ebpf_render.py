"""Probe rendering against recorded tracefs formats (linux-5.4, 6.8, 6.17): no root needed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from aorta.ebpf import engine
from aorta.ebpf.probes.base import BpftraceDialect, CollectContext, TraceTarget, Window
from aorta.ebpf.probes.registry import families_for
from aorta.ebpf.program import ProgramError, build_program
from aorta.ebpf.tracefs import Tracefs

FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"
GENERATIONS = ["linux-5.4", "linux-6.8", "linux-6.17"]
ARG_RE = re.compile(r"args(?:->|\.)([A-Za-z_][A-Za-z0-9_]*)")
PROBE_RE = re.compile(r"^tracepoint:([A-Za-z0-9_]+):([A-Za-z0-9_]+)", re.M)


def _blocks(text: str) -> list[str]:
    return [b for b in text.split("\n\n") if b.startswith("tracepoint:")]


def _render(gen: str, version: tuple[int, int, int] = (0, 17, 0)) -> str:
    tf = Tracefs(FIXTURES / gen)
    return engine.make_program(True, True, TraceTarget((4242,)), tf, version, token=77).text


@pytest.mark.parametrize("gen", GENERATIONS)
def test_every_referenced_field_exists_in_its_format(gen: str) -> None:
    tf = Tracefs(FIXTURES / gen)
    text = _render(gen)
    for block in _blocks(text):
        attach = block.splitlines()[0]
        events = [tuple(p.split(":")[1:3]) for p in attach.split(",")]
        for system, event in events:
            fmt = tf.read_format(system, event)
            assert fmt is not None, f"{system}:{event} rendered but absent in {gen}"
            for name in ARG_RE.findall(block):
                assert name in fmt.fields, f"{gen} {system}:{event} has no field {name}"


@pytest.mark.parametrize("gen", GENERATIONS)
def test_str_only_on_strings_never_on_pointers(gen: str) -> None:
    tf = Tracefs(FIXTURES / gen)
    for block in _blocks(_render(gen)):
        system, event = PROBE_RE.match(block).groups()  # type: ignore[union-attr]
        fmt = tf.read_format(system, event)
        for name in re.findall(r"str\(args(?:->|\.)([A-Za-z0-9_]+)\)", block):
            field = fmt.fields[name]
            assert field.is_string or (system == "syscalls" and name == "filename"), (gen, name)
            assert not field.is_pointer or system == "syscalls", (gen, name)


def test_ring_is_a_string_where_the_kernel_has_one_and_na_on_54() -> None:
    assert "str(args->ring)" in _render("linux-6.8")
    assert "str(args->ring)" in _render("linux-6.17")
    old = _render("linux-5.4")
    assert "ring_name" not in old
    assert '@amdgpu_submits["n/a"]' in old


def test_join_is_by_fence_never_tid() -> None:
    for gen in GENERATIONS:
        text = _render(gen)
        amd = next(b for b in _blocks(text) if "amdgpu_sched_run_job" in b.splitlines()[0])
        assert "args->context" in amd
        assert "args->seqno" in amd
        assert "[tid]" not in amd


def test_gpu_scheduler_picks_the_naming_generation() -> None:
    assert "tracepoint:gpu_scheduler:drm_run_job" in _render("linux-6.8")
    assert "drm_sched_job_run" not in _render("linux-6.8")
    new = _render("linux-6.17")
    assert "tracepoint:gpu_scheduler:drm_sched_job_run" in new
    assert "args->fence_context" in new
    assert "drm_run_job" not in new


def test_dialect_020_uses_dot_args() -> None:
    text = _render("linux-6.8", (0, 20, 0))
    assert "args.ring" in text
    assert "args->" not in text


def test_pids_must_be_ints() -> None:
    tf = Tracefs(FIXTURES / "linux-6.8")
    with pytest.raises(ProgramError):
        build_program(
            families_for(True, False),
            TraceTarget(("1; system",)),  # type: ignore[arg-type]
            tf,
            BpftraceDialect((0, 17, 0)),
            5,
        )


def test_missing_marker_tracepoint_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "events").mkdir()
    with pytest.raises(ProgramError, match="CONFIG_FTRACE_SYSCALLS"):
        build_program([], TraceTarget((1,)), Tracefs(tmp_path), BpftraceDialect((0, 17, 0)), 5)


@pytest.mark.slow
@pytest.mark.parametrize("gen", GENERATIONS)
def test_show_script_through_aorta_tracefs(cli, gen: str) -> None:
    proc = cli("ebpf-info", "--show-script", "--ebpf-trace", "--tracefs", str(FIXTURES / gen))
    assert proc.returncode == 0, proc.stderr
    assert "tracepoint:amdgpu:amdgpu_cs_ioctl" in proc.stdout
    assert f"tracefs: {FIXTURES / gen}" in proc.stdout
    assert 'printf("aorta_ready 2' in proc.stdout
    assert "tracepoint:syscalls:sys_enter_write" in proc.stdout  # the CPU backend's doorbells


def test_ebpf_info_json_reports_fixture_tree(cli) -> None:
    import json

    proc = cli("ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.17"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["families"]["amdgpu"]["events"]["amdgpu:amdgpu_cs_ioctl"] is True
    assert data["families"]["gpu_scheduler naming"]["new (~6.17+)"] is True
    assert os.fspath(FIXTURES / "linux-6.17") in data["tracefs"]["root"]


@pytest.mark.slow
def test_ebpf_info_detects_amdkfd_variant(cli, tmp_path: Path) -> None:
    import json
    import shutil

    shutil.copytree(FIXTURES / "linux-6.8", tmp_path / "tree")
    event = tmp_path / "tree" / "events" / "amdkfd" / "kfd_evict_process_worker_start"
    event.mkdir(parents=True)
    (event / "format").write_text(
        "name: kfd_evict_process_worker_start\nID: 9\nformat:\n"
        "\tfield:unsigned int pasid;\toffset:8;\tsize:4;\tsigned:0;\n"
    )
    proc = cli("ebpf-info", "--json", "--tracefs", str(tmp_path / "tree"))
    assert proc.returncode == 0, proc.stderr
    kfd = json.loads(proc.stdout)["families"]["amdkfd (DKMS driver)"]
    assert kfd["identity_field"] == "pasid"
    assert kfd["naming"].startswith("worker")


@pytest.mark.parametrize("command", [("ebpf-info",), ("ebpf-info", "--show-script")])
def test_ebpf_info_refuses_a_tracefs_without_events(cli, tmp_path: Path, command) -> None:
    """--tracefs is a choice on the command line: one that cannot be read is bad input (exit 2)."""
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "nothing", tmp_path / "empty"):
        proc = cli(*command, "--tracefs", str(bad))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"error: --tracefs {bad}: no readable events/ folder; give a tracefs root "
            "(the folder holding events/)"
        )
        assert proc.stdout == ""


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("3", 3.0)])
def test_parse_duration(text: str, seconds: float) -> None:
    from aorta.hw_queue_eval.commands.ebpf import parse_duration

    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "-2s", "0s", "s"])
def test_parse_duration_rejects(text: str) -> None:
    from aorta.common.errors import UsageError
    from aorta.hw_queue_eval.commands.ebpf import parse_duration

    with pytest.raises(UsageError):
        parse_duration(text)


@pytest.mark.slow
def test_ebpf_attach_usage_errors(cli) -> None:
    proc = cli("ebpf-attach", "--pid", "abc", "--duration", "1s")
    assert proc.returncode == 2
    assert "--pid must be" in proc.stderr
    proc = cli("ebpf-attach", "--pid", "1", "--duration", "soon")
    assert proc.returncode == 2
    assert "not a duration" in proc.stderr


def test_show_script_without_formats_explains_and_exits_0(cli, tmp_path: Path) -> None:
    (tmp_path / "events").mkdir()  # a tracefs tree without the marker's syscall tracepoint
    proc = cli("ebpf-info", "--show-script", "--tracefs", str(tmp_path))
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "cannot render the program" in proc.stderr


def test_non_tracepoint_probes_are_refused() -> None:
    from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily

    class Kprobe(ProbeFamily):
        name, section, description = "kp", "queue", "test"

        def wanted_events(self) -> list[str]:
            return []

        def render(self, ctx):  # type: ignore[no-untyped-def]
            return ProbeCode(probes=["kprobe:do_sys_open\n{\n  @kp_n = count();\n}"])

        def collect(self, maps, context):  # type: ignore[no-untyped-def]
            return FamilyResult(self.name, self.section, {}, {})

    from aorta.ebpf.probes.cpu_sched import CpuSchedFamily

    program = build_program(
        [Kprobe(), CpuSchedFamily()],
        TraceTarget((1,), doorbells=((1, 5, 2, 0),)),
        Tracefs(FIXTURES / "linux-6.8"),
        BpftraceDialect((0, 17, 0)),
        5,
    )
    assert "not a tracepoint" in program.missing["kp"]["*"]  # dropped, with the reason
    assert "kprobe:" not in program.text
    assert "@cpu_sched_bell" in program.text  # others kept


def test_map_without_family_prefix_is_refused() -> None:
    from aorta.ebpf.probes.base import FamilyResult, ProbeCode, ProbeFamily

    class Rogue(ProbeFamily):
        name, section, description = "rogue", "memory", "test"

        def wanted_events(self) -> list[str]:
            return []

        def render(self, ctx):  # type: ignore[no-untyped-def]
            return ProbeCode(probes=["tracepoint:sched:sched_switch\n{\n  @other_n = count();\n}"])

        def collect(self, maps, context):  # type: ignore[no-untyped-def]
            return FamilyResult(self.name, self.section, {}, {})

    program = build_program(
        [Rogue()], TraceTarget((1,)), Tracefs(FIXTURES / "linux-6.8"), BpftraceDialect((0, 17, 0)), 5
    )
    assert "without its prefix" in program.missing["rogue"]["*"]
    assert "@other_n" not in program.text


@pytest.mark.parametrize("family_name", ["amdgpu", "gpu_scheduler"])
def test_attached_family_that_saw_nothing_reports_zeros(family_name: str) -> None:
    # bpftrace prints nothing for a map that never got an entry (the usual case for a HIP
    # process: its launches bypass the DRM path), so collect must read absent maps as empty.
    from aorta.ebpf.probes.amdgpu import AmdgpuFamily
    from aorta.ebpf.probes.gpu_scheduler import GpuSchedulerFamily

    family = {"amdgpu": AmdgpuFamily, "gpu_scheduler": GpuSchedulerFamily}[family_name]()
    context = CollectContext(window=Window(1, 1 + 100_000_000), attached=tuple(family.wanted_events()))
    summary = family.collect({}, context).metrics["summary"]
    assert summary["total_submissions"] == 0
    assert summary["total_dispatches"] == 0
    assert summary["hw_rings_used"] == []
    assert summary["submit_to_dispatch_avg_us"] is None


@pytest.mark.parametrize("gen", GENERATIONS)
def test_program_exits_with_its_owner(gen: str, tmp_path) -> None:
    """The owner guard sits between the two handshake probes (live before "ready") and a
    watchdog ends a program whose handshake never completed (owner killed while attaching)."""
    import os
    import shutil

    from aorta.ebpf.program import OWNER_WATCHDOG_S

    text = _render(gen)
    assert f"nsecs - @aorta_born_ns > {OWNER_WATCHDOG_S * 1_000_000_000}/" in text
    assert "@aorta_born_ns = nsecs;" in text.split("\n}\n", 1)[0]  # set in BEGIN
    assert "sched_process_exit" not in text  # the fixture kernel lacks it: no guard, no error
    live = Path("/sys/kernel/tracing/events/sched/sched_process_exit/format")
    if not live.is_file():
        pytest.skip("no live sched_process_exit format to add to the fixture")
    tree = tmp_path / "tracefs"
    shutil.copytree(FIXTURES / gen, tree)
    (tree / "events/sched/sched_process_exit").mkdir()
    (tree / "events/sched/sched_process_exit/format").write_text(live.read_text())
    text = engine.make_program(True, True, TraceTarget((4242,)), Tracefs(tree), (0, 17, 0), token=77).text
    guard = f"tracepoint:sched:sched_process_exit\n/tid == {os.getpid()}/\n{{\n  exit();\n}}"
    assert guard in text
    first, last = text.index('printf("aorta_ready 1'), text.index('printf("aorta_ready 2')
    assert first < text.index(guard) < last


def test_owner_pid_is_validated() -> None:
    from aorta.ebpf.probes.base import BpftraceDialect
    from aorta.ebpf.program import ProgramError, build_program

    with pytest.raises(ProgramError):
        build_program(
            [],
            TraceTarget((1,)),
            Tracefs(FIXTURES / GENERATIONS[0]),
            BpftraceDialect((0, 17, 0)),
            5,
            owner_pid="1; system",
        )  # type: ignore[arg-type]


@pytest.mark.parametrize("ranks", [1, 4])
def test_window_gate_is_the_first_handshake_probe(ranks: int) -> None:
    """Issue 24: one marker probe both answers the first PING and gates the window (each BPF
    program costs attach time), so a program carries two marker probes, not three."""
    from aorta.ebpf import marker

    tf = Tracefs(FIXTURES / "linux-6.8")
    target = TraceTarget((4242,), window_ranks=ranks)
    text = engine.make_program(True, True, target, tf, (0, 17, 0), token=77).text
    marker_blocks = [b for b in _blocks(text) if b.startswith("tracepoint:syscalls:sys_enter_prctl\n")]
    assert len(marker_blocks) == 2
    gate, last = marker_blocks
    assert _blocks(text)[0] == gate  # declared (so attached) before every other tracepoint
    assert f'args->arg2 == {marker.PING}) {{ printf("aorta_ready 1\\n"); @aorta_ready_1 = 1; }}' in gate
    assert f"args->arg2 == {marker.WINDOW_START}" in gate and f"args->arg2 == {marker.WINDOW_STOP}" in gate
    assert 'printf("aorta_ready 2' in last and "@aorta_gate" not in last

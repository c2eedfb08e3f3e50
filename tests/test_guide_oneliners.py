"""The guide's four one-liners, corrected in docs/guide.md, and their scripts in ebpfaultline/bpftrace/
compile with the real bpftrace against tracepoint formats recorded from real kernels.

How (tests/test_ebpf_compile.py's helpers): a copy of a recorded tracefs tree is bind-mounted over
/sys/kernel/tracing inside a private mount namespace, and `bpftrace -d` (dry run) type-checks and
generates code without attaching anything. The host's tracefs is untouched. The old KFD event name
must NOT compile where the driver has the worker names: the check can fail.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from test_ebpf_compile import _compile, _tree

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "tracefs"
SCRIPTS = REPO / "ebpfaultline" / "bpftrace"
GUIDE = REPO / "docs" / "guide.md"
GENERATIONS = sorted(p.name for p in FIXTURES.iterdir() if (p / "events").is_dir())
ONELINER_RE = re.compile(r"^sudo bpftrace -e '(.+)'$", re.M)
GUIDE_SCRIPTS = [
    "amdgpu_submissions.bt",
    "amdgpu_dispatch.bt",
    "amdgpu_submit_dispatch_latency.bt",
    "kfd_evictions.bt",
]

pytestmark = pytest.mark.ebpf


def _events(gen: str) -> list[str]:
    root = FIXTURES / gen / "events"
    return sorted(
        f"{s.name}:{e.name}"
        for s in root.iterdir()
        if s.is_dir()
        for e in s.iterdir()
        if (e / "format").is_file()
    )


def _probes(program: str) -> list[str]:
    return re.findall(r"tracepoint:([\w*]+:[\w*]+)", program)


def _supported(program: str, gen: str) -> bool:
    """The generation has the program's tracepoints and the fields it reads (5.4's amdgpu events
    have `char *ring_name`, not `ring`: the scripts say 5.5+)."""
    from aorta.ebpf.tracefs import Tracefs

    events = _events(gen)
    matched = [e for p in _probes(program) for e in events if fnmatch.fnmatchcase(e, p)]
    if not all(any(fnmatch.fnmatchcase(e, p) for e in events) for p in _probes(program)):
        return False
    tf = Tracefs(FIXTURES / gen)
    fields = set()
    for event in matched:
        fmt = tf.read_format(*event.split(":", 1))
        fields.update(fmt.fields if fmt else ())
    return all(f in fields for f in re.findall(r"args->(\w+)", program))


@pytest.fixture
def compiler(ebpf_ready: None, tmp_path: Path):
    """compile(program_text, generation) → (ok, errors): test_ebpf_compile's bind-mount dry run."""
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to bind a recorded tracefs privately")
    trees: dict[str, Path] = {}

    def compile_(program: str, gen: str) -> tuple[bool, list[str]]:
        if gen not in trees:
            trees[gen] = _tree(gen, tmp_path)
        src = tmp_path / "prog.bt"
        src.write_text(program + "\n")
        rc, errors = _compile(trees[gen], src)
        return rc == 0 and not errors, errors

    return compile_


def _oneliners() -> list[str]:
    return ONELINER_RE.findall(GUIDE.read_text(encoding="utf-8"))


def test_the_guide_has_four_corrected_oneliners_each_with_its_script() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    assert len(_oneliners()) == 4
    for name in GUIDE_SCRIPTS:
        assert f"../ebpfaultline/bpftrace/{name}" in text
        assert (SCRIPTS / name).is_file()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_corrected_oneliner_compiles_on_recorded_formats(compiler, index: int) -> None:
    program = _oneliners()[index]
    gens = [g for g in GENERATIONS if _supported(program, g)]
    assert gens, f"no recorded tracefs has the tracepoints of: {program}"
    if "amdgpu:" in program:
        assert {"linux-6.8", "linux-6.17"} <= set(gens)  # u32 and u64 fence layouts
    for gen in gens:
        ok, output = compiler(program, gen)
        assert ok, f"{gen}: {output}"


@pytest.mark.slow
@pytest.mark.parametrize("name", GUIDE_SCRIPTS)
def test_backing_script_compiles_on_recorded_formats(compiler, name: str) -> None:
    program = (SCRIPTS / name).read_text(encoding="utf-8")
    gens = [g for g in GENERATIONS if _supported(program, g)]
    assert gens, name
    if "amdgpu:" in program:
        assert {"linux-6.8", "linux-6.17"} <= set(gens)
    for gen in gens:
        ok, output = compiler(program, gen)
        assert ok, f"{name} on {gen}: {output}"


def test_old_kfd_name_fails_where_the_driver_has_worker_names(compiler) -> None:
    gen = "rocm-dkms-pasid"
    assert "amdkfd:kfd_evict_process_worker_start" in _events(gen)
    ok, output = compiler("tracepoint:amdkfd:kfd_evict_process { @n = count(); }", gen)
    assert not ok, output
    ok, output = compiler(_oneliners()[3], gen)  # the corrected form matches the worker names
    assert ok, output

"""The library face of `aorta.ebpf`: the names it exports, what the docs and the example use, and
`trace_window` with a real bpftrace (counts exact, nothing left running when the block raises)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import aorta.ebpf as ebpf

REPO = Path(__file__).resolve().parents[1]


def test_the_face_exports_its_names_and_loads_lazily() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, aorta.ebpf; print('aorta.ebpf.engine' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert proc.stdout.strip() == "False"  # importing the package loads no engine
    for name in ebpf.__all__:
        assert getattr(ebpf, name) is not None
    with pytest.raises(AttributeError):
        ebpf.no_such_name  # noqa: B018


def test_families_by_name() -> None:
    assert [f.name for f in ebpf.families(names=("cpu_sched",))] == ["cpu_sched"]
    with pytest.raises(ValueError, match="unknown probe families"):
        ebpf.families(names=("cpu_shed",))


def _aorta_imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aorta"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("aorta"))
    return found


def test_the_example_and_the_doc_use_only_the_face() -> None:
    assert _aorta_imports((REPO / "examples" / "ebpf_api.py").read_text()) == {"aorta.ebpf"}
    doc = (REPO / "docs" / "ebpf-integration.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    first = blocks[0]
    assert _aorta_imports(first) == {"aorta.ebpf"}


@pytest.mark.ebpf
@pytest.mark.slow
def test_trace_window_counts_exactly_and_leaves_nothing_when_the_block_raises(ebpf_ready: None) -> None:
    done = threading.Event()
    bell = os.eventfd(0, os.EFD_CLOEXEC)
    taken = []

    def worker() -> None:
        while os.eventfd_read(bell) != 2:
            taken.append(1)
            done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        pid = os.getpid()
        target = ebpf.TraceTarget(
            (pid,), follow_children=False, doorbells=((pid, bell, thread.native_id, 0),)
        )
        only = ebpf.families(names=("cpu_sched",))
        with ebpf.trace_window(target, probe_families=only) as traced:
            for _ in range(25):
                done.clear()
                os.eventfd_write(bell, 1)
                done.wait(5)
        summary = traced.queue["families"]["cpu_sched"]["metrics"]["summary"]
        assert summary["total_submissions"] == 25 == len(taken)
        before = _bpftrace_children()
        again = ebpf.families(names=("cpu_sched",))
        with pytest.raises(RuntimeError, match="boom"), ebpf.trace_window(target, probe_families=again):
            assert _bpftrace_children() - before  # it runs inside the block …
            raise RuntimeError("boom")
        assert _bpftrace_children() - before == set()  # … and not after it
    finally:
        os.eventfd_write(bell, 2)
        thread.join()
        os.close(bell)


def _bpftrace_children() -> set[int]:
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                comm = Path(f"/proc/{entry}/comm").read_text().strip()
            except OSError:
                continue
            if comm == "bpftrace" and int(stat.rsplit(")", 1)[1].split()[1]) in (me,):
                found.add(int(entry))
    return found

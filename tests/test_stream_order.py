"""Race view: observed cross-stream waits against each workload's declared dependencies.

The catalogue reports neither difference; a workload with one declared wait removed reports a
missing synchronisation naming that edge, one with an extra wait needless serialisation.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rich.console import Console

from aorta.hw_queue_eval.backends.base import DependencyLog
from aorta.hw_queue_eval.config.run_config import RunConfig
from aorta.hw_queue_eval.report.console import interpret, render_run
from aorta.hw_queue_eval.results.run_result import validate_run_dict
from aorta.hw_queue_eval.run.harness import run_benchmark
from aorta.hw_queue_eval.run.stream_order import order_sentences, runtime_edges, stream_order
from aorta.hw_queue_eval.workloads import registry
from aorta.hw_queue_eval.workloads.graph_subgraphs import GraphSubgraphs
from aorta.hw_queue_eval.workloads.registry import get_info, get_workload_class, workload_names


class RecordingStream:
    """Runs each op at once and logs launches and waits in the backends' own DependencyLog."""

    def __init__(self, index: int, log: DependencyLog) -> None:
        self.index, self.log = index, log

    def launch(self, fn: Any, label: str = "") -> None:
        self.log.launched(self.index)
        fn()

    def wait(self, other: RecordingStream) -> None:
        self.log.waited(self.index, other.index)


def _cases() -> list[Any]:
    cases = []
    for name in workload_names():
        info = get_info(name)
        for streams in sorted({info.min_streams, info.recommended_streams}):
            marks = [pytest.mark.slow] if name == "torch_compile" else []  # compiles C++ first
            cases.append(pytest.param(name, streams, marks=marks, id=f"{name}-{streams}"))
    return cases


@pytest.mark.parametrize(("name", "streams"), _cases())
def test_catalogue_waits_match_its_declared_dependencies(name, streams):
    workload = get_workload_class(name)(streams, "small", torch.device("cpu"), 1)
    workload.setup()
    log = DependencyLog()
    log.start()
    with torch.no_grad():
        workload.run_iteration([RecordingStream(i, log) for i in range(streams)])
    section = stream_order(workload.declared_edges(), dict(log.pairs))
    assert section["missing_synchronisation"] == [], section
    assert section["needless_serialisation"] == [], section


def test_differences_name_each_edge_and_counts():
    section = stream_order({(0, 1), (0, 2)}, {(0, 1): 3, (2, 1): 2})
    assert section["edges"] == [
        {"producer": 0, "consumer": 1, "waits": 3},
        {"producer": 2, "consumer": 1, "waits": 2},
    ]
    assert section["missing_synchronisation"] == [{"producer": 0, "consumer": 2}]
    assert section["needless_serialisation"] == [{"producer": 2, "consumer": 1, "waits": 2}]
    lines = order_sentences({"stream_order": section})
    assert "s0→s2" in lines[0] and lines[0].startswith("Missing synchronisation (a race)")
    assert "s2→s1" in lines[1] and lines[1].startswith("Needless serialisation")


def test_unrecorded_waits_are_null_with_a_reason():
    section = stream_order({(0, 1)}, None)
    assert section["edges"] is None and section["missing_synchronisation"] is None
    assert section["note"] and order_sentences({"stream_order": section}) == []


class _DropWait:
    """A stream whose wait on one stream index is dropped (the removed dependency)."""

    def __init__(self, stream: Any, drop: int) -> None:
        self.stream, self.drop, self.index = stream, drop, stream.index

    def launch(self, fn: Any, label: str) -> None:
        self.stream.launch(fn, label)

    def wait(self, other: Any) -> None:
        if other.index != self.drop:
            self.stream.wait(other.stream)


class JoinMissesLastBranch(GraphSubgraphs):
    """graph_subgraphs whose join forgets to wait for the last branch."""

    def run_iteration(self, streams: list[Any]) -> None:
        last = len(streams) - 1
        super().run_iteration([_DropWait(s, last if s.index == 0 else -1) for s in streams])


class BranchWaitsForBranch(GraphSubgraphs):
    """graph_subgraphs with one extra wait: branch 2 waits for branch 1."""

    def run_iteration(self, streams: list[Any]) -> None:
        super().run_iteration(streams)
        streams[2].wait(streams[1])


def _run(monkeypatch, cls: type | None, streams: int = 4) -> dict[str, Any]:
    name = "graph_subgraphs"
    if cls is not None:
        monkeypatch.setitem(registry._WORKLOADS, name, cls)
    config = RunConfig(workload=name, streams=streams, iterations=2, warmup=1, device="cpu")
    data = run_benchmark(config).to_dict()
    validate_run_dict(data)
    return data


def test_unmodified_run_reports_the_graph_and_neither_difference(monkeypatch):
    data = _run(monkeypatch, None)
    section = data["stream_order"]
    fork = [{"producer": 0, "consumer": b, "waits": 2} for b in (1, 2, 3)]
    join = [{"producer": b, "consumer": 0, "waits": 2} for b in (1, 2, 3)]
    assert section["edges"] == sorted(fork + join, key=lambda e: (e["producer"], e["consumer"]))
    assert section["missing_synchronisation"] == [] and section["needless_serialisation"] == []
    assert not any("synchronisation" in s or "serialisation" in s for s in interpret(data))
    console = Console(record=True, width=200)
    render_run(data, console)
    text = console.export_text()
    assert "s0→s1 ×2, s0→s2 ×2, s0→s3 ×2, s1→s0 ×2" in text
    assert "Missing synchronisation:  none" in text and "Needless serialisation:   none" in text


def test_removed_wait_is_a_missing_synchronisation(monkeypatch):
    data = _run(monkeypatch, JoinMissesLastBranch)
    section = data["stream_order"]
    assert section["missing_synchronisation"] == [{"producer": 3, "consumer": 0}]
    assert section["needless_serialisation"] == []
    assert any(s.startswith("Missing synchronisation (a race)") and "s3→s0" in s for s in interpret(data))


def test_extra_wait_is_needless_serialisation(monkeypatch):
    data = _run(monkeypatch, BranchWaitsForBranch)
    section = data["stream_order"]
    assert section["needless_serialisation"] == [{"producer": 1, "consumer": 2, "waits": 2}]
    assert section["missing_synchronisation"] == []
    assert any(s.startswith("Needless serialisation") and "s1→s2" in s for s in interpret(data))


def _runtime_section(edges: dict[tuple[int, int], int], timer_waits: int) -> dict[str, Any]:
    """The eBPF gpu_runtime section for runtime waits between harness streams 0..3 (handles
    0x1000·(i+1)) and torch's timing stream 0x9000, built by the family from printed maps."""
    from aorta.ebpf.probes.base import CollectContext, StreamHandle
    from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
    from ebpf_support import attached_probe

    family = GpuRuntimeFamily(libraries=[])
    family.attached = [attached_probe("cudaEventRecord"), attached_probe("cudaStreamWaitEvent")]
    handle = lambda i: 0x1000 * (i + 1)  # noqa: E731
    printed = {f"193,{handle(p)},{handle(c)}": n for (p, c), n in edges.items()}
    printed[f"193,{0x9000},{handle(0)}"] = timer_waits
    maps = {"@gpu_runtime_edges": printed, "@gpu_runtime_wait_unknown": {f"193,{handle(1)}": 1}}
    context = CollectContext(stream_handles=tuple(StreamHandle(i, handle(i)) for i in range(4)))
    metrics = family.collect(maps, context).metrics
    return {"families": {"gpu_runtime": {"metrics": metrics}}}


def test_runtime_edges_joined_by_stream_index_against_the_declared_graph(monkeypatch):
    """GPU runs: the runtime's EventRecord → StreamWaitEvent edges, joined to stream indices by
    the family, compared with the declared graph; a removed fork wait is a runtime race, an
    extra wait needless serialisation, the timing stream's waits are counted, not joined."""
    data = _run(monkeypatch, None)
    declared = {(e["producer"], e["consumer"]) for e in data["stream_order"]["declared"]}
    assert runtime_edges(data["stream_order"], None) == data["stream_order"]  # not traced: as is
    full = {pair: 2 for pair in declared}
    section = runtime_edges(data["stream_order"], _runtime_section(full, 5))
    assert section["runtime_edges"] == [
        {"producer": p, "consumer": c, "waits": 2} for p, c in sorted(declared)
    ]
    assert "5 waits involve a stream the harness did not create" in section["runtime_edges_note"]
    assert "1 waited on an event never seen recorded" in section["runtime_edges_note"]
    validate_run_dict({**data, "stream_order": section})
    assert order_sentences({"stream_order": section}) == []
    racy = {pair: n for pair, n in full.items() if pair != (0, 3)}
    racy[(1, 2)] = 4
    section = runtime_edges(data["stream_order"], _runtime_section(racy, 0))
    lines = order_sentences({"stream_order": section})
    assert len(lines) == 2
    assert lines[0].startswith("Missing synchronisation in the GPU runtime") and "s0→s3" in lines[0]
    assert lines[1].startswith("Needless serialisation in the GPU runtime") and "s1→s2 ×4" in lines[1]

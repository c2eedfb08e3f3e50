"""The workload's collective ops joined with the NCCL/RCCL calls gpu_runtime saw (issue 26, item 3).

Unit: maps as bpftrace 0.17 prints them and harness op rows → the family's collectives rows →
tracing/collective_join.py; every row, verdict and byte count recomputed by hand below. End to
end (slow, ebpf): `run comms_compute_overlap -d cuda:0 --ebpf-gpu-runtime` through
cli_with_fakes --fake-cuda-runtime --fake-nccl, whose fake torch.distributed calls the real
libnccl's ncclAllReduce on the current stream for each all_reduce; ground truth: the fake's log
of the calls it made inside the tracer's window.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aorta.ebpf.probes.base import CollectContext, StreamHandle, Window
from aorta.ebpf.probes.gpu_runtime import GpuRuntimeFamily
from aorta.ebpf.probes.gpu_runtime_views import ALL_VIEWS
from aorta.hw_queue_eval.ops.opfold import OpFold
from aorta.hw_queue_eval.ops.records import OpRecord
from aorta.hw_queue_eval.tracing.collective_join import collective_join, harness_collective_ops
from aorta.hw_queue_eval.workloads.collectives import CollectiveFacts
from ebpf_support import attached_probe

S0, S1, S2, FOREIGN = 4096, 8192, 16384, 12288  # harness streams 0-2; a stream it did not create
HANDLES = (StreamHandle(0, S0), StreamHandle(1, S1), StreamHandle(2, S2))
FACTS = CollectiveFacts(
    mode="torch.distributed",
    backend="nccl",
    world_size=2,
    bytes_per_call={"all_reduce": 4000, "all_gather": 1024, "reduce_scatter": None, "all_to_all": 64},
)


def _stats(n: int, total: int) -> dict[str, int]:
    return {"count": n, "average": total // n, "total": total}


# @gpu_runtime_colls: "api id,stream,datatype" → stats(count, Σ elements); ids from gpu_runtime_apis
COLLS = {
    "151,4096,7": _stats(3, 3000),  # ncclAllReduce on s0: 3 calls, float32: 12000 bytes
    "152,8192,7": _stats(2, 512),  # ncclAllGather on s1: 2 calls, 2048 bytes
    "160,8192,0": _stats(2, 20),  # ncclSend on s1 (c10d's all_to_all), int8
    "161,8192,0": _stats(2, 20),  # ncclRecv on s1
    "151,12288,7": _stats(1, 1000),  # ncclAllReduce on a stream the harness did not create
    "154,4096,9": _stats(1, 8),  # ncclBroadcast on s0: no op of the workload
}


def _ops() -> list[OpRecord]:
    """Harness ops: s0 2 all_reduce + 1 reduce+all_reduce (3 all_reduce), 5 gemm; s1 3 all_gather,
    1 all_to_all; s2 2 reduce_scatter."""
    labels = [
        (0, "all_reduce"),
        (0, "all_reduce"),
        (0, "reduce+all_reduce"),
        *[(0, "gemm")] * 5,
        *[(1, "all_gather")] * 3,
        (1, "all_to_all"),
        (2, "reduce_scatter"),
        (2, "reduce_scatter"),
    ]
    return [OpRecord(0, s, None, label, None, 10 * i, 10 * i + 5) for i, (s, label) in enumerate(labels)]


def _metrics(
    colls: dict[str, Any], views: tuple[str, ...] = ALL_VIEWS, probed: bool = True
) -> dict[str, Any]:
    family = GpuRuntimeFamily(libraries=[], views=views)
    family.attached = [attached_probe("ncclAllReduce", "push")] if probed else []
    maps = {"@gpu_runtime_colls": colls}
    window = Window(1, 1 + 1_000_000)  # 1 ms
    return family.collect(maps, CollectContext(window=window, stream_handles=HANDLES)).metrics


def _by_cell(joined: dict[str, Any]) -> dict[tuple[int | None, str], dict[str, Any]]:
    return {(r["stream"], r["op"]): r for r in joined["rows"]}


def test_harness_collective_ops_from_rows_and_from_the_fold() -> None:
    ops = _ops()
    want = {(0, "all_reduce"): 3, (1, "all_gather"): 3, (1, "all_to_all"): 1, (2, "reduce_scatter"): 2}
    assert harness_collective_ops(ops, None) == want
    labels = sorted({op.label for op in ops})
    fold = OpFold(3, labels, row_cap=4)  # more ops than rows: every op counted by the fold
    fold.add(0, [(0, op.stream, labels.index(op.label), op.start_ns, op.start_ns, op.end_ns) for op in ops])
    folded = fold.statistics()
    assert folded is not None and len(fold.records(0)) == 4
    assert harness_collective_ops(fold.records(0), folded) == want


def test_collectives_joined_with_the_workloads_ops_recomputed_by_hand() -> None:
    """Every row: harness ops vs runtime calls per (stream, kind), bytes where both sides know
    them, the verdict and what it means; totals per kind over every stream."""
    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_gpu_runtime import render_gpu_runtime_rows

    m = _metrics(COLLS)
    joined = collective_join(m, harness_collective_ops(_ops(), None), FACTS)
    assert joined["reason"] is None and joined["mode"] == "torch.distributed"
    cells = _by_cell(joined)
    assert list(cells) == [  # harness streams in index order, then the foreign stream's rows
        (0, "all_reduce"),
        (0, "broadcast"),
        (1, "all_gather"),
        (1, "all_to_all"),
        (2, "reduce_scatter"),
        (None, "all_reduce"),
    ]
    exact = cells[(0, "all_reduce")]
    assert (exact["harness_ops"], exact["runtime_calls"], exact["verdict"]) == (3, 3, "exact")
    assert exact["runtime_by_api"] == {"ncclAllReduce": 3}
    assert (exact["harness_bytes"], exact["runtime_bytes"], exact["bytes_equal"]) == (
        3 * 4000,
        3000 * 4,
        True,
    )
    assert exact["bytes_reason"] is None
    fewer = cells[(1, "all_gather")]
    assert (fewer["harness_ops"], fewer["runtime_calls"], fewer["verdict"]) == (3, 2, "runtime_fewer")
    assert (fewer["harness_bytes"], fewer["runtime_bytes"], fewer["bytes_equal"]) == (
        3 * 1024,
        512 * 4,
        False,
    )
    assert "coalesced" in fewer["meaning"]
    a2a = cells[(1, "all_to_all")]
    assert (a2a["harness_ops"], a2a["runtime_calls"], a2a["verdict"]) == (1, 4, "runtime_more")
    assert a2a["runtime_by_api"] == {"ncclRecv": 2, "ncclSend": 2}
    assert a2a["harness_bytes"] is None and a2a["runtime_bytes"] == 40 and a2a["bytes_equal"] is None
    assert (
        "ncclSend/ncclRecv" in a2a["bytes_reason"]
        and "one ncclSend and one ncclRecv per peer" in a2a["meaning"]
    )
    never = cells[(2, "reduce_scatter")]
    assert (never["harness_ops"], never["runtime_calls"], never["runtime_bytes"]) == (2, 0, 0)
    assert never["harness_bytes"] is None and "different sizes" in never["bytes_reason"]
    extra = cells[(0, "broadcast")]
    assert (extra["harness_ops"], extra["runtime_calls"], extra["verdict"]) == (0, 1, "runtime_more")
    assert extra["harness_bytes"] == 0 and extra["runtime_bytes"] == 8 * 2  # 8 bfloat16 elements
    foreign = cells[(None, "all_reduce")]
    assert (foreign["harness_ops"], foreign["runtime_calls"], foreign["verdict"]) == (0, 1, "runtime_more")
    assert "did not create" in foreign["meaning"]
    assert joined["totals"] == [
        {"op": "all_gather", "harness_ops": 3, "runtime_calls": 2, "verdict": "runtime_fewer"},
        {"op": "all_reduce", "harness_ops": 3, "runtime_calls": 4, "verdict": "runtime_more"},
        {"op": "all_to_all", "harness_ops": 1, "runtime_calls": 4, "verdict": "runtime_more"},
        {"op": "broadcast", "harness_ops": 0, "runtime_calls": 1, "verdict": "runtime_more"},
        {"op": "reduce_scatter", "harness_ops": 2, "runtime_calls": 0, "verdict": "runtime_fewer"},
    ]
    section = {"families": {"gpu_runtime": {"events_attached": ["x"], "metrics": m}}}
    out = io.StringIO()
    render_gpu_runtime_rows(section, Console(file=out, width=200), joined)
    text = out.getvalue()
    assert "collectives vs the workload's collective ops" in text
    assert "s0     all_reduce           3      3 exact             12000 / 12000" in text
    assert "s1     all_gather           3      2 runtime saw fewer 3072 / 2048" in text
    assert "-      all_reduce           0      1 runtime saw more  0 / 4000" in text
    assert "s1 all_to_all: c10d ran each all_to_all as one ncclSend and one ncclRecv" in text
    assert "s0 all_reduce:" not in text  # exact rows need no explanation


def test_outside_torchrun_the_join_says_the_collectives_were_one_rank_copies() -> None:
    """Harness collective ops, libnccl probed, no call made: each row runtime_fewer, and the
    reason is the run's mode, not a missed event."""
    facts = CollectiveFacts(mode="single_process", backend=None, world_size=1, bytes_per_call={})
    joined = collective_join(_metrics({}), harness_collective_ops(_ops(), None), facts)
    assert {k: (r["harness_ops"], r["runtime_calls"]) for k, r in _by_cell(joined).items()} == {
        (0, "all_reduce"): (3, 0),
        (1, "all_gather"): (3, 0),
        (1, "all_to_all"): (1, 0),
        (2, "reduce_scatter"): (2, 0),
    }
    for row in joined["rows"]:
        assert row["verdict"] == "runtime_fewer" and "not under torchrun" in row["meaning"]
        assert row["harness_bytes"] is None and "one-rank copies" in row["bytes_reason"]
    gloo = CollectiveFacts(mode="torch.distributed", backend="gloo", world_size=2, bytes_per_call={})
    joined = collective_join(_metrics({}), harness_collective_ops(_ops(), None), gloo)
    assert all("backend is gloo" in r["meaning"] for r in joined["rows"])


@pytest.mark.parametrize("probed", [False, True], ids=["no_libnccl", "switched_off"])
def test_collectives_not_probed_is_null_with_the_reason_never_zero_calls(probed: bool) -> None:
    views = ALL_VIEWS if not probed else ("launches",)
    joined = collective_join(_metrics(COLLS, views, probed), harness_collective_ops(_ops(), None), FACTS)
    assert joined["rows"] is None and joined["totals"] is None
    reason = joined["reason"]
    assert reason.startswith("runtime collectives not probed: ")
    assert ("switched off" in reason) if probed else ("libnccl/librccl" in reason)
    out = io.StringIO()
    from rich.console import Console

    from aorta.hw_queue_eval.report.ebpf_gpu_runtime import render_collective_join

    render_collective_join(joined, Console(file=out, width=200))
    assert out.getvalue() == ""  # nothing to show: no block


# -- end to end: `run fsdp_tp -d cuda:0` on the fake device, its collectives calling the real libnccl
ITERATIONS, LAYERS = 3, 3  # fsdp_tp small: 3 layers, one all_gather and one reduce_scatter each
RUN = ("run", "fsdp_tp", "--streams", "4", "-d", "cuda:0", "--size", "small")
RUN_OPTIONS = ("-i", str(ITERATIONS), "-w", "1", "--ebpf-gpu-runtime")
KIND_OF = {"ncclAllGather": "all_gather", "ncclReduceScatter": "reduce_scatter"}
FLOAT32 = 7  # ncclDataType_t


@pytest.mark.slow
@pytest.mark.ebpf
def test_run_joins_each_ranks_collective_ops_with_the_real_libnccl_calls(tmp_path: Path) -> None:
    """harness → GPU backend (fake device over the real libcudart) → fsdp_tp's collectives through
    a one-rank torch.distributed calling the real libnccl on the comms stream → window tracer →
    `ebpf_vs_cuda_comparison.collectives`. Ground truths: the fake's log of the NCCL calls made
    inside the window (stream, count, datatype), and the result's own op rows for the harness side."""
    from conftest import run_cli, vendor_library
    from ebpf_support import require_ebpf

    require_ebpf()
    vendor_library("cudart")
    vendor_library("nccl")
    log, result_path = tmp_path / "calls.json", tmp_path / "result.json"
    proc = run_cli(*RUN, *RUN_OPTIONS, "-o", str(result_path), fakes=("--fake-cuda-nccl", str(log)))
    assert proc.returncode == 0, proc.stderr
    made = json.loads(log.read_text())
    index = {handle: i for i, handle in enumerate(made["streams"][:4])}
    calls: Counter[tuple[int, str]] = Counter()
    elements: Counter[tuple[int, str]] = Counter()
    for api, stream, count, dtype in made["collectives"]:
        assert dtype == FLOAT32
        calls[(index[stream], KIND_OF[api])] += 1
        elements[(index[stream], KIND_OF[api])] += count
    assert calls == {(0, "all_gather"): ITERATIONS * LAYERS, (0, "reduce_scatter"): ITERATIONS * LAYERS}
    result = json.loads(result_path.read_text())
    intervals = result["op_intervals"]
    assert not intervals["truncated"]
    label = intervals["columns"].index("label")
    ops = Counter((r[1], intervals["labels"][r[label]]) for r in intervals["rows"])
    joined = result["ebpf_vs_cuda_comparison"]["collectives"]
    assert joined["reason"] is None and joined["mode"] == "torch.distributed"
    assert [
        (r["stream"], r["op"], r["harness_ops"], r["runtime_calls"], r["runtime_bytes"], r["verdict"])
        for r in joined["rows"]
    ] == [
        (s, kind, ops[(s, kind)], n, elements[(s, kind)] * 4, "exact")
        for (s, kind), n in sorted(calls.items())
    ]
    assert all(r["bytes_equal"] is True for r in joined["rows"])
    assert "collectives vs the workload's collective ops" in proc.stdout
    assert "s0     all_gather           9      9 exact" in proc.stdout


def test_collective_facts_size_each_kind_in_nccls_count_semantics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Collectives under a (faked) two-rank process group records the bytes NCCL's count argument
    covers: the tensor for all_reduce, the send buffer (one shard) for all_gather, the receive
    buffer for reduce_scatter, the per-peer chunk for all_to_all; two sizes of one kind → None."""
    import torch
    import torch.distributed as dist

    from aorta.hw_queue_eval.workloads.collectives import Collectives
    from fake_cuda import patch_process_group

    ops = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
    patch_process_group(monkeypatch, 2, {n: (lambda *a, **k: None) for n in ops})
    comm = Collectives()
    f32, f16 = torch.float32, torch.float16
    comm.all_reduce(torch.empty(10, dtype=f32), torch.ones(10, dtype=f32))
    comm.all_gather(torch.empty(2 * 6, dtype=f16), torch.ones(6, dtype=f16))
    comm.reduce_scatter(torch.empty(3, dtype=f32), torch.ones(6, dtype=f32))
    comm.all_to_all(torch.empty(8, dtype=f32), torch.ones(8, dtype=f32))
    comm.all_reduce(torch.empty(10, dtype=f32), torch.ones(10, dtype=f32))  # same size again
    assert comm.facts() == CollectiveFacts(
        mode="torch.distributed",
        backend="nccl",
        world_size=2,
        bytes_per_call={
            "all_gather": 6 * 2,
            "all_reduce": 10 * 4,
            "all_to_all": 4 * 4,
            "reduce_scatter": 3 * 4,
        },
    )
    comm.all_reduce(torch.empty(5, dtype=f32), torch.ones(5, dtype=f32))  # another size
    assert comm.facts().bytes_per_call["all_reduce"] is None
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    alone = Collectives()
    alone.all_reduce(torch.empty(10), torch.ones(10))
    assert alone.facts() == CollectiveFacts("single_process", None, 1, {})  # no real call: nothing sized

"""`run`'s upstream AORTA 0.3.0 knobs: comms_compute_overlap's workload options and the
torchrun collective flags (`--real-collectives --async-op --backend --process-groups`).

Everything is checked here, before torch loads, into `RunConfig.workload_options` and
`RunConfig.dist_backend`; the workload class checks its own options once more
(`CommsComputeOverlap.check_options`), so the API and the CLI refuse the same values.
"""

from __future__ import annotations

import re
from typing import Any

import click

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.config.run_config import parse_positive_int

OVERLAP_WORKLOAD = "comms_compute_overlap"
DIST_BACKENDS = ("nccl", "gloo")
SIZE_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}  # upstream's binary suffixes
MAX_GROUPS = 1024


def overlap_options(func: Any) -> Any:
    """comms_compute_overlap's knobs, named as upstream names them."""
    options = [
        ("--mode", "comms_compute (default), compute_only or comms_only (--streams 1)."),
        ("--mm-dim", "GEMM sides M,N,K (or one value for all three), e.g. 2048,2048,2048."),
        ("--num-compute", "GEMMs per compute stream (set) per iteration."),
        ("--num-coll", "All-reduces per iteration on the comms stream [default: one per set]."),
        ("--comm-size", "Bytes of one separate all-reduce tensor (K/M/G suffix, e.g. 128M)."),
        ("--compute-streams", "GEMM sets, shared round-robin by the compute streams."),
        ("--comp-dtype", "GEMM dtype: float32, float16 or bfloat16."),
        ("--comm-dtype", "All-reduce dtype: float32, float16 or bfloat16."),
    ]
    for flag, text in reversed(options):
        func = click.option(flag, default=None, help=f"comms_compute_overlap: {text}")(func)
    return func


def collective_options(func: Any) -> Any:
    """The torchrun collective flags (each one-line refused outside torchrun)."""
    func = click.option(
        "--process-groups",
        "process_groups",
        default=None,
        metavar="SPEC",
        help='Under torchrun, comms_compute_overlap: rank groups, e.g. "[0,1],[2,3]"; each '
        "rank all-reduces in the first group that holds it (every rank must be in one).",
    )(func)
    func = click.option(
        "--backend",
        "dist_backend",
        default=None,
        help="Under torchrun: process-group backend, nccl (GPU) or gloo [default: nccl on GPU, gloo on CPU].",
    )(func)
    func = click.option(
        "--async-op",
        is_flag=True,
        help="Under torchrun, comms_compute_overlap: all-reduces return at once; one wait op "
        "on the comms stream ends each iteration.",
    )(func)
    return click.option(
        "--real-collectives",
        is_flag=True,
        help="Accepted for upstream scripts: under torchrun collectives are always real "
        "(torch.distributed); outside it, refused (a world of one rank has none).",
    )(func)


def parse_size(text: str, flag: str = "--comm-size") -> int:
    """'128M' → 134217728 (binary K/M/G, as upstream); UsageError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise UsageError(f"{flag} must be bytes with an optional K/M/G suffix (e.g. 128M), got {text!r}")
    value = int(match.group(1)) * SIZE_SUFFIX[match.group(2).upper()]
    if value < 1:
        raise UsageError(f"{flag} must be at least 1 byte, got {text!r}")
    return value


def parse_mm_dim(text: str) -> tuple[int, int, int]:
    """'M,N,K' or 'N' → (M, N, K); UsageError naming the problem."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (1, 3) or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise UsageError(f"--mm-dim must be M,N,K or one value, positive whole numbers, got {text!r}")
    dims = [int(p) for p in parts]
    m, n, k = dims * 3 if len(dims) == 1 else dims
    return m, n, k


def overlap_knobs(workload: str, streams: int, values: dict[str, str | None]) -> JsonObject:
    """The comms_compute_overlap options from the raw flag values (empty when none is given)."""
    given = {name: value for name, value in values.items() if value is not None}
    if not given:
        return {}
    if workload != OVERLAP_WORKLOAD:
        flags = ", ".join(f"--{n.replace('_', '-')}" for n in given)
        raise UsageError(f"{flags} apply to {OVERLAP_WORKLOAD} only, not {workload}: drop them")
    options: JsonObject = {}
    for name, value in given.items():
        if name == "mm_dim":
            options["mm_dim"] = parse_mm_dim(value)
        elif name == "comm_size":
            options["comm_bytes"] = parse_size(value)
        elif name in ("num_compute", "num_coll", "compute_streams"):
            options[name] = parse_positive_int(value, f"--{name.replace('_', '-')}")
        else:  # mode, dtypes: the workload names the choices
            options[name] = value
    from aorta.hw_queue_eval.workloads.comms_compute_overlap import CommsComputeOverlap

    return CommsComputeOverlap.check_options(options, streams)


def parse_process_groups(text: str) -> list[list[int]]:
    """'[0,1,2,3],[4,5,6,7]' → [[0, 1, 2, 3], [4, 5, 6, 7]]; UsageError for anything else."""
    spec = str(text).replace(" ", "")
    if not re.fullmatch(r"\[\d+(,\d+)*\](,\[\d+(,\d+)*\])*", spec):
        raise UsageError(f'--process-groups must be lists of ranks such as "[0,1],[2,3]", got {text!r}')
    groups = [[int(r) for r in part.split(",")] for part in re.findall(r"\[([\d,]+)\]", spec)]
    if len(groups) > MAX_GROUPS:
        raise UsageError(f"--process-groups: at most {MAX_GROUPS} groups, got {len(groups)}")
    for ranks in groups:
        if len(set(ranks)) != len(ranks):
            raise UsageError(f"--process-groups: group {ranks} lists a rank twice")
    return groups


def collective_knobs(
    workload: str,
    world_size: int | None,
    real_collectives: bool,
    async_op: bool,
    dist_backend: str | None,
    process_groups: str | None,
) -> tuple[JsonObject, str | None]:
    """(workload options, process-group backend) from the collective flags; `world_size` is
    None outside torchrun, where every one of them is refused."""
    used = [
        flag
        for flag, on in (
            ("--real-collectives", real_collectives),
            ("--async-op", async_op),
            ("--backend", dist_backend is not None),
            ("--process-groups", process_groups is not None),
        )
        if on
    ]
    if not used:
        return {}, None
    if world_size is None:
        raise UsageError(
            f"{', '.join(used)} need torchrun (real collectives between ranks): "
            "torchrun --nproc-per-node N -m aorta.hw_queue_eval run … (docs/distributed.md)"
        )
    if dist_backend is not None and dist_backend not in DIST_BACKENDS:
        raise UsageError(f"unknown --backend {dist_backend!r}: use nccl or gloo")
    options: JsonObject = {}
    if (async_op or process_groups is not None) and workload != OVERLAP_WORKLOAD:
        raise UsageError(f"--async-op and --process-groups apply to {OVERLAP_WORKLOAD} only, not {workload}")
    if async_op:
        options["async_op"] = True
    if process_groups is not None:
        groups = parse_process_groups(process_groups)
        outside = sorted({r for g in groups for r in g if r >= world_size})
        if outside:
            raise UsageError(
                f"--process-groups: rank {outside[0]} is outside this job's ranks 0..{world_size - 1}"
            )
        missing = sorted(set(range(world_size)) - {r for g in groups for r in g})
        if missing:
            raise UsageError(f"--process-groups: rank {missing[0]} is in no group: every rank needs one")
        options["process_groups"] = groups
    return options, dist_backend

"""Runs under torchrun: one rank per process, real collectives, results gathered on rank 0.

`torchrun --nproc-per-node N -m aorta.hw_queue_eval run W --streams S -o r.json` (or
`python -m torch.distributed.run`) starts N copies of `run`. Each sees torchrun's environment,
picks its device (cuda:LOCAL_RANK on GPU, the CPU backend otherwise), joins the default process
group (gloo on CPU, nccl on CUDA/ROCm) and runs the same benchmark; the distributed workloads
then issue real collectives on their comms stream (workloads/collectives.py). Warm-up and the
window start are aligned with barriers. Rank 0 gathers every rank's result, prints the per-rank
table with the straggler, and alone writes `-o` (atomically) with every rank's result inside.

Failures: every collective and barrier has the process-group timeout; a rank that raises records
a one-line reason in torchrun's store before exiting, and a rank whose collective times out
names the failed rank(s) from the store instead of hanging.
"""

from __future__ import annotations

import os
import socket
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from aorta.common import environment
from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.config.run_config import RunConfig

ERROR_KEY = "aorta/error/"
DEFAULT_TIMEOUT_S = 300


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in a torchrun job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int


def _int_env(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise UsageError(
                f"torchrun environment incomplete: {name} is not set (start the run with torchrun)"
            )
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"torchrun environment: {name}={raw!r} is not a number") from None


def torchrun_env(environ: Mapping[str, str] | None = None) -> DistEnv | None:
    """This process's place in a torchrun job, or None when not started by torchrun."""
    env = environment.snapshot() if environ is None else environ
    if "TORCHELASTIC_RUN_ID" not in env and "LOCAL_RANK" not in env:
        return None
    dist_env = DistEnv(
        rank=_int_env(env, "RANK"),
        world_size=_int_env(env, "WORLD_SIZE"),
        local_rank=_int_env(env, "LOCAL_RANK"),
        local_world_size=_int_env(env, "LOCAL_WORLD_SIZE", 1),
        node_rank=_int_env(env, "GROUP_RANK", 0),
    )
    if not 0 <= dist_env.rank < dist_env.world_size:
        raise UsageError(
            f"torchrun environment: RANK {dist_env.rank} is outside WORLD_SIZE {dist_env.world_size}"
        )
    return dist_env


def rank_device(device: str, env: DistEnv) -> str:
    """cuda:LOCAL_RANK when a GPU is asked for (or auto and present), else cpu."""
    import torch

    dev = (device or "auto").strip().lower()
    if dev == "cpu":
        return "cpu"
    if dev.startswith("cuda:"):
        raise UsageError(
            f"--device {device}: under torchrun each rank uses cuda:LOCAL_RANK; use --device cuda or auto"
        )
    if dev not in ("auto", "cuda"):
        raise UsageError(f"--device {device!r} is not known: use auto, cpu or cuda")
    if not torch.cuda.is_available():
        if dev == "cuda":
            raise UsageError("--device cuda: torch sees no GPU on this machine (use --device cpu)")
        return "cpu"
    count = torch.cuda.device_count()
    if env.local_rank >= count:
        raise UsageError(
            f"local rank {env.local_rank} has no GPU: only {count} visible; use --nproc-per-node ≤ {count}"
        )
    return f"cuda:{env.local_rank}"


def default_store() -> Any:
    """torchrun's key-value store of the default process group (ranks hand data over through it)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def report_failure(env: DistEnv, message: str) -> None:
    """Leave `rank N: message` in torchrun's store so the other ranks can name this rank."""
    import contextlib

    with contextlib.suppress(Exception):
        default_store().set(f"{ERROR_KEY}{env.rank}", f"rank {env.rank}: {message}"[:500])


def failed_ranks(env: DistEnv) -> list[str]:
    """The failure lines other ranks left in the store (empty when none or unreachable)."""
    found = []
    try:
        store = default_store()
        for rank in range(env.world_size):
            key = f"{ERROR_KEY}{rank}"
            if rank != env.rank and store.check([key]):
                found.append(store.get(key).decode(errors="replace"))
    except Exception:  # the store died with rank 0's agent: nothing more to learn
        return found
    return found


def make_barrier(backend: str, timeout_s: float) -> Callable[[], None]:
    """A barrier with a timeout; on gloo a monitored one, which names the ranks that never came."""
    import torch.distributed as dist

    def barrier() -> None:
        if backend == "gloo":
            dist.monitored_barrier(timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
        else:
            dist.barrier()

    return barrier


def check_backend_device(dist_backend: str | None, device: str) -> None:
    """--backend nccl needs a GPU: refuse it for a rank on the CPU backend."""
    if dist_backend == "nccl" and device == "cpu":
        raise UsageError(
            "--backend nccl needs a GPU; on the CPU backend use --backend gloo (the default there)"
        )


def run_distributed(
    config: RunConfig,
    env: DistEnv,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tracer: Any = None,
    benchmark: Callable[..., Any] | None = None,
) -> JsonObject | None:
    """Run `config` on this rank; rank 0 returns the combined result, the others None.

    `benchmark` measures this rank's run (default harness.run_benchmark); whatever it raises is
    reported to the other ranks before it propagates."""
    import torch.distributed as dist

    from aorta.hw_queue_eval.run.harness import run_benchmark

    benchmark = benchmark or run_benchmark

    device = rank_device(config.device, env)
    check_backend_device(config.dist_backend, device)
    backend = config.dist_backend or ("gloo" if device == "cpu" else "nccl")
    if device != "cpu":
        import torch

        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    try:
        try:
            result = benchmark(
                replace(config, device=device), tracer=tracer, barrier=make_barrier(backend, timeout_s)
            ).to_dict()
        except Exception as exc:
            others = failed_ranks(env)
            if others:  # our collective failed because another rank died first: name it
                raise UsageError(f"rank {env.rank} stopped: {others[0]}") from None
            report_failure(env, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            raise
        result["distributed"] = rank_info(env, backend)
        gathered: list[Any] | None = [None] * env.world_size if env.rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    return combine(gathered) if gathered is not None else None


def rank_info(env: DistEnv, backend: str) -> JsonObject:
    """This rank's identity in the job, for its result."""
    return {
        "mode": "torchrun",
        "backend": backend,
        "rank": env.rank,
        "world_size": env.world_size,
        "local_rank": env.local_rank,
        "local_world_size": env.local_world_size,
        "node_rank": env.node_rank,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def rank_summary(result: JsonObject) -> JsonObject:
    """One row of the per-rank table."""
    info = result["distributed"]
    latency = result.get("latency_ms") or {}
    return {
        "rank": info["rank"],
        "node_rank": info["node_rank"],
        "local_rank": info["local_rank"],
        "hostname": info["hostname"],
        "pid": info["pid"],
        "throughput": result.get("throughput"),
        "unit": result.get("throughput_unit"),
        "p50_ms": latency.get("p50"),
        "p99_ms": latency.get("p99"),
        "window_ms": result.get("total_time_ms"),
        "status": result.get("status"),
        "verification_passed": (result.get("verification") or {}).get("passed"),
    }


def combine(results: list[JsonObject]) -> JsonObject:
    """Rank 0's result as the top level (compare/report read it), every rank's inside."""
    results = sorted(results, key=lambda r: r["distributed"]["rank"])
    rows = [rank_summary(r) for r in results]
    windows = [r["window_ms"] for r in rows]
    slowest = max(rows, key=lambda r: r["window_ms"])
    fastest = min(windows)
    throughputs = [r["throughput"] for r in rows if r["throughput"] is not None]
    combined = dict(results[0])
    combined["distributed"] = {
        **results[0]["distributed"],
        "nodes": len({r["node_rank"] for r in rows}),
        "ranks": rows,
        "aggregate": {
            "throughput_sum": sum(throughputs) if len(throughputs) == len(rows) else None,
            "throughput_note": "sum over ranks of each rank's throughput (every rank runs the full workload)",
            "unit": results[0].get("throughput_unit"),
            "window_ms_max": max(windows),
            "window_ms_median": statistics.median(windows),
            "straggler": {
                "rank": slowest["rank"],
                "window_ms": slowest["window_ms"],
                "lag_ms": slowest["window_ms"] - fastest,
                "definition": "rank with the longest window; lag = its window minus the shortest window",
            },
        },
        "rank_results": results,
    }
    if any(r["status"] != "ok" for r in rows):
        combined["status"] = "failed"
        bad = [str(r["rank"]) for r in rows if r["status"] != "ok"]
        combined["error"] = f"rank(s) {', '.join(bad)} failed verification"
    return combined


def format_rank_table(combined: JsonObject) -> list[str]:
    """Plain-text per-rank table plus the aggregate line (rank 0 prints it)."""
    dist_info = combined["distributed"]
    agg = dist_info["aggregate"]
    unit = agg["unit"]

    def num(value: Any, fmt: str = ".3g") -> str:
        return "n/a" if value is None else format(value, fmt)

    lines = [
        f"{'rank':>4} {'node':>4} {'local':>5} {'throughput':>12} {'p50 ms':>9} "
        f"{'p99 ms':>9} {'window ms':>10}  status"
    ]
    for row in dist_info["ranks"]:
        mark = (
            "  ← straggler" if row["rank"] == agg["straggler"]["rank"] and len(dist_info["ranks"]) > 1 else ""
        )
        lines.append(
            f"{row['rank']:>4} {row['node_rank']:>4} {row['local_rank']:>5} "
            f"{num(row['throughput']):>12} {num(row['p50_ms']):>9} "
            f"{num(row['p99_ms']):>9} {num(row['window_ms'], '.1f'):>10}  "
            f"{row['status']}{mark}"
        )
    lines.append(
        f"aggregate: {num(agg['throughput_sum'])} {unit} over "
        f"{len(dist_info['ranks'])} ranks on {dist_info['nodes']} node(s); window max "
        f"{agg['window_ms_max']:.1f} ms; straggler rank {agg['straggler']['rank']} "
        f"(+{agg['straggler']['lag_ms']:.1f} ms vs the fastest)"
    )
    return lines

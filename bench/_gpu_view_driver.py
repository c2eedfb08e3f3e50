"""Driver for bench/_gpu_view_points.py: known numbers of GPU runtime calls of each gpu_runtime view.

Run on a GPU machine (torch with CUDA or ROCm). It sets everything up first (CUDA/HIP initialised,
two side streams, a captured CUDA graph, pinned host buffers, a world-size-1 NCCL/RCCL process
group through a FileStore in a private temp folder — no network rendezvous —, one warm pass of
each call), times one untraced round of every kind of call, prints one JSON line
`{"ready": true, "pid": …, "producer": handle, "consumer": handle, "all_reduce": {…}}` and waits
for a line on stdin. Then it makes exactly GRAPHS graph replays on the producer stream (one
cudaGraphLaunch / hipGraphLaunch each), COPIES host→device copies of BYTES bytes from pinned
memory on the producer (one cudaMemcpyAsync / hipMemcpyAsync H2D each), WAITS cross-stream waits
of the consumer on the producer (torch `wait_stream`: one event record on the producer, one
stream wait on the consumer each) and ALL_REDUCES all-reduces of BYTES bytes (float32) on the
producer (torch runs a collective with async_op=False on the current stream: one ncclAllReduce
each), synchronises, prints `{"done": true, "timing_us": {"untraced": …, "traced": …}}` (host
time per call of each kind, µs) and exits.

    python bench/_gpu_view_driver.py GRAPHS COPIES WAITS BYTES ALL_REDUCES
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def one_rank_group(backend: str, device: Any = None) -> str:
    """Initialise a world-size-1 torch.distributed process group on `backend` through a FileStore
    in a new private temp folder (mkdtemp: 0700, so no other user can plant the store file);
    returns the folder, which the caller removes after destroy_process_group."""
    import torch.distributed as dist

    folder = tempfile.mkdtemp(prefix="aorta-view-pg-")
    store = dist.FileStore(os.path.join(folder, "store"), 1)
    extra = {"device_id": device} if device is not None else {}
    dist.init_process_group(backend, store=store, rank=0, world_size=1, **extra)
    return folder


def timed(calls: int, make: Callable[[], Any], sync: Callable[[], Any]) -> float | None:
    """Host µs per call of `calls` calls of `make` (the queue drained before and after, not
    timed); None for no call."""
    if calls <= 0:
        return None
    sync()
    start = time.perf_counter_ns()
    for _ in range(calls):
        make()
    elapsed = time.perf_counter_ns() - start
    sync()
    return elapsed / calls / 1e3


def main(argv: list[str]) -> int:
    graphs, copies, waits, size, all_reduces = (int(a) for a in argv)
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    producer, consumer = torch.cuda.Stream(device=device), torch.cuda.Stream(device=device)
    host = torch.ones(size // 4, dtype=torch.float32).pin_memory()
    dev = torch.empty(size // 4, dtype=torch.float32, device=device)
    red = torch.ones(size // 4, dtype=torch.float32, device=device)
    x = torch.ones(256, device=device)
    graph = torch.cuda.CUDAGraph()
    folder, reduce_state = None, {"ran": False, "reason": None, "backend": "nccl", "world_size": 1}
    try:
        folder = one_rank_group("nccl", device)
        reduce_state["ran"] = True
    except Exception as exc:  # no NCCL/RCCL in this torch, or it cannot initialise here
        reduce_state["reason"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    import torch.distributed as dist

    with torch.cuda.stream(producer):
        y = x * 2  # warm the kernel before capture, as capture requires
        producer.synchronize()
        with torch.cuda.graph(graph, stream=producer):
            y = x * 2 + 1
        graph.replay()  # one warm pass of each call: lazy initialisation happens before the window
        dev.copy_(host, non_blocking=True)
        if reduce_state["ran"]:
            dist.all_reduce(red)  # the communicator is created here, not in the window
    consumer.wait_stream(producer)
    torch.cuda.synchronize()

    def round_of_calls() -> dict[str, float | None]:
        """Every kind of call once round, each timed (host µs per call)."""
        sync = torch.cuda.synchronize
        with torch.cuda.stream(producer):
            out = {
                "graph_launches": timed(graphs, graph.replay, sync),
                "copies": timed(copies, lambda: dev.copy_(host, non_blocking=True), sync),
                "all_reduces": timed(
                    all_reduces if reduce_state["ran"] else 0, lambda: dist.all_reduce(red), sync
                ),
            }
        out["waits"] = timed(waits, lambda: consumer.wait_stream(producer), sync)
        return out

    try:
        untraced = round_of_calls()  # before ebpf-attach: no uprobe on any of these calls
        print(
            json.dumps(
                {
                    "ready": True,
                    "pid": os.getpid(),
                    "producer": hex(producer.cuda_stream),
                    "consumer": hex(consumer.cuda_stream),
                    "all_reduce": {**reduce_state, "bytes_per_call": size // 4 * 4},
                }
            ),
            flush=True,
        )
        sys.stdin.readline()
        traced = round_of_calls()
        torch.cuda.synchronize()
        done = {
            "done": True,
            "checksum": float(y.sum()),
            "timing_us": {"untraced": untraced, "traced": traced},
        }
        print(json.dumps(done), flush=True)
    finally:
        if reduce_state["ran"]:
            dist.destroy_process_group()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

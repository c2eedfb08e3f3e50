"""Driver for bench/_gpu_view_points.py: known numbers of GPU runtime calls of each gpu_runtime view.

Run on a GPU machine (torch with CUDA or ROCm). It sets everything up first (CUDA/HIP initialised,
two side streams, a captured CUDA graph, pinned host buffers, one warm pass of each call), prints
one JSON line `{"ready": true, "pid": …, "producer": handle, "consumer": handle}` and waits for a
line on stdin. Then it makes exactly GRAPHS graph replays on the producer stream (one
cudaGraphLaunch / hipGraphLaunch each), COPIES host→device copies of BYTES bytes from pinned
memory on the producer (one cudaMemcpyAsync / hipMemcpyAsync H2D each) and WAITS cross-stream
waits of the consumer on the producer (torch `wait_stream`: one event record on the producer, one
stream wait on the consumer each), synchronises, prints `{"done": true, …}` and exits.

    python bench/_gpu_view_driver.py GRAPHS COPIES WAITS BYTES
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    graphs, copies, waits, size = (int(a) for a in argv)
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    producer, consumer = torch.cuda.Stream(device=device), torch.cuda.Stream(device=device)
    host = torch.ones(size // 4, dtype=torch.float32).pin_memory()
    dev = torch.empty(size // 4, dtype=torch.float32, device=device)
    x = torch.ones(256, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(producer):
        y = x * 2  # warm the kernel before capture, as capture requires
        producer.synchronize()
        with torch.cuda.graph(graph, stream=producer):
            y = x * 2 + 1
        graph.replay()  # one warm pass of each call: lazy initialisation happens before the window
        dev.copy_(host, non_blocking=True)
    consumer.wait_stream(producer)
    torch.cuda.synchronize()
    print(
        json.dumps(
            {
                "ready": True,
                "pid": os.getpid(),
                "producer": hex(producer.cuda_stream),
                "consumer": hex(consumer.cuda_stream),
            }
        ),
        flush=True,
    )
    sys.stdin.readline()
    with torch.cuda.stream(producer):
        for _ in range(graphs):
            graph.replay()
        for _ in range(copies):
            dev.copy_(host, non_blocking=True)
    for _ in range(waits):
        consumer.wait_stream(producer)
    torch.cuda.synchronize()
    print(json.dumps({"done": True, "checksum": float(y.sum())}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

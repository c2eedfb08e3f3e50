"""torch_compile: a diamond DAG of regions compiled with torch.compile (inductor).

Stream 0 runs the compiled entry region; streams 1..S-2 each run the compiled branch region (own
weights) on the entry output, after waiting for the entry; stream S-1 waits for every branch,
sums them and runs the compiled exit region. The three regions are compiled once, in `setup`
(before warm-up, outside the measurement window); the compile time is reported in the result
metadata. Region shapes do not depend on the stream count, so compiled code is reused across runs
in one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.workloads.base import VerifyResult, Workload, WorkloadInfo, compare_tensors

_COMPILED: dict[str, Callable[..., Any]] = {}  # region name → its compiled function


def entry_region(x: Any, w: Any) -> Any:
    """Entry of the diamond: projection + GELU."""
    import torch

    return torch.nn.functional.gelu(x @ w)


def branch_region(y: Any, w: Any) -> Any:
    """One branch: a residual tanh block."""
    import torch

    return torch.tanh(y @ w) * 0.5 + y


def exit_region(acc: Any, w: Any) -> Any:
    """Exit of the diamond: layer norm + projection + ReLU."""
    import torch

    return torch.relu(torch.nn.functional.layer_norm(acc, acc.shape[-1:]) @ w)


REGIONS = {"entry": entry_region, "branch": branch_region, "exit": exit_region}


def compiled_regions() -> dict[str, Callable[..., Any]]:
    """The three regions wrapped by torch.compile(backend='inductor'), once per process."""
    import torch

    if not _COMPILED:
        for name, fn in REGIONS.items():
            _COMPILED[name] = torch.compile(fn, backend="inductor", dynamic=False)
    return _COMPILED


def compile_error(exc: BaseException, device: Any) -> UsageError:
    """A one-line UsageError saying why inductor could not compile on this backend."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    return UsageError(
        f"torch_compile: inductor could not compile for {device}: "
        f"{type(exc).__name__}: {reason[:300]} (CPU needs a C++ compiler such as "
        "gcc; GPU needs triton)"
    )


class TorchCompile(Workload):
    INFO = WorkloadInfo(
        name="torch_compile",
        category="pipeline",
        description="Diamond DAG of torch.compile (inductor) regions across streams",
        min_streams=4,
        max_streams=12,
        recommended_streams=8,
        switch_sensitivity="medium",
        throughput_unit="samples/sec",
        work_scaling="fixed",
    )
    SIZES = {
        "small": {"batch": 16, "hidden": 64},
        "medium": {"batch": 256, "hidden": 1024},
        "large": {"batch": 2048, "hidden": 4096},
    }
    MODELS = (
        "A diamond of compiled regions (torch.compile, inductor): stream 0 runs the entry "
        "region; streams 1..S-2 each run a branch region (own weights) on the entry output "
        "after waiting for the entry; the last stream waits for every branch, sums them and runs "
        "the exit region. Compiled once before warm-up; compile time is reported, never "
        "measured in the window."
    )

    @classmethod
    def stream_roles(cls, streams: int) -> dict[str, list[int]]:
        return {"entry": [0], "branch": list(range(1, streams - 1)), "exit": [streams - 1]}

    def declared_edges(self) -> set[tuple[int, int]]:
        """Every branch waits for the entry; the exit stream waits for every branch."""
        last = self.stream_count - 1
        return {(0, b) for b in range(1, last)} | {(b, last) for b in range(1, last)}

    def setup(self) -> None:
        import torch

        b, h = self.params["batch"], self.params["hidden"]
        branches = self.stream_count - 2
        gen, dev = self.generator(), self.device
        self.x = self.randn(gen, b, h)
        self.w_entry = self.randn(gen, h, h, scale=h**-0.5)
        self.w_branch = [self.randn(gen, h, h, scale=h**-0.5) for _ in range(branches)]
        self.w_exit = self.randn(gen, h, h, scale=h**-0.5)
        self.mid = torch.empty(b, h, device=dev)
        self.branch_out = [torch.empty(b, h, device=dev) for _ in range(branches)]
        self.acc = torch.empty(b, h, device=dev)
        self.y = torch.empty(b, h, device=dev)
        self.reused = bool(_COMPILED)
        started = time.perf_counter()
        try:
            self.fn = compiled_regions()
            self.fn["entry"](self.x, self.w_entry)  # the first call compiles
            self.fn["branch"](self.x, self.w_branch[0])
            self.fn["exit"](self.x, self.w_exit)
        except Exception as exc:  # inductor/dynamo raise many types; all mean "cannot compile"
            raise compile_error(exc, dev) from None
        self.compile_seconds = time.perf_counter() - started

    def run_iteration(self, streams: list[Any]) -> None:
        entry, branches, exit_stream = streams[0], streams[1:-1], streams[-1]
        entry.launch(lambda: self.mid.copy_(self.fn["entry"](self.x, self.w_entry)), "compiled_entry")
        for i, stream in enumerate(branches):
            stream.wait(entry)
            stream.launch(
                lambda i=i: self.branch_out[i].copy_(self.fn["branch"](self.mid, self.w_branch[i])),
                "compiled_branch",
            )
            exit_stream.wait(stream)

        def join() -> None:
            self.acc.copy_(self.branch_out[0])
            for out in self.branch_out[1:]:
                self.acc.add_(out)

        exit_stream.launch(join, "sum_branches")
        exit_stream.launch(lambda: self.y.copy_(self.fn["exit"](self.acc, self.w_exit)), "compiled_exit")

    def work_per_iteration(self) -> float:
        return float(self.params["batch"])

    def verify(self) -> VerifyResult:
        mid = entry_region(self.x, self.w_entry)
        acc = sum(branch_region(mid, w) for w in self.w_branch)
        return compare_tensors(
            [(self.y, exit_region(acc, self.w_exit))],
            1e-3,
            "compiled diamond output vs eager serial recomputation",
        )

    def describe(self) -> JsonObject:
        return {
            **super().describe(),
            "compile_seconds": round(self.compile_seconds, 6),
            "compiled_earlier_in_process": self.reused,
            "compile_note": "first call of the 3 torch.compile(backend='inductor') regions in "
            "setup, before warm-up, excluded from the measurement window; "
            "near zero when this process compiled the same shapes before",
        }

"""Write result files with upstream AORTA 0.3.0's own code (run in a separate process only).

Usage: python -I tests/upstream_writer.py UPSTREAM_DIR SPEC_JSON
UPSTREAM_DIR holds the `amd-aorta==0.3.0` wheel installed with `pip install --no-deps --target`
(scripts/setup.sh --test). SPEC_JSON: a list of files to write, each {"kind": "run" | "sweep" | "policy",
"out": path, "runs": [...], "system_info": bool}, each run {"workload", "streams",
"iteration_times_ms", "throughput", "unit", "kernels": [[stream, start_ms, end_ms], ...],
optional "queue" / "memory" (its tracers' dataclass fields), "bare" (empty metadata), "policy"
(a built-in policy name, kind "policy")}.
Latency statistics, switch figures, the result layout, the timestamp and the sweep analysis all
come from upstream's code; never imported by our tests.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime


def main(upstream_dir: str, spec_path: str) -> None:
    """Write every file of the spec with upstream's writers (one process: torch loads once)."""
    sys.path.insert(0, upstream_dir)
    from aorta.hw_queue_eval.core import ebpf_memory_tracer, ebpf_tracer, harness, metrics

    if not harness.__file__.startswith(upstream_dir):
        raise SystemExit(f"imported {harness.__file__}, not upstream's code from {upstream_dir}")
    with open(spec_path) as f:
        for spec in json.load(f):
            _write(harness, metrics, (ebpf_tracer, ebpf_memory_tracer), spec)


def _write(harness, metrics, tracers, spec) -> None:  # type: ignore[no-untyped-def]
    """One file: its runs as upstream HarnessResults, saved by upstream's own writer."""
    results = []
    for run in spec["runs"]:
        collector = metrics.MetricsCollector(run["streams"], "cpu")
        samples = [float(x) for x in run["iteration_times_ms"]]
        collector._iteration_times_ms = samples  # what its timed loop records, one per iteration
        switch = metrics.SwitchLatencyMetrics.from_kernel_timings([tuple(k) for k in run["kernels"]])
        total_s = sum(samples) / 1000.0
        tput = metrics.ThroughputMetrics(run["throughput"], run["unit"], len(samples), total_s)
        result = harness.HarnessResult.from_metrics(
            throughput_metrics=tput,
            latency_metrics=metrics.LatencyMetrics.from_samples(samples),
            collector=collector,
            stream_count=run["streams"],
            workload_name=run["workload"],
            switch_metrics=switch,
            extra_metadata=_metadata(harness, run),
        )
        if run.get("queue"):  # its tracers' aggregates, as its run_workload attaches them
            queue = tracers[0].DriverQueueMetrics(**_int_rings(run["queue"])).to_dict()
            result.ebpf_queue_metrics = queue
            result.ebpf_vs_cuda = metrics.compare_ebpf_vs_cuda(queue, switch.to_dict())
        if run.get("memory"):
            result.ebpf_memory_metrics = tracers[1].MemoryTraceMetrics(**run["memory"]).to_dict()
        results.append(result)
    if spec["kind"] == "run":
        results[0].to_json(spec["out"])
    elif spec["kind"] == "policy":  # its policy-sweep's file: PolicyComparison.save
        from aorta.hw_queue_eval.core import policy_evaluator as pe

        comparison = pe.PolicyComparison(
            workload_name=results[0].workload_name,
            stream_count=results[0].stream_count,
            timestamp=datetime.now().isoformat(),
        )
        for run, result in zip(spec["runs"], results, strict=True):
            comparison.add(pe.PolicyResult(pe.BUILTIN_POLICIES[run["policy"]], result))
        comparison.save(spec["out"])
    else:
        harness.save_sweep_results(results, spec["out"], include_system_info=spec.get("system_info", False))


def _metadata(harness, run):  # type: ignore[no-untyped-def]
    """The metadata its run_workload writes, minus what needs a GPU (device_info comes from the
    spec: upstream reads it from torch.cuda)."""
    if run.get("bare"):
        return {}
    config = harness.HarnessConfig(stream_count=run["streams"], device="cpu", use_multi_gpu=False)
    return {
        "config": config.to_dict(),
        "device_info": run.get("device_info") or {"name": "spec device"},
        "rocm_info": harness.get_rocm_env_info(),
        "driver_info": harness.get_driver_info(),
        "multi_gpu": {"enabled": False, "devices": ["cpu"], "num_gpus": 1, "stream_to_device": {}},
    }


def _int_rings(queue):  # type: ignore[no-untyped-def]
    """Ring ids as the integers its tracer keys them by."""
    out = dict(queue)
    for key in ("per_ring_submissions", "per_ring_dispatches"):
        out[key] = {int(k): v for k, v in (queue.get(key) or {}).items()}
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

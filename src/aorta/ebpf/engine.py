"""The engine's front door: check readiness, build the program, run a session, make sections.

Used by the benchmark's tracer (hw_queue_eval/tracing/window_tracer.py) and by `ebpf-attach`, so both
produce the same `ebpf_queue_metrics` / `ebpf_memory_metrics` layout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import mapcap, marker
from aorta.ebpf.probes.base import (
    BpftraceDialect,
    CollectContext,
    FamilyResult,
    ProbeFamily,
    TraceTarget,
    Window,
)
from aorta.ebpf.probes.registry import families_for, queue_summary_families
from aorta.ebpf.program import Program, build_program
from aorta.ebpf.session import (
    SessionOutput,
    TraceSession,
    bpftrace_path,
    bpftrace_version,
    launcher,
    pid_namespace_problem,
)
from aorta.ebpf.tracefs import Tracefs, find_tracefs

DEFAULT_DIALECT_VERSION = (0, 17, 0)


@dataclass
class Readiness:
    """Whether a session can start here, with everything needed to start it."""

    ok: bool
    reason: str | None
    bpftrace: str | None
    version: tuple[int, int, int] | None
    prefix: list[str] | None
    privilege: str
    tracefs: Tracefs | None
    tracefs_note: str

    def describe(self) -> JsonObject:
        """JSON-safe summary for result sections."""
        return {
            "path": self.bpftrace,
            "version": ".".join(map(str, self.version)) if self.version else None,
            "privilege": self.privilege,
            "tracefs": self.tracefs_note,
        }


def check_readiness(
    mount_tracefs: bool = True, bpftrace: str | None = None, tracefs_root: str | None = None
) -> Readiness:
    """Find bpftrace (`bpftrace`: the --bpftrace option, else PATH's), its version, a privilege
    path and tracefs (`tracefs_root`: ebpf-info --tracefs). Never prompts; raises UsageError only
    for a given `bpftrace` or `tracefs_root` that cannot be used (one line naming the option)."""
    path = bpftrace_path(bpftrace)
    tracefs, note = find_tracefs(mount_if_root=mount_tracefs, root=tracefs_root)
    if path is None:
        return Readiness(
            False,
            "bpftrace not found: install it (apt-get install bpftrace)",
            None,
            None,
            None,
            "n/a",
            tracefs,
            note,
        )
    version = bpftrace_version(path)
    if version is None:
        return Readiness(
            False,
            f"{path} --version failed: is bpftrace installed correctly?",
            path,
            None,
            None,
            "n/a",
            tracefs,
            note,
        )
    prefix, privilege = launcher(path)
    namespace = pid_namespace_problem()
    if namespace is not None:
        return Readiness(False, namespace, path, version, prefix, privilege, tracefs, note)
    if prefix is None:
        return Readiness(False, privilege, path, version, None, privilege, tracefs, note)
    if tracefs is None:
        return Readiness(
            False, f"tracefs unavailable: {note}", path, version, prefix, privilege, tracefs, note
        )
    return Readiness(True, None, path, version, prefix, privilege, tracefs, note)


def dialect_for(version: tuple[int, int, int] | None) -> BpftraceDialect:
    """Syntax for this bpftrace (0.17 syntax when the version is unknown)."""
    return BpftraceDialect(version or DEFAULT_DIALECT_VERSION)


def make_program(
    queue: bool,
    memory: bool,
    target: TraceTarget,
    tracefs: Tracefs,
    version: tuple[int, int, int] | None,
    token: int | None = None,
    families: list[ProbeFamily] | None = None,
    gpu_runtime: bool = False,
    gpu_runtime_views: tuple[str, ...] | None = None,
) -> Program:
    """Render the one program a run with these flags loads (also what --show-script prints);
    `gpu_runtime_views`: --ebpf-gpu-runtime-views (None: the family's default set).

    This process is the program's owner: it starts bpftrace, and the program exits with it.
    """
    chosen = families if families is not None else families_for(queue, memory, gpu_runtime, gpu_runtime_views)
    return build_program(
        chosen,
        target,
        tracefs,
        dialect_for(version),
        token if token is not None else marker.new_token(),
        owner_pid=os.getpid(),
    )


def start_session(
    program: Program,
    ready: Readiness,
    attach_timeout_s: float = 60.0,
    map_keys_max: int = mapcap.MAP_KEYS_MAX,
) -> TraceSession:
    """Spawn bpftrace for `program` and wait for the handshake (raises SessionError)."""
    assert ready.bpftrace is not None and ready.prefix is not None
    session = TraceSession(
        program,
        ready.bpftrace,
        ready.prefix,
        map_keys_max=map_keys_max,
        flags=tuple(mapcap.bpftrace_flags(ready.version)),
    )
    session.start(attach_timeout_s)
    return session


def collect_results(program: Program, output: SessionOutput, context: CollectContext) -> list[FamilyResult]:
    """Route printed maps to families by prefix; a family failing to collect reports an error.

    `context.snapshots`, when given, replaces the session's (a torchrun rank's own /proc
    counters taken at its own window edges)."""
    results = []
    if context.snapshots is None:
        context = replace(context, snapshots=output.snapshots)
    if context.marker_clock is None:
        context = replace(context, marker_clock=output.marker_clock)
    for family in program.families:
        prefix = f"@{family.name}_"
        maps = {k: v for k, v in output.maps.items() if k.startswith(prefix)}
        try:
            attached = tuple(program.used_events.get(family.name, []))
            results.append(family.collect(maps, replace(context, attached=attached)))
        except Exception as exc:  # one family's bug must not hide the others' numbers
            results.append(
                FamilyResult(
                    family.name, family.section, {}, {"error": f"collect failed: {type(exc).__name__}: {exc}"}
                )
            )
    return results


def window_edges(output: SessionOutput) -> Window:
    """The traced window as the kernel saw it (CLOCK_MONOTONIC ns; both edges None unless the
    gate closed at or after it opened)."""
    start = output.maps.get("@aorta_window_start_ns")
    stop = output.maps.get("@aorta_window_stop_ns")
    if not (isinstance(start, int) and isinstance(stop, int) and stop >= start > 0):
        return Window()
    return Window(start, stop)


def window_info(output: SessionOutput) -> JsonObject:
    """The traced window as the result's `window` block says it (window_edges, as JSON)."""
    return window_edges(output).to_json()


def build_sections(
    program: Program,
    output: SessionOutput,
    results: list[FamilyResult],
    ready: Readiness,
    queue: bool,
    memory: bool,
    backend: str | None = None,
) -> JsonObject:
    """`ebpf_queue_metrics` / `ebpf_memory_metrics` for the requested modes; `backend` ("cpu",
    "gpu", None from outside) picks the queue summary's family (queue_summary_families)."""
    sections: JsonObject = {}
    for wanted, section, key in (
        (queue, "queue", "ebpf_queue_metrics"),
        (memory, "memory", "ebpf_memory_metrics"),
    ):
        if wanted:
            mine = [r for r in results if r.section == section]
            summary = memory_summary(mine) if section == "memory" else queue_summary(mine, backend)
            sections[key] = _section(program, output, mine, ready, section, summary)
    return sections


def family_summary(result: FamilyResult) -> JsonObject | None:
    """The `summary` a family put in its metrics, or None."""
    summary = result.metrics.get("summary") if isinstance(result.metrics, dict) else None
    return summary if isinstance(summary, dict) else None


def queue_summary(results: list[FamilyResult], backend: str | None) -> JsonObject:
    """The queue section's headline: the whole summary of the first family in
    queue_summary_families(backend) that saw submissions, `source` naming it; {} when none did."""
    by_name = {r.family: r for r in results}
    for name in queue_summary_families(backend):
        found = by_name.get(name)
        summary = family_summary(found) if found is not None else None
        if summary is not None and _has_events(summary):
            return {**summary, "source": name}
    return {}


def memory_summary(results: list[FamilyResult]) -> JsonObject:
    """The memory section's headline: every memory family's summary side by side (GPU buffer
    keys from amdmem, `host_*` keys from hostmem: disjoint, so none replaces another's)."""
    summary: JsonObject = {}
    for r in results:
        summary.update(family_summary(r) or {})
    return summary


def _section(
    program: Program,
    output: SessionOutput,
    results: list[FamilyResult],
    ready: Readiness,
    section: str,
    summary: JsonObject,
) -> JsonObject:
    families: JsonObject = {}
    for r in results:
        families[r.family] = {
            "metrics": r.metrics,
            "coverage": r.coverage,
            "events_attached": program.used_events.get(r.family, []),
            "events_missing": program.missing.get(r.family, {}),
        }
    lost = output.lost_events
    problem = exit_problem(output)
    # one program: a map that dropped updates is reported in every section it feeds
    capacity = mapcap.capacity_report(program.text, output.helper_errors, output.maps, output.map_keys_max)
    body: JsonObject = {
        "status": "error" if problem else "ok",
        "error": problem,
        **summary,
        "lost_events": lost,
        "lost_event_records": output.lost_records,
        "dropped_updates": capacity.dropped_updates_total,
        "map_capacity": capacity.to_json(),
        "families": families,
        "probes_attached": output.attached_probes,
        "events_attached": sorted({e for r in results for e in program.used_events.get(r.family, [])}),
        "bpftrace": ready.describe(),
        "window": window_info(output),
        "attach_s": output.attach_s,
        "stop_s": output.stop_s,
        "probe_cost": output.probe_cost,
        "stderr": output.stderr[-20:],
        "coverage": [
            f"{r.family}: {r.coverage.get('statement') or r.coverage.get('covered')}"
            for r in results
            if r.coverage
        ],
    }
    if isinstance(body.get("submit_to_dispatch_p99_us"), (int, float)):
        body["submit_to_dispatch_p99_method"] = p99_bounds_us(body, body["submit_to_dispatch_p99_us"])[2]
    if section == "queue" and not summary:
        body.update(
            {
                "total_submissions": None,
                "total_dispatches": None,
                "hw_rings_used": None,
                "submit_to_dispatch_avg_us": None,
                "submit_to_dispatch_p99_us": None,
                "summary_reason": "no queue family saw submissions of the traced processes "
                "(see families.*.coverage)",
            }
        )
    warnings = []
    if lost:
        warnings.append(f"{lost} events lost")
    if capacity.dropped_updates_total or capacity.full_maps:
        maps = ", ".join(
            f"{name} ({capacity.dropped_updates.get(name, 'full')})"
            for name in sorted({*capacity.dropped_updates, *capacity.full_maps})
        )
        warnings.append(
            f"{capacity.dropped_updates_total} map updates dropped by full maps "
            f"[{maps}] (limit {capacity.keys_max} keys per map)"
        )
    if warnings:
        body["warning"] = "; ".join(warnings) + ": aggregates are incomplete"
    return body


def interpret_queue(section: JsonObject, streams: int | None) -> list[str]:
    """docs/guide.md's interpretation bands applied to the queue summary (only what the data supports)."""
    lines: list[str] = []
    avg, p99 = section.get("submit_to_dispatch_avg_us"), section.get("submit_to_dispatch_p99_us")
    if isinstance(avg, (int, float)):
        band = "good (< 20 us)" if avg < 20 else "contention (> 100 us)" if avg > 100 else "moderate"
        lines.append(f"submit→dispatch avg {avg:.1f} us: {band}")
        if isinstance(p99, (int, float)) and avg > 0:
            lines.append(tail_line(section, p99, avg))
    rings = section.get("hw_rings_used")
    if isinstance(rings, list) and streams:
        if len(rings) < streams:
            lines.append(
                f"{len(rings)} hardware rings/queues for {streams} streams: streams are "
                "multiplexed onto shared queues"
            )
        else:
            lines.append(f"{len(rings)} hardware rings/queues for {streams} streams: no multiplexing")
    return lines


def _tail_band(ratio: float) -> str:
    return "good (< 3x avg)" if ratio < 3 else "stalls (> 10x avg)" if ratio > 10 else "uneven"


def p99_bounds_us(section: JsonObject, p99: float) -> tuple[float, float, str]:
    """Where the P99 lies for sure (µs) and how it was obtained: exact, log-linear or log2."""
    rec = section.get("submit_to_dispatch_p99")
    if isinstance(rec, dict) and rec.get("method"):
        return rec["bucket_min"] / 1e3, rec["bucket_max"] / 1e3, str(rec["method"])
    bucket = section.get("submit_to_dispatch_p99_bucket_us")
    if isinstance(bucket, list) and len(bucket) == 2:
        return float(bucket[0]), float(bucket[1]), "log2 bucket"
    return p99, p99, "unknown precision"


def tail_line(section: JsonObject, p99: float, avg: float) -> str:
    """The "P99 is N× avg" band of docs/guide.md, decided only when the P99's whole bucket is in one band."""
    low, high, method = p99_bounds_us(section, p99)
    band_low, band_high = _tail_band(low / avg), _tail_band(high / avg)
    if band_low == band_high:
        where = "exact" if method == "exact" else f"{method} {low:.1f}–{high:.1f} us"
        return f"P99 is {p99 / avg:.1f}x the average ({where}): {band_low}"
    return (
        f"P99 is {low / avg:.1f}–{high / avg:.1f}x the average (its {method} spans "
        f"{low:.1f}–{high:.1f} us): between {band_low} and {band_high}, not decidable"
    )


def exit_problem(output: SessionOutput) -> str | None:
    """Why a session's output cannot be trusted (killed, crashed), or None."""
    if output.exit_code == 0:
        return None
    if output.stop_signal == "SIGKILL":
        return "bpftrace did not stop on its exit marker, SIGINT or SIGTERM and was killed: maps may be lost"
    if output.exit_code is None:
        return "bpftrace exit status unknown"
    tail = " | ".join(output.stderr[-3:]) or "no message"
    return f"bpftrace exited with {output.exit_code}: {tail}"


def _has_events(summary: JsonObject) -> bool:
    return bool(
        summary.get("total_submissions") or summary.get("total_dispatches") or summary.get("hw_rings_used")
    )


def unavailable_sections(
    reason: str, queue: bool, memory: bool, status: str = "unavailable", ready: Readiness | None = None
) -> JsonObject:
    """Sections that say why tracing did not happen (never zeros)."""
    body = {"status": status, "error": reason, "bpftrace": ready.describe() if ready else None}
    out: JsonObject = {}
    if queue:
        out["ebpf_queue_metrics"] = dict(body)
    if memory:
        out["ebpf_memory_metrics"] = dict(body)
    return out

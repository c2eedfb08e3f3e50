"""Compare result files: pair points by (workload, streams, policy), test runs, diff eBPF.

Runs are the samples (benchstat/asv style): a point's evidence is one summary per run — the
repeats of `run --repeats`, or the repeat points of a sweep / policy sweep — never the iterations
inside one process. Reads aorta run / sweep / policy-sweep files and the upstream tool's layouts
(a run, `{"results": [...]}` sweeps and policy comparisons, latency under `latency_ms.p50` or
`latency.p50_ms`). Upstream files carry no repeats (one run per point): several of them on one
side are pooled as the repeats of their points, as are several base files. Never pairs by
position. No torch import: this runs in CI on machines without it.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.flatten import flatten_numbers
from aorta.common.jsontypes import JsonObject
from aorta.hw_queue_eval.analysis.exact_u import ALPHA, MIN_RUNS_TO_DETECT
from aorta.hw_queue_eval.analysis.stats import MIN_RUNS, compare_runs, median_iqr, percent_change
from aorta.hw_queue_eval.analysis.summaries import representative, run_summary
from aorta.hw_queue_eval.readers.load import load_result

EBPF_SECTIONS = ("ebpf_queue_metrics", "ebpf_memory_metrics", "ebpf_vs_cuda_comparison")
#: upstream name of a section → ours
EBPF_ALIASES = {"ebpf_vs_cuda": "ebpf_vs_cuda_comparison"}
#: settings that make two points incomparable when they differ (when both files record them)
MUST_MATCH = ("size", "backend", "sync_mode")
LATENCY_KEYS = ("mean", "p50", "p95", "p99", "min", "max", "std")
UPSTREAM = "upstream"  # kind prefix of files written by the upstream tool (no schema_version)

Key = tuple[str, int, str | None]


@dataclass
class Point:
    """One comparable measurement: a run, or one point of a sweep / policy sweep."""

    workload: str
    streams: int
    policy: str | None
    iteration_ms: list[float]
    throughput: float | None
    throughput_unit: str | None
    work_per_iteration: float | None
    latency: dict[str, float]
    settings: JsonObject
    single: dict[str, float | None]
    ebpf: dict[str, JsonObject] = field(default_factory=dict)
    runs: list[JsonObject] = field(default_factory=list)  # one run_summary per run

    @property
    def key(self) -> Key:
        return (self.workload, self.streams, self.policy)


def key_text(key: Key) -> str:
    """'hetero_kernels @ 4 streams [policy]' for messages and tables."""
    workload, streams, policy = key
    return f"{workload} @ {streams} streams" + (f" [{policy}]" if policy else "")


def normalize_latency(result: JsonObject) -> dict[str, float]:
    """Latency statistics from `latency_ms.p50` (ours, upstream runs) or `latency.p50_ms` (older)."""
    lat = result.get("latency_ms")
    if isinstance(lat, dict):
        return {k: float(lat[k]) for k in LATENCY_KEYS if isinstance(lat.get(k), (int, float))}
    old = result.get("latency")
    if isinstance(old, dict):
        return {
            k: float(old[f"{k}_ms"]) for k in LATENCY_KEYS if isinstance(old.get(f"{k}_ms"), (int, float))
        }
    return {}


def _policy_of(result: JsonObject, point_key: JsonObject | None) -> str | None:
    for source in (point_key or {}, result, (result.get("config") or {}).get("extra") or {}):
        for name in ("policy", "policy_name"):
            value = source.get(name)
            if isinstance(value, str):
                return value
    return None


def compare_point(
    result: JsonObject, point_key: JsonObject | None = None, policy: str | None = None
) -> Point:
    """A Point from one run-like dict (ours or upstream); UsageError when it lacks the basics."""
    workload = result.get("workload_name") or (point_key or {}).get("workload")
    streams = result.get("stream_count", (point_key or {}).get("streams"))
    if not isinstance(workload, str) or not isinstance(streams, int):
        raise UsageError("a result has no workload_name/stream_count: not a run result")
    config = result.get("config") or (result.get("metadata") or {}).get("config") or {}
    samples = result.get("iteration_times_ms") or []
    ebpf = {}
    for name in (*EBPF_SECTIONS, *EBPF_ALIASES):
        if isinstance(result.get(name), dict):
            ebpf[EBPF_ALIASES.get(name, name)] = result[name]
    switch = result.get("switch_latency") or {}
    block = result.get("repeats") or {}
    runs = (
        [r for r in block.get("per_repeat") or [] if r.get("status") == "ok"]
        if isinstance(block, dict)
        else []
    )
    return Point(
        workload=workload,
        streams=streams,
        policy=policy if policy is not None else _policy_of(result, point_key),
        iteration_ms=[float(x) for x in samples if isinstance(x, (int, float))],
        throughput=result.get("throughput"),
        throughput_unit=result.get("throughput_unit"),
        work_per_iteration=(result.get("metadata") or {}).get("work_per_iteration"),
        latency=normalize_latency(result),
        settings={k: config.get(k) for k in MUST_MATCH if config.get(k) is not None},
        single={
            "switch_overhead_ms": switch.get("switch_overhead_ms"),
            "launch_starvation_share": (switch.get("launch_starvation") or {}).get("share_of_lane_time"),
            "concurrency": (result.get("concurrency") or {}).get("achieved"),
        },
        ebpf=ebpf,
        runs=runs or [run_summary(result)],
    )


def group_repeats(points: list[Point]) -> list[Point]:
    """Repeats of one point (same key, e.g. sweep/policy-sweep `--repeats`) as one Point whose
    `runs` holds every repeat; the other fields are those of the median-throughput repeat."""
    groups: dict[Key, list[Point]] = {}
    for point in points:
        groups.setdefault(point.key, []).append(point)
    grouped = []
    for group in groups.values():
        rep = group[representative([{"throughput": p.throughput} for p in group])]
        grouped.append(Point(**{**rep.__dict__, "runs": [r for p in group for r in p.runs]}))
    return grouped


def load_points(path: str | os.PathLike[str]) -> tuple[str, list[Point], list[str]]:
    """(file kind, comparable points, notes on skipped points) of a result file."""
    data = load_result(path)  # validated against the schema, then upgraded
    kind = data.get("kind")
    notes: list[str] = []
    points: list[Point] = []
    try:
        if kind in ("sweep", "policy_sweep", "policy-sweep") or isinstance(data.get("points"), list):
            repeats = []
            for entry in data.get("points") or []:
                key = entry.get("key") or {}
                if entry.get("status") != "ok" or not entry.get("result"):
                    notes.append(f"{path}: skipped point {key} ({entry.get('status')})")
                    continue
                points.append(compare_point(entry["result"], key))
                repeats.append((points[-1].key, key.get("repeat")))
            if len(set(repeats)) != len(repeats):
                raise UsageError(
                    "the same (workload, streams, policy, repeat) appears twice: "
                    "points cannot be paired unambiguously"
                )
            points = group_repeats(points)  # --repeats: the repeats of a key are its runs
        elif isinstance(data.get("results"), list):  # upstream sweep or policy comparison
            entries = [r for r in data["results"] if isinstance(r, dict)]
            points = [
                compare_point(r["result"], policy=r["policy"]["name"])
                if isinstance(r.get("policy"), dict)
                else compare_point(r)
                for r in entries
            ]
            kind = f"{UPSTREAM} sweep"
        elif isinstance(data.get("policies"), dict):  # upstream policy evaluation
            points = [
                compare_point(r, policy=name) for name, r in data["policies"].items() if isinstance(r, dict)
            ]
            kind = f"{UPSTREAM} policy evaluation"
        elif kind in (None, "run"):
            if kind is None and "schema_version" not in data:
                kind = f"{UPSTREAM} run"
            if data.get("status", "ok") != "ok":
                raise UsageError(
                    f"{path}: run status is {data.get('status')!r} "
                    f"({data.get('error')}); compare needs an ok run"
                )
            points = [compare_point(data)]
        else:
            raise UsageError(
                f"{path}: unknown result kind {kind!r}: compare reads run, sweep and policy-sweep files"
            )
    except UsageError as exc:
        raise UsageError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    if not points:
        raise UsageError(f"{path}: no finished points to compare")
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):
        raise UsageError(
            f"{path}: the same (workload, streams, policy) appears twice: "
            "points cannot be paired unambiguously"
        )
    if str(kind).startswith(UPSTREAM):
        notes.append(
            f"{path}: written by the upstream tool (AORTA {kind}): no repeats, one run per point; "
            "give several such files (-b a -b b … / -t c -t d …) to compare with statistics"
        )
    return str(kind or "run"), points, notes


Loaded = tuple[str, str, list[Point], list[str]]  # (path, kind, points, notes) of one file


def load_side(paths: list[str]) -> tuple[str, list[Point], list[str]]:
    """(kind, points, notes) of one side: one file, or several files pooled as the repeats of
    their points (each file one run of every point it holds)."""
    return _pooled([(path, *load_points(path)) for path in paths])


def _pooled(loaded: list[Loaded]) -> tuple[str, list[Point], list[str]]:
    """Files loaded for one side as one: each point's runs are those of every file holding it."""
    if len(loaded) == 1:
        return loaded[0][1:]
    seen: dict[str, str] = {}
    for path, *_ in loaded:
        real = os.path.realpath(path)
        if real in seen:
            raise UsageError(
                f"{path}: given twice on one side ({seen[real]}): each file counts as one run of "
                "its points, so the same file twice would fake a repeat"
            )
        seen[real] = path
    points = [p for _, _, file_points, _ in loaded for p in file_points]
    notes = [n for _, _, _, file_notes in loaded for n in file_notes]
    paths = [path for path, *_ in loaded]
    notes.append(f"{' + '.join(paths)}: {len(paths)} files pooled: a point's runs are those of every file")
    return " + ".join(sorted({kind for _, kind, _, _ in loaded})), group_repeats(points), notes


def test_sides(paths: list[str]) -> list[tuple[str, list[Point], list[str], str]]:
    """The test sides of -t: each aorta file its own, the upstream files (which carry no
    repeats) pooled into one as the repeats of their points; (kind, points, notes, label)."""
    loaded = [(path, *load_points(path)) for path in paths]
    upstream = [f for f in loaded if f[1].startswith(UPSTREAM)]
    sides = [(*f[1:], f[0]) for f in loaded if not f[1].startswith(UPSTREAM)]
    if upstream:
        sides.append((*_pooled(upstream), " + ".join(f[0] for f in upstream)))
    return sides


#: run-level metrics with a verdict: (summary key, label, unit or None for the point's unit,
#: higher is better)
VERDICT_METRICS = (
    ("throughput", "throughput", None, True),
    ("latency_p50_ms", "iteration time P50", "ms", False),
)
#: run-level metrics shown with their change and CI but no verdict (too noisy to gate on)
INFO_METRICS = (("latency_p99_ms", "iteration time P99", "ms", False),)
#: eBPF leaves that are bookkeeping, not measurements of the workload (never diffed); accuracy_pct
#: is the legacy alias of coverage_pct (diffed once, under that name)
EBPF_SKIP = re.compile(
    r"(^|\.)(window|bpftrace|coverage|accuracy_pct|stderr|probe_cost|attach_s|stop_s|"
    r"events_attached|events_missing|probes_attached|lost_event_records|"
    r"status|error)(\.|$)|monotonic|timestamp|_ns$|(^|\.)(pid|tid)s?(\.|$)"
)


def run_values(point: Point, name: str) -> list[float]:
    """One value per run of `name` (a run_summary key), runs without it left out."""
    return [float(r[name]) for r in point.runs if isinstance(r.get(name), (int, float))]


def _change(base: float | None, test: float | None) -> float | None:
    return None if base is None or test is None else percent_change(base, test)


def _iqr(values: list[float]) -> float | None:
    return median_iqr(values)[1] if len(values) >= 2 else None


def _run_rows(
    base: Point, test: Point, threshold: float, metrics: tuple[tuple[str, str, str | None, bool], ...]
) -> list[JsonObject]:
    rows = []
    for name, label, unit, higher in metrics:
        b, t = run_values(base, name), run_values(test, name)
        if not b or not t:
            continue
        cmp = compare_runs(b, t, threshold, higher_is_better=higher).to_dict()
        rows.append(
            {
                "metric": label,
                "unit": unit or base.throughput_unit,
                "higher_is_better": higher,
                "statistic": f"{name}, one value per run",
                "base_iqr": _iqr(b),
                "test_iqr": _iqr(t),
                **cmp,
            }
        )
    return rows


def _info_rows(base: Point, test: Point, threshold: float) -> list[JsonObject]:
    rows = [{**row, "verdict": None} for row in _run_rows(base, test, threshold, INFO_METRICS)]
    for name, value in base.single.items():
        rows.append(
            {
                "metric": name,
                "unit": "",
                "base_median": value,
                "test_median": test.single.get(name),
                "base_n": 1,
                "test_n": 1,
                "change_pct": _change(value, test.single.get(name)),
                "verdict": None,
                "statistic": "representative run",
            }
        )
    return rows


def _attached_families(section: JsonObject) -> set[str]:
    """Families of an eBPF section that attached at least one event."""
    families = section.get("families") or {}
    return {name for name, fam in families.items() if isinstance(fam, dict) and fam.get("events_attached")}


def _comparable_leaves(section: Any) -> dict[str, float]:
    """Measured numeric leaves of a section that traced ok, bookkeeping, timestamps and upstream
    AORTA's names for our figures left out, and of the families only those that attached."""
    if not isinstance(section, dict) or section.get("status", "ok") != "ok":
        return {}
    attached = _attached_families(section)
    flat = flatten_numbers(section)
    upstream_names = set(section.get("upstream_keys") or ())  # copies or recomputations of ours
    out = {}
    for key, value in flat.items():
        if EBPF_SKIP.search(key) or key.split(".", 1)[0] in upstream_names:
            continue
        if key.startswith("families."):
            parts = key.split(".", 2)
            if len(parts) < 3 or parts[1] not in attached:
                continue
            # the engine copies a family's summary to the section's top level: show it once
            prefix = "metrics.summary."
            if parts[2].startswith(prefix) and parts[2][len(prefix) :] in flat:
                continue
        out[key] = value
    return out


def ebpf_diff(base: Point, test: Point) -> JsonObject:
    """Measured eBPF values present in both points (sections that traced ok, families that
    attached, no timestamps or bookkeeping, not zero on both sides) with their change."""
    rows: list[JsonObject] = []
    skipped = []
    for section in EBPF_SECTIONS:
        b_sec, t_sec = base.ebpf.get(section), test.ebpf.get(section)
        if not b_sec or not t_sec:
            continue
        for side, sec in (("base", b_sec), ("test", t_sec)):
            if isinstance(sec, dict) and sec.get("status", "ok") != "ok":
                skipped.append(
                    f"{section}: {side} traced {sec.get('status')} ({sec.get('error')}): not compared"
                )
        b, t = _comparable_leaves(b_sec), _comparable_leaves(t_sec)
        for key in sorted(set(b) & set(t)):
            if b[key] == 0 and t[key] == 0:
                continue
            rows.append(
                {
                    "section": section,
                    "key": key,
                    "base": b[key],
                    "test": t[key],
                    "change_pct": _change(b[key], t[key]),
                    "summary": not key.startswith("families."),
                }
            )
    # summary figures first, then by the size of the change
    rows.sort(key=lambda r: (not r["summary"], -abs(r["change_pct"] or 0.0)))
    b_traced = any(_is_traced(base.ebpf.get(s)) for s in EBPF_SECTIONS)
    t_traced = any(_is_traced(test.ebpf.get(s)) for s in EBPF_SECTIONS)
    return {"base_traced": b_traced, "test_traced": t_traced, "rows": rows, "skipped": skipped, "note": None}


def _is_traced(section: Any) -> bool:
    """True when an eBPF section exists and traced ok."""
    return isinstance(section, dict) and section.get("status", "ok") == "ok" and bool(section)


def tracing_note(diff: JsonObject, metrics: list[JsonObject]) -> str | None:
    """When one side was traced and the other not: whether the difference is distinguishable
    from the run-to-run noise compare measured (answers "does tracing perturb the run?")."""
    if diff["base_traced"] == diff["test_traced"]:
        return None
    traced = "test" if diff["test_traced"] else "base"
    head = (
        f"{traced} was traced with eBPF and the other side was not: the difference below is "
        "the tracing overhead plus run-to-run noise"
    )
    tput = next((m for m in metrics if m["metric"] == "throughput"), None)
    if tput is None:
        return head
    change = tput["change_pct"]
    if tput["verdict"] in ("regression", "improvement"):
        return f"{head}; throughput {change:+.1f}% is distinguishable from it ({tput['reason']})"
    if tput["verdict"] == "unchanged":
        return f"{head}; no overhead beyond the threshold: {tput['reason']}"
    return (
        f"{head}; throughput {fmt_pct(change)} is NOT distinguishable from run-to-run noise "
        f"({tput['reason']}). Measure the overhead with interleaved repeats, from the aorta "
        f"checkout: {bench_command('ebpf_overhead.py')}"
    )


def bench_command(script: str) -> str:
    """How to run bench/`script` as root with the interpreter aorta runs under (its venv has
    aorta and torch; `sudo python` would find neither)."""
    return f"sudo {shlex.quote(sys.executable)} bench/{script}"


def fmt_pct(value: float | None) -> str:
    """'+12.3%' or 'n/a'."""
    return "n/a" if value is None else f"{value:+.1f}%"


def _check_compatible(base: Point, test: Point) -> None:
    for name in MUST_MATCH:
        b, t = base.settings.get(name), test.settings.get(name)
        if b is not None and t is not None and b != t:
            raise UsageError(
                f"{key_text(base.key)}: base ran with {name} {b!r}, test with {t!r}: "
                "not comparable; rerun with the same setting"
            )
    if base.throughput_unit and test.throughput_unit and base.throughput_unit != test.throughput_unit:
        raise UsageError(
            f"{key_text(base.key)}: throughput units differ ({base.throughput_unit} vs "
            f"{test.throughput_unit})"
        )


def compare_files(base_paths: str | list[str], test_paths: list[str], threshold: float = 5.0) -> JsonObject:
    """The whole comparison as a JSON-ready dict (UsageError for unreadable or unpairable files).

    Several base files are pooled as the repeats of their points (load_side); so are the
    upstream files among the tests (test_sides)."""
    if not threshold > 0:
        raise UsageError(f"--threshold must be > 0 (percent), got {threshold}")
    base_list = [base_paths] if isinstance(base_paths, str) else list(base_paths)
    base_path = " + ".join(base_list)
    base_kind, base_points, notes = load_side(base_list)
    base_by_key = {p.key: p for p in base_points}
    tests = []
    for kind, points, test_notes, path in test_sides(test_paths):
        notes += test_notes
        pairs: list[JsonObject] = []
        for point in sorted(points, key=lambda p: (p.workload, p.streams, p.policy or "")):
            base = base_by_key.get(point.key)
            if base is None:
                continue
            _check_compatible(base, point)
            metrics = _run_rows(base, point, threshold, VERDICT_METRICS)
            diff = ebpf_diff(base, point)
            diff["note"] = tracing_note(diff, metrics)
            pairs.append(
                {
                    "workload": point.workload,
                    "streams": point.streams,
                    "policy": point.policy,
                    "runs": [len(base.runs), len(point.runs)],
                    "metrics": metrics,
                    "info": _info_rows(base, point, threshold),
                    "ebpf": diff,
                }
            )
        if not pairs:
            raise UsageError(
                f"nothing to pair: base {base_path} has "
                f"{sorted(key_text(k) for k in base_by_key)}, test {path} has "
                f"{sorted(key_text(p.key) for p in points)}; points pair by "
                "(workload, streams, policy)"
            )
        test_keys = {p.key for p in points}
        regressions = sum(1 for pair in pairs for m in pair["metrics"] if m["verdict"] == "regression")
        tests.append(
            {
                "file": path,
                "kind": kind,
                "pairs": pairs,
                "regressions": regressions,
                "only_in_base": [key_text(k) for k in base_by_key if k not in test_keys],
                "only_in_test": [key_text(k) for k in test_keys if k not in base_by_key],
            }
        )
    return {
        "kind": "comparison",
        "base": base_path,
        "base_files": base_list,
        "base_kind": base_kind,
        "threshold_pct": threshold,
        "alpha": ALPHA,
        "min_runs": MIN_RUNS,
        "min_runs_to_detect": MIN_RUNS_TO_DETECT,
        "unit_of_evidence": "runs (one summary per fresh-process run), not iterations",
        "tests": tests,
        "notes": notes,
        "regression": any(t["regressions"] for t in tests),
    }

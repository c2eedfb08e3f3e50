"""Read bpftrace's printed aggregates: log2/linear histograms, stats(), keyed maps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aorta.common.jsontypes import JsonObject


def buckets(value: Any) -> list[tuple[int, int, int]]:
    """A printed histogram as (min, max, count) triples; anything else gives []."""
    if not isinstance(value, list):
        return []
    out = []
    for b in value:
        if isinstance(b, dict) and "count" in b:
            low = b.get("min", b.get("max")) or 0
            top = b.get("max")
            high = low if top is None else top
            out.append((int(low), int(high), int(b["count"])))
    return out


def merge(*hists: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Sum histograms bucket by bucket (same bucket bounds)."""
    acc: dict[tuple[int, int], int] = {}
    for hist in hists:
        for low, high, count in hist:
            acc[(low, high)] = acc.get((low, high), 0) + count
    return [(low, high, c) for (low, high), c in sorted(acc.items())]


def total(hist: list[tuple[int, int, int]]) -> int:
    """Number of samples in a histogram."""
    return sum(c for _, _, c in hist)


def percentile(hist: list[tuple[int, int, int]], q: float) -> dict[str, float] | None:
    """The q-quantile (0..1): its bucket bounds and a linear interpolation inside the bucket.

    bpftrace keeps only bucket counts, so the exact value is unknown: callers report the bucket.
    """
    n = total(hist)
    if n == 0:
        return None
    rank = q * n
    seen = 0
    for low, high, count in sorted(hist):
        if count and seen + count >= rank:
            frac = (rank - seen) / count
            return {
                "estimate": low + frac * (high + 1 - low),
                "bucket_min": float(low),
                "bucket_max": float(high + 1),
            }
        seen += count
    low, high, _ = sorted(hist)[-1]
    return {"estimate": float(high + 1), "bucket_min": float(low), "bucket_max": float(high + 1)}


def stats(value: Any) -> tuple[int, int] | None:
    """(count, total) of a printed stats() value, None otherwise."""
    if isinstance(value, dict) and "count" in value and "total" in value:
        return int(value["count"]), int(value["total"])
    return None


def keyed(value: Any) -> JsonObject:
    """A printed keyed map as {key text: value}; a scalar map gives {"": value}.

    bpftrace prints nothing for a map that never got an entry, so None means empty.
    """
    if value is None:
        return {}
    if isinstance(value, dict) and not ("count" in value and "total" in value):
        return {str(k): v for k, v in value.items()}
    return {"": value}


def as_records(hist: list[tuple[int, int, int]]) -> list[dict[str, int]]:
    """A histogram in bpftrace's own JSON bucket form ({min, max, count}), for results/reports."""
    return [{"min": low, "max": high, "count": count} for low, high, count in hist]


# -- trustworthy percentiles: an exact bounded store, else a log-linear histogram ----------------
# A log2 histogram cannot place a P99 closer than a factor of 2 (with < 100 samples the P99 is
# essentially the maximum's bucket). A recorder keeps, in the kernel, (a) the first values of
# each CPU exactly (a bounded per-event store) and (b) a log-linear histogram with 4 sub-buckets
# per power of two (bucket width ≤ 25 % of its lower edge). `distribution` reports exact
# percentiles when the store holds every event, otherwise the histogram's with the bucket bounds
# and the error bound, and says which.

SUB_BUCKETS = 4  # per power of two
#: the `histogram_kind` a family writes beside its log-linear ns histogram
LOGLINEAR_KIND = f"log-linear buckets of ns ({SUB_BUCKETS} per power of two)"
EXACT_STORE_KEYS = 16384  # all CPUs together: stays far below the map key limit


def exact_cap_per_cpu(cpus: int | None = None) -> int:
    """Per-CPU slots of the exact store, so the store never holds more than EXACT_STORE_KEYS."""
    import os

    return max(64, EXACT_STORE_KEYS // max(1, cpus or os.cpu_count() or 1))


def record_code(name: str, value: str, cap_per_cpu: int | None = None, prefix: str = "") -> str:
    """bpftrace statements recording `value` (ns, ≥ 0) into @<name>_ll (log-linear bucket
    counts), @<name>_ev[cpu, i] (the first `cap_per_cpu` values of each CPU) and @<name>_seq[cpu]
    (events per CPU). `name` must be a validated map name; `value` a bpftrace expression;
    `prefix` ("r, " or "") leads every key: a node program's rank key (probes/ranks.py)."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"invalid recorder name {name!r}")
    cap = cap_per_cpu or exact_cap_per_cpu()
    v = f"${name}_v"
    i = f"${name}_i"
    n = f"${name}_n"
    lines = [
        *loglinear_index_code(name, value),
        f"@{name}_ll[{prefix}{i}] = count();",
        f"{n} = @{name}_seq[{prefix}cpu];",
        f"if ({n} < {cap}) {{ @{name}_ev[{prefix}cpu, {n}] = {v}; }}",
        f"@{name}_seq[{prefix}cpu] = {n} + 1;",
    ]
    return "\n".join(lines)


def recorder_maps(name: str) -> tuple[str, str, str]:
    """The maps `record_code(name, ...)` writes."""
    return (f"@{name}_ll", f"@{name}_ev", f"@{name}_seq")


def loglinear_index_code(name: str, value: str) -> list[str]:
    """bpftrace statements setting $<name>_v = value and $<name>_i = its log-linear bucket index
    (the same index as `loglinear_index`); `name` must be a validated identifier."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"invalid recorder name {name!r}")
    v, x, e, i = (f"${name}_{s}" for s in "vxei")
    lines = [f"{v} = (uint64)({value});", f"{x} = {v};", f"{e} = (uint64)0;"]
    for shift in (32, 16, 8, 4, 2, 1):  # e = floor(log2 v) by binary search
        lines.append(f"if ({x} >> {shift}) {{ {x} = {x} >> {shift}; {e} = {e} + {shift}; }}")
    return [
        *lines,
        f"{i} = {v};",
        f"if ({e} >= 2) {{ {i} = (uint64)(4 * ({e} - 1) + (({v} >> ({e} - 2)) & 3)); }}",
    ]


def loglinear_keyed(value: Any) -> dict[str, list[tuple[int, int, int]]]:
    """A printed @map[key, bucket index] = count() as {key: (min, max inclusive, count) triples}."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for key, count in keyed(value).items():
        head, _, index = key.rpartition(",")
        low, high = loglinear_bounds(int(index))
        out.setdefault(head, []).append((low, high - 1, int(count)))
    return {k: sorted(v) for k, v in out.items()}


def loglinear_bounds(index: int) -> tuple[int, int]:
    """[low, high) of log-linear bucket `index` (values < 4 have a bucket each)."""
    if index < SUB_BUCKETS:
        return index, index + 1
    exp = index // SUB_BUCKETS + 1
    sub = index % SUB_BUCKETS
    step = 1 << (exp - 2)
    return (SUB_BUCKETS + sub) * step, (SUB_BUCKETS + sub + 1) * step


def loglinear_index(value: int) -> int:
    """The bucket index the bpftrace code computes for `value` (for tests and checks)."""
    if value < SUB_BUCKETS:
        return value
    exp = value.bit_length() - 1
    return SUB_BUCKETS * (exp - 1) + ((value >> (exp - 2)) & 3)


def loglinear_hist(value: Any) -> list[tuple[int, int, int]]:
    """A printed @<name>_ll map as (min, max inclusive, count) triples, like `buckets`."""
    out = []
    for key, count in keyed(value).items():
        low, high = loglinear_bounds(int(key))
        out.append((low, high - 1, int(count)))
    return sorted(out)


def exact_values(events: Any, seq: Any) -> list[int] | None:
    """Every recorded value when the store kept all events (no CPU overflowed), else None."""
    stored = [int(v) for v in keyed(events).values()]
    total = sum(int(v) for v in keyed(seq).values())
    return stored if len(stored) == total else None


@dataclass(frozen=True)
class Distribution:
    """One recorder's printed maps, read: how many events, every value when the store kept all
    of them (else None), and the log-linear histogram as (min, max inclusive, count)."""

    count: int
    exact: list[int] | None
    hist: list[tuple[int, int, int]]


def distribution(maps: JsonObject, name: str) -> Distribution:
    """Count, and the inputs of `quantile`, from a recorder's printed maps."""
    ll = loglinear_hist(maps.get(f"@{name}_ll"))
    exact = exact_values(maps.get(f"@{name}_ev"), maps.get(f"@{name}_seq"))
    return Distribution(count=total(ll), exact=exact, hist=ll)


def quantile(dist: Distribution, q: float) -> JsonObject | None:
    """The q-quantile with its method: exact (linear interpolation, numpy's default) when the
    store held every event, else log-linear: the bucket holding it, an interpolated estimate and
    the error bound (bucket width / lower edge). None without samples."""
    exact = dist.exact
    if exact:
        import numpy as np

        value = float(np.percentile(np.asarray(exact, dtype=float), q * 100))
        return {
            "value": value,
            "method": "exact",
            "count": len(exact),
            "bucket_min": value,
            "bucket_max": value,
            "error_bound_pct": 0.0,
        }
    p = percentile(dist.hist, q)
    if p is None:
        return None
    low, high = p["bucket_min"], p["bucket_max"]
    return {
        "value": p["estimate"],
        "method": "log-linear",
        "count": total(dist.hist),
        "bucket_min": low,
        "bucket_max": high,
        "error_bound_pct": 100.0 * (high - low) / low if low > 0 else None,
    }


def describe(p: JsonObject | None, scale: float = 1e3, unit: str = "us") -> str:
    """ "12.3 us (exact, 83 events)" or "12.3 us (log-linear, in 11.0–13.0 us, ±18 %)"."""
    if p is None:
        return "n/a"
    value = f"{p['value'] / scale:.1f} {unit}"
    if p["method"] == "exact":
        return f"{value} (exact, {p['count']} events)"
    bound = p.get("error_bound_pct")
    return (
        f"{value} ({p['method']}, in {p['bucket_min'] / scale:.1f}–"
        f"{p['bucket_max'] / scale:.1f} {unit}" + (f", ±{bound:.0f} %" if bound is not None else "") + ")"
    )

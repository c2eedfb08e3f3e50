"""Read bpftrace's printed aggregates: log2/linear histograms, stats(), keyed maps."""

from __future__ import annotations

from typing import Any


def buckets(value: Any) -> list[tuple[int, int, int]]:
    """A printed histogram as (min, max, count) triples; anything else gives []."""
    if not isinstance(value, list):
        return []
    out = []
    for b in value:
        if isinstance(b, dict) and "count" in b:
            low = b.get("min", b.get("max", 0))
            high = b.get("max", low)
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
            return {"estimate": low + frac * (high + 1 - low), "bucket_min": float(low),
                    "bucket_max": float(high + 1)}
        seen += count
    low, high, _ = sorted(hist)[-1]
    return {"estimate": float(high + 1), "bucket_min": float(low), "bucket_max": float(high + 1)}


def stats(value: Any) -> tuple[int, int] | None:
    """(count, total) of a printed stats() value, None otherwise."""
    if isinstance(value, dict) and "count" in value and "total" in value:
        return int(value["count"]), int(value["total"])
    return None


def keyed(value: Any) -> dict[str, Any]:
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

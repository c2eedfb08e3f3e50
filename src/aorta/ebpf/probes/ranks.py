"""One local rank's share of a node program's maps (torchrun: one bpftrace for a node's ranks).

In a node program (TraceTarget.rank_keys) each family keys the maps it lists in
`rank_keyed_maps` by the rank key first (local rank slot + 1, inherited by children; carried from
the submission for events that fire in kernel workers). Slicing keeps one rank's entries with that
key removed, so `collect` reads the same shapes as in a single-process program.
"""

from __future__ import annotations

from collections.abc import Iterable

from aorta.common.jsontypes import JsonObject
from aorta.ebpf import hist
from aorta.ebpf.probes.base import ProbeFamily


def rank_key(slot: int) -> int:
    """The key a node program gives local rank slot `slot` (0 means: no traced process)."""
    return slot + 1


def rank_keyed(families: Iterable[ProbeFamily]) -> list[str]:
    """Every rank-keyed map name of these families."""
    return [name for family in families for name in family.rank_keyed_maps]


def rank_slice(maps: JsonObject, names: Iterable[str], key: int) -> JsonObject:
    """`maps` with each named map reduced to rank `key`'s entries, the key removed (a map left
    with only the rank key becomes a scalar); other maps are kept as they are (node-wide)."""
    out = dict(maps)
    want = str(int(key))
    for name in names:
        value = maps.get(name)
        if value is None:
            continue
        kept: JsonObject = {}
        for text, item in hist.keyed(value).items():
            head, _, rest = text.partition(",")
            if head.strip() == want:
                kept[rest.strip()] = item
        if not kept:
            out.pop(name)  # bpftrace prints nothing for an empty map: absent means empty
        elif list(kept) == [""]:
            out[name] = kept[""]
        else:
            out[name] = kept
    return out

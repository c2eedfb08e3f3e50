"""bpftrace code for one gpu_runtime entry point, by role (launch, copy, collective, event, sync ...).

Rendered only for names checked in the probed file's ELF symbol table (gpu_runtime.render); the
argument expressions come from the fixed table in gpu_runtime_apis, never from input.

Hot path (issue 26 item 7): a probe fires on every call of the traced processes *and* of every
other process mapping the library, inside the window or not, so each entry program tests the
window gate first (one lookup, and the only one outside the window), then the pid filter, then
reads its arguments. Without the `times` view nothing is kept per thread: an entry program is
the gate, the pid filter, its argument reads and one aggregation. A call of a probed entry point
from inside the same library (a runtime calling its own export through its PLT) is told apart by
its return address (`*(uint64*)reg("sp")`, at entry) lying in the library's own functions: one
stack read instead of a depth map written at entry and at return. With `times` the return probes
come back with the per-thread depth that also catches nesting across libraries.
"""

from __future__ import annotations

from dataclasses import dataclass

from aorta.ebpf.elfsyms import Function
from aorta.ebpf.probes.common import both
from aorta.ebpf.probes.gpu_runtime_apis import QUEUE_DOORBELL_OFF, QUEUE_ID_OFF, Api, P

# role → the map its calls are counted in (stats of bytes / element counts), keyed api, stream, kind
OP_MAPS = {"copy": "copies", "memset": "copies", "collective": "colls"}
INT32 = "0xffffffff"  # an int argument's register / stack slot: the upper half is undefined


RA = "$ra"  # the return address, read at entry: *(uint64*)reg("sp")


def attach_point(symbol: str, fn: Function) -> str:
    """The function's address where it equals its file offset, else its name.

    bpftrace 0.17 expands a plain name to every C++ function whose demangled name starts with
    it (`ncclGroupEnd` also attaches `ncclGroupEndInternal(...)`, counting one call twice); an
    address names exactly one instruction. Where the segment's address and file offset differ
    the name is kept (how bpftrace maps such an address is not established here).
    """
    return f"0x{fn.address:x}" if fn.offset == fn.address else symbol


@dataclass(frozen=True)
class Where:
    """Where one entry point is probed: the attach point; for the same-library caller test its
    link-time address and the span of the library's functions (lowest, highest address); and the
    executable ranges of other probed runtimes that call it, per traced process (pid, start, end:
    the CUDA runtime calling the driver's exported launch functions)."""

    point: str
    address: int = 0
    functions: tuple[int, int] | None = None
    callers: tuple[tuple[int, int, int], ...] = ()

    def inside(self) -> str:
        """A predicate on $ra true when the caller is in the same library's functions (unsigned:
        a caller below the lowest function wraps to a huge value) or in a calling runtime's
        text in that process; "0" when neither is known."""
        tests = []
        if self.functions is not None:
            lo, hi = self.functions
            tests.append(f'{RA} - reg("ip") + {self.address - lo} <= {hi - lo}')
        tests += [f"(pid == {p} && {RA} >= {lo} && {RA} < {hi})" for p, lo, hi in self.callers]
        return " || ".join(tests) if tests else "0"


def blocks(
    api: Api,
    where: str | Where,
    pf: str,
    gate: str,
    r: str = "",
    times: bool = True,
    doorbell_streams: bool = True,
) -> list[str]:
    """bpftrace blocks for one entry point (arguments read once, at the top of each probe);
    `r` ("rank, " or "") leads the key of every lasting map in a node program; `times`: also the
    return probes (call times, nesting by depth); `doorbell_streams`: a doorbell store made inside
    a launch call is attributed to the launch's stream (needs the launch's per-thread state)."""
    at = where if isinstance(where, Where) else Where(where)
    if not times and (
        api.role in OP_MAPS or api.role in ("launch", "graph_launch") or api.role.startswith("sync_")
    ):
        return _entry_only(api, at, pf, gate, r)
    return _blocks(api, at.point, pf, gate, r, doorbell_streams)


def _entry_only(api: Api, at: Where, pf: str, gate: str, r: str) -> list[str]:
    """A launch, copy, memset, collective or sync without return probe: counted at entry."""
    i, where, pred = api.ident, at.point, both(gate, pf)
    if api.role.startswith("sync_"):
        return [f"uprobe:{where}\n/{pred}/\n{{\n  {P}sync_calls[{r}{i}, {api.stream or '0'}] = count();\n}}"]
    inside = at.inside()
    if api.role in OP_MAPS:
        body = f"{P}{OP_MAPS[api.role]}[{r}{i}, {api.stream}, ({api.kind}) & {INT32}] = stats({api.size});"
        if inside != "0":
            body = f'{RA} = *(uint64*)reg("sp");\n  if (!({inside})) {{ {body} }}'
        return [f"uprobe:{where}\n/{pred}/\n{{\n  {body}\n}}"]
    count = f"{P}launches[{r}{i}, {api.stream}] = count();"
    if inside == "0":
        return [f"uprobe:{where}\n/{pred}/\n{{\n  {count}\n}}"]
    return [
        f'uprobe:{where}\n/{pred}/\n{{\n  $s = {api.stream};\n  {RA} = *(uint64*)reg("sp");\n'
        f"  if ({inside}) {{ {P}nested[{r}{i}] = count(); }}\n"
        f"  else {{ {P}launches[{r}{i}, $s] = count(); }}\n}}"
    ]


def _blocks(api: Api, where: str, pf: str, gate: str, r: str, doorbell_streams: bool) -> list[str]:
    """The blocks with return probes where the role has them (call times, nesting by depth)."""
    i = api.ident
    if api.role in OP_MAPS:
        return _op_blocks(api, where, pf, gate, r)
    if api.role == "group":
        return [f"uprobe:{where}\n/{both(gate, pf)}/\n{{\n  {P}groups[{r}{i}] = count();\n}}"]
    if api.role == "event_record":  # remembered outside the window too: a wait inside may need it
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  $e = {api.event};\n  $s = {api.stream};\n"
            f"  {P}ev_src[{r}$e] = $s + 1;\n"
            f"  if ({gate}) {{ {P}records[{r}{i}, $s] = count(); }}\n}}"
        ]
    if api.role == "stream_wait":
        return [
            f"uprobe:{where}\n/{both(gate, pf)}/\n{{\n  $s = {api.stream};\n"
            f"  $p = {P}ev_src[{r}{api.event}];\n"
            f"  if ($p != 0) {{\n    {P}edges[{r}{i}, $p - 1, $s] = count();\n"
            f"  }} else {{\n    {P}wait_unknown[{r}{i}, $s] = count();\n  }}\n}}"
        ]
    if api.role in ("launch", "graph_launch"):
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  $s = {api.stream};\n  $d = {P}depth[tid];\n"
            f"  {P}depth[tid] = $d + 1;\n"
            f"  if ($d == 0 && {gate}) {{\n    {P}launches[{r}{i}, $s] = count();\n"
            f"    {P}t0[tid] = nsecs;\n    {P}cur[tid] = $s;\n    {P}api[tid] = {i};\n  }}\n"
            f"  else if ($d > 0 && {gate}) {{ {P}nested[{r}{i}] = count(); }}\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $d = {P}depth[tid];\n"
            f"  if ($d > 1) {{ {P}depth[tid] = $d - 1; }}\n"
            f"  if ($d == 1) {{\n    delete({P}depth[tid]);\n    $t = {P}t0[tid];\n"
            f"    if ($t != 0) {{\n      {P}launch_ns[{r}{P}api[tid], {P}cur[tid]] = stats(nsecs - $t);\n"
            f"      delete({P}t0[tid]);\n      delete({P}cur[tid]);\n      delete({P}api[tid]);\n"
            f"    }}\n  }}\n}}",
        ]
    if api.role == "stream_create":
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  {P}sout[tid] = arg0;\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $o = {P}sout[tid];\n  delete({P}sout[tid]);\n"
            f"  if ((retval & 0xffffffff) == 0 && $o != 0) {{\n"
            f"    {P}streams[{r}{i}, *(uint64*)$o] = count();\n  }}\n}}",
        ]
    if api.role.startswith("sync_"):
        key = api.stream or "0"
        return [
            f"uprobe:{where}\n/{both(gate, pf)}/\n{{\n  $s = {key};\n"
            f"  if ({P}s0[tid] == 0) {{\n    {P}s0[tid] = nsecs;\n    {P}skey[tid] = $s;\n"
            f"    {P}sapi[tid] = {i};\n  }}\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $t = {P}s0[tid];\n"
            f"  if ($t != 0 && {P}sapi[tid] == {i}) {{\n"
            f"    {P}sync_ns[{r}{i}, {P}skey[tid]] = stats(nsecs - $t);\n"
            f"    delete({P}s0[tid]);\n    delete({P}skey[tid]);\n    delete({P}sapi[tid]);\n  }}\n}}",
        ]
    if api.role == "queue_create":
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  {P}qout[tid] = {api.stream};\n}}",
            f"uretprobe:{where}\n/{pf}/\n{{\n  $o = {P}qout[tid];\n  delete({P}qout[tid]);\n"
            f"  if ((retval & 0xffffffff) == 0 && $o != 0) {{\n    $q = *(uint64*)$o;\n"
            f"    $sig = *(uint64*)($q + {QUEUE_DOORBELL_OFF});\n"
            f"    {P}doorbell[{r}$sig] = $q;\n"
            f"    {P}queues[{r}$q, $sig] = *(uint64*)($q + {QUEUE_ID_OFF});\n  }}\n}}",
        ]
    if api.role == "doorbell":
        return [
            f"uprobe:{where}\n/{both(gate, pf)}/\n{{\n  $sig = arg0;\n"
            f"  if ({P}doorbell[{r}$sig] != 0) {{ {P}rings[{r}$sig] = count(); }}\n"
            + (
                f"  if ({P}t0[tid] != 0) {{ {P}launch_rings[{r}{P}cur[tid], $sig] = count(); }}\n"
                if doorbell_streams
                else ""
            )
            + "}",
        ]
    raise ValueError(f"unknown role {api.role}")


def _op_blocks(api: Api, where: str, pf: str, gate: str, r: str) -> list[str]:
    """A copy, memset or collective: stats(bytes or elements) per (api, stream, kind) at entry,
    host call time entry → return; outermost calls only (one depth counter for all three)."""
    i, table = api.ident, f"{P}{OP_MAPS[api.role]}"
    return [
        f"uprobe:{where}\n/{pf}/\n{{\n  $s = {api.stream};\n  $b = {api.size};\n"
        f"  $k = ({api.kind}) & {INT32};\n  $d = {P}odepth[tid];\n  {P}odepth[tid] = $d + 1;\n"
        f"  if ($d == 0 && {gate}) {{\n    {table}[{r}{i}, $s, $k] = stats($b);\n"
        f"    {P}o0[tid] = nsecs;\n    {P}os[tid] = $s;\n    {P}ok[tid] = $k;\n"
        f"    {P}oapi[tid] = {i};\n  }}\n}}",
        f"uretprobe:{where}\n/{pf}/\n{{\n  $d = {P}odepth[tid];\n"
        f"  if ($d > 1) {{ {P}odepth[tid] = $d - 1; }}\n"
        f"  if ($d == 1) {{\n    delete({P}odepth[tid]);\n    $t = {P}o0[tid];\n"
        f"    if ($t != 0) {{\n      {table}_ns[{r}{P}oapi[tid], {P}os[tid], {P}ok[tid]] = "
        f"stats(nsecs - $t);\n      delete({P}o0[tid]);\n      delete({P}os[tid]);\n"
        f"      delete({P}ok[tid]);\n      delete({P}oapi[tid]);\n    }}\n  }}\n}}",
    ]

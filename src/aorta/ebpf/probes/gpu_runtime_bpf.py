"""bpftrace code for one gpu_runtime entry point, by role (launch, copy, collective, event, sync ...).

Rendered only for names checked in the probed file's ELF symbol table (gpu_runtime.render); the
argument expressions come from the fixed table in gpu_runtime_apis, never from input.
"""

from __future__ import annotations

from aorta.ebpf.probes.common import both
from aorta.ebpf.probes.gpu_runtime_apis import QUEUE_DOORBELL_OFF, QUEUE_ID_OFF, Api, P

# role → the map its calls are counted in (stats of bytes / element counts), keyed api, stream, kind
OP_MAPS = {"copy": "copies", "memset": "copies", "collective": "colls"}
INT32 = "0xffffffff"  # an int argument's register / stack slot: the upper half is undefined


def blocks(api: Api, where: str, pf: str, gate: str, r: str = "") -> list[str]:
    """bpftrace blocks for one entry point (arguments read once, at the top of each probe);
    `r` ("rank, " or "") leads the key of every lasting map in a node program."""
    i = api.ident
    if api.role in OP_MAPS:
        return _op_blocks(api, where, pf, gate, r)
    if api.role == "group":
        return [f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  {P}groups[{r}{i}] = count();\n}}"]
    if api.role == "event_record":  # remembered outside the window too: a wait inside may need it
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  $e = {api.event};\n  $s = {api.stream};\n"
            f"  {P}ev_src[{r}$e] = $s;\n  {P}ev_seen[{r}$e] = 1;\n"
            f"  if ({gate}) {{ {P}records[{r}{i}, $s] = count(); }}\n}}"
        ]
    if api.role == "stream_wait":
        return [
            f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  $s = {api.stream};\n  $e = {api.event};\n"
            f"  if ({P}ev_seen[{r}$e]) {{\n    {P}edges[{r}{i}, {P}ev_src[{r}$e], $s] = count();\n"
            f"  }} else {{\n    {P}wait_unknown[{r}{i}, $s] = count();\n  }}\n}}"
        ]
    if api.role in ("launch", "graph_launch"):
        return [
            f"uprobe:{where}\n/{pf}/\n{{\n  $s = {api.stream};\n  $d = {P}depth[tid];\n"
            f"  {P}depth[tid] = $d + 1;\n"
            f"  if ($d == 0 && {gate}) {{\n    {P}launches[{r}{i}, $s] = count();\n"
            f"    {P}t0[tid] = nsecs;\n    {P}cur[tid] = $s;\n    {P}api[tid] = {i};\n  }}\n"
            f"  if ($d > 0 && {gate}) {{ {P}nested[{r}{i}] = count(); }}\n}}",
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
            f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  $s = {key};\n"
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
            f"uprobe:{where}\n/{both(pf, gate)}/\n{{\n  $sig = arg0;\n"
            f"  if ({P}doorbell[{r}$sig] != 0) {{ {P}rings[{r}$sig] = count(); }}\n"
            f"  if ({P}t0[tid] != 0) {{ {P}launch_rings[{r}{P}cur[tid], $sig] = count(); }}\n}}",
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

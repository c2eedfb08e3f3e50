"""Text of `ebpf-info`: the "eBPF Capabilities" summary of docs/guide.md first, then the detailed view.

The summary uses those labels (Kernel version, bpftrace, Root/CAP_BPF, Overall available,
amdgpu/amdkfd tracepoints, KFD variant); the details say per probe family what it traces, which of
its tracepoints exist per subsystem, and what would attach on this machine (and why not).
"""

from __future__ import annotations

import click

from aorta.common.jsontypes import JsonObject

LABEL = 22


def _line(label: str, value: str) -> None:
    click.echo(f"  {label + ':':<{LABEL}}{value}")


def _event_list(label: str, block: JsonObject) -> None:
    """`amdgpu tracepoints:` and its events; one note line when there is nothing to list."""
    if block.get("note"):
        _line(label, f"({block['note']})")
        return
    click.echo(f"  {label}:")
    width = max((len(e) for e in block["events"]), default=0) + 2
    for event, state in block["events"].items():
        click.echo(f"    {event:<{width}}{state}")


def render_summary(summary: JsonObject) -> None:
    """The docs/guide.md block, with 'not installed' and '(not accessible)' where it uses them."""
    click.echo("eBPF Capabilities")
    click.echo("=================")
    _line("Kernel version", summary["kernel_version"])
    bt = summary["bpftrace"]
    _line("bpftrace", f"{bt['path']} (v{bt['version'] or '?'})" if bt["installed"] else "not installed")
    priv = summary["root_or_cap_bpf"]
    _line("Root/CAP_BPF", f"yes ({priv['how']})" if priv["ok"] else f"no ({priv['how']})")
    _line("Overall available", "yes" if summary["overall_available"] else f"no: {summary['reason']}")
    _event_list("amdgpu tracepoints", summary["amdgpu_tracepoints"])
    _event_list("amdkfd tracepoints", summary["amdkfd_tracepoints"])
    variant = summary["kfd_variant"]
    _line(
        "KFD variant",
        {
            "kfd_evict_process_worker_*": "kfd_evict_process_worker_* (newer amdkfd)",
            "kfd_evict_process": "kfd_evict_process (older amdkfd)",
        }.get(variant or "", "none (no amdkfd eviction tracepoints)"),
    )
    dev = summary["kfd_device"]
    _line("KFD device", f"{dev['path']} {'present' if dev['exists'] else 'absent'}")


def _family(name: str, fam: JsonObject) -> None:
    mode = "--ebpf-trace" if fam.get("section") == "queue" else "--ebpf-memory-trace"
    click.echo(f"  {name} [{mode}]: {fam.get('description', '')}")
    subsystems = fam.get("by_subsystem") or {}
    if subsystems:
        parts = [f"{system} {c['present']}/{c['wanted']} present" for system, c in subsystems.items()]
        unreadable = [e for e, st in (fam.get("states") or {}).items() if st == "not readable"]
        tail = f"; not readable: {', '.join(unreadable)}" if unreadable else ""
        click.echo(f"      tracepoints: {', '.join(parts)}{tail}")
    attach = fam.get("attach")
    if attach is None:
        return
    if attach["events"]:
        click.echo(f"      attaches here: {', '.join(attach['events'])}")
    else:
        click.echo("      attaches here: nothing")
    reasons: dict[str, list[str]] = {}
    for event, why in attach["not_attached"].items():
        reasons.setdefault(why, []).append(event)
    for why, events in reasons.items():
        click.echo(f"      not attached ({why}): {', '.join(events)}")


def render_details(data: JsonObject) -> None:
    """Paths, privileges, per-family tracepoints and attach view, and the verdict per mode."""
    bt, priv = data["bpftrace"], data["privileges"]
    click.echo("")
    click.echo("Details")
    click.echo("=======")
    if bt["path"]:
        click.echo(
            f"  bpftrace:   {bt['path']} {bt['version'] or '?'} "
            f"(tracepoint args as {bt['args_syntax'] or '?'})"
        )
    caps = ", ".join(k for k, v in priv["effective_caps"].items() if v) or "none"
    click.echo(
        f"  privileges: euid {priv['euid']}; effective caps: {caps}; sudo -n: "
        f"{priv['sudo_note']}; launch: {priv['launch']}"
    )
    click.echo(f"  tracefs:    {data['tracefs']['note']}")
    click.echo(f"  lockdown:   {data['lockdown']}")
    click.echo(f"  BTF:        {'yes' if data['btf'] else 'no'}")
    click.echo("probe families (what each traces; its tracepoints here; what would attach):")
    for name, fam in data["families"].items():
        if "section" in fam:
            _family(name, fam)
    kfd = data["families"].get("amdkfd (DKMS driver)") or {}
    if kfd.get("naming"):
        click.echo(f"  amdkfd naming: {kfd['naming']}; events carry {kfd['identity_field']}")
    sched = data["families"].get("gpu_scheduler naming") or {}
    named = [k for k, v in sched.items() if v]
    click.echo(f"  gpu_scheduler naming: {named[0] if named else 'none (no drm_sched tracepoints)'}")
    gpu = data.get("gpu_runtime")
    if gpu:
        click.echo(
            f"  gpu_runtime (uprobes, {gpu['flag']}): "
            + ("available" if gpu["available"] else "NOT available (no C library for the uprobe handshake)")
            + "; probes "
            + ", ".join(f"{k}: {len(v)} symbols" for k, v in gpu["symbols"].items())
        )
    for mode, verdict in data["modes"].items():
        if verdict["available"]:
            state = f"available (families that attach: {', '.join(verdict['families_with_events'])})"
        else:
            state = f"NOT available: {verdict['reason']}"
        click.echo(f"{mode}: {state}")


def render_ebpf_info(data: JsonObject) -> None:
    """The whole `ebpf-info` text: summary, then details."""
    render_summary(data["summary"])
    render_details(data)

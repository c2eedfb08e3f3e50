"""One place that decides whether real-eBPF tests can run: skip with the reason, but FAIL when CI=true."""

from __future__ import annotations

import os

import pytest


def ebpf_unavailable_reason() -> str | None:
    """Why real bpftrace cannot run here, or None when it can."""
    from aorta.ebpf.engine import check_readiness

    ready = check_readiness(mount_tracefs=True)
    if not ready.ok:
        return ready.reason
    if ready.tracefs is None or not ready.tracefs.has_event("sched", "sched_switch"):
        return "tracefs lacks sched:sched_switch"
    return None


def require_ebpf() -> None:
    """Skip (locally) or fail (CI=true) when eBPF is impossible on this machine."""
    reason = ebpf_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"eBPF required in CI but unavailable: {reason}")
    pytest.skip(f"eBPF unavailable: {reason}")

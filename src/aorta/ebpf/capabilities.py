"""What this machine can trace. `readiness_summary` is the short form `info` prints."""

from __future__ import annotations

import os
import shutil
from typing import Any

from aorta.ebpf.tracefs import find_tracefs


def readiness_summary() -> dict[str, Any]:
    """A verdict line plus the reasons behind it; no probes are attached."""
    details = []
    bpftrace = shutil.which("bpftrace")
    details.append(f"bpftrace: {bpftrace or 'not found (apt-get install bpftrace)'}")
    root = os.geteuid() == 0
    details.append(f"privileges: {'root' if root else 'not root (needs sudo -n or CAP_BPF)'}")
    tracefs, why = find_tracefs(mount_if_root=False)
    details.append(f"tracefs: {why}")
    ready = bool(bpftrace) and root and tracefs is not None
    verdict = "available (see ebpf-info)" if ready else "not available (see ebpf-info)"
    return {"available": ready, "verdict": verdict, "details": details}

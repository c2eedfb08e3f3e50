"""Vendor-neutral kernel tracing engine (bpftrace), usable without the benchmark.

The library face (docs/ebpf-integration.md): `check_readiness()`, `TraceTarget`, `families()`,
`trace_window()` and the errors it raises. Loaded on first use, so importing a submodule (the
CLI's fast paths do) costs nothing more.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ProgramError",
    "Readiness",
    "SessionError",
    "TraceTarget",
    "TracedWindow",
    "TracingUnavailable",
    "check_readiness",
    "families",
    "trace_window",
]


_HOME = {"ProgramError": "aorta.ebpf.program", "SessionError": "aorta.ebpf.session"}  # else api


def __getattr__(name: str) -> Any:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module(_HOME.get(name, "aorta.ebpf.api")), name)
    raise AttributeError(f"module 'aorta.ebpf' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

"""The one module that reads this process's environment: every variable aorta reads by name is
declared here with what it changes (tests/test_no_env_switches.py fails on a read elsewhere).

aorta runs as root, and a variable is a switch that is inherited silently (through sudo, into
children); declaring each one keeps that set small and reviewable. Whole-environment copies (a
child's scrubbed environment, the runtime knobs a result records) go through `snapshot()`.
Nothing here imports beyond `os` (aorta.hw_queue_eval.__main__ uses it before the CLI loads).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: each variable read by name → what it changes
DECLARED: dict[str, str] = {
    "SUDO_UID": "under sudo, the invoking user, whose own folders and links root trusts (common/safedir.py)",
    "XDG_STATE_HOME": "the default folder of GPU clock/power state files when not root (gpu/state.py)",
    "TORCHELASTIC_RUN_ID": "this process is a torchrun rank: it dies with its launcher (__main__.py)",
    "TORCHELASTIC_RESTART_COUNT": "a torchrun restart: the node tracer's store keys per attempt",
    "CUDA_VISIBLE_DEVICES": "torch's cuda:N → the vendor tool's GPU index (gpu/control.py)",
    "HIP_VISIBLE_DEVICES": "torch's cuda:N → the vendor tool's GPU index on ROCm (gpu/control.py)",
    "ROCR_VISIBLE_DEVICES": "torch's cuda:N → the vendor tool's GPU index on ROCm (gpu/control.py)",
}


def get(name: str, default: str | None = None) -> str | None:
    """The value of a declared variable (KeyError for an undeclared name: declare it first)."""
    if name not in DECLARED:
        raise KeyError(f"{name} is not declared in aorta.common.environment.DECLARED")
    return os.environ.get(name, default)


def snapshot() -> dict[str, str]:
    """A copy of the whole environment, for code that filters or records it (never trusts it)."""
    return dict(os.environ)


def set_values(values: Mapping[str, str]) -> None:
    """Set variables in this process (and so in its children), e.g. the private cache folders."""
    os.environ.update(values)


def set_default(name: str, value: str) -> None:
    """Set a variable a library reads unless the user set it (their setting wins)."""
    os.environ.setdefault(name, value)

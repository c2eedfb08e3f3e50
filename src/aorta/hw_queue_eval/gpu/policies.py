"""Queue policies: a clock level, a power limit and GPU-runtime env variables, applied per point.

Built-ins are the table in docs/policies.md. User policies come from a TOML file whose
names, levels, watts and env variables are validated here, once, before anything runs: the env
reaches a child process (possibly as root), so only the named variables of ALLOWED_ENV pass, each
with a typed value (integer range, 0/1, or a fixed set); nothing that names a path or a library.
No torch import here.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aorta.common.errors import UsageError
from aorta.common.jsontypes import JsonObject

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

CLOCK_LEVELS = range(0, 8)  # 0 lowest … 7 highest performance level
MIN_POWER_W = 1.0
MAX_POWER_W = 5000.0  # a sanity bound; the device's own limits are checked when applied
DEFAULT_POLICIES = ("baseline", "priority_lc", "priority_be")

_NAME_RE = re.compile(r"^[a-z][a-z0-9_\-]{0,47}$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
#: Runtime variables a policy must not set: they change which device runs, so the device whose
#: clocks/power are controlled would no longer be the device that is measured.
_ENV_FORBIDDEN = (
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "CUDA_DEVICE_ORDER",
)
_POLICY_KEYS = {"description", "clock_level", "power_limit_w", "env", "stream_priority"}
#: Names that load code or name a file/folder (refused with that reason): LD_*, PYTHON*, …PATH,
#: …LIB, …_FILE, …_DIR, …_OUT, …PLUGIN, …INJECTION… (HSA_TOOLS_LIB, CUDA_INJECTION64_PATH, …).
_LOADS_OR_WRITES = re.compile(
    r"^(LD_|PYTHON)|PATH|LIB|FILE|DIR|_OUT|PLUGIN|PRELOAD|INJECT|"
    r"TOOLS|_SO$|_CONF|CACHE_|HOME|PREFIX"
)


@dataclass(frozen=True)
class EnvVar:
    """A variable a policy may set and the values it takes: "int" (low..high), "bool" (0/1) or
    "enum" (one of `choices`)."""

    kind: str
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    doc: str = ""

    def check(self, value: Any, what: str) -> str:
        """The value as the child will see it, or a UsageError naming the allowed values."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return "1" if value else "0"
            if str(value) in ("0", "1") and not isinstance(value, float):
                return str(value)
            raise UsageError(f"{what}={value!r}: give 0 or 1 (or true/false)")
        if self.kind == "int":
            text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
            if not re.fullmatch(r"[0-9]{1,6}", text) or not self.low <= int(text) <= self.high:
                raise UsageError(f"{what}={value!r}: give a whole number {self.low}..{self.high}")
            return str(int(text))
        if isinstance(value, bool) or str(value) not in self.choices:
            raise UsageError(f"{what}={value!r}: use one of {', '.join(self.choices)}")
        return str(value)


def _bool(doc: str) -> EnvVar:
    return EnvVar("bool", doc=doc)


#: The only variables a policy may set, with their value types (docs/policies.md lists them).
ALLOWED_ENV: dict[str, EnvVar] = {
    "GPU_MAX_HW_QUEUES": EnvVar(
        "int", 1, 64, doc="HIP: hardware queues per device (CPU backend: its pool of worker queues)"
    ),
    "HSA_XNACK": _bool("ROCr: retry GPU page faults (unified memory)"),
    "HSA_ENABLE_SDMA": _bool("ROCr: copies on SDMA engines (0: on compute queues)"),
    "HSA_ENABLE_INTERRUPT": _bool("ROCr: interrupt-driven waits (0: polling)"),
    "HIP_LAUNCH_BLOCKING": _bool("HIP: every launch waits for completion"),
    "HIP_FORCE_DEV_KERNARG": _bool("HIP: kernel arguments in device memory"),
    "AMD_SERIALIZE_KERNEL": EnvVar(
        "enum", choices=("0", "1", "2", "3"), doc="HIP: wait before (1), after (2) or around (3) kernels"
    ),
    "AMD_SERIALIZE_COPY": EnvVar("enum", choices=("0", "1", "2", "3"), doc="HIP: the same for copies"),
    "DEBUG_HIP_IGNORE_STREAM_PRIORITY": _bool("HIP: ignore stream priorities"),
    "CUDA_DEVICE_MAX_CONNECTIONS": EnvVar(
        "int", 1, 32, doc="CUDA: hardware work queues (connections) per device"
    ),
    "CUDA_LAUNCH_BLOCKING": _bool("CUDA: every launch waits for completion"),
    "CUDA_MODULE_LOADING": EnvVar("enum", choices=("LAZY", "EAGER"), doc="CUDA: when kernels are loaded"),
    "NCCL_DEBUG": EnvVar(
        "enum", choices=("VERSION", "WARN", "INFO", "TRACE"), doc="NCCL/RCCL: log level (on stderr)"
    ),
    "PYTORCH_NO_CUDA_MEMORY_CACHING": _bool("PyTorch: no caching allocator (CUDA)"),
    "PYTORCH_NO_HIP_MEMORY_CACHING": _bool("PyTorch: no caching allocator (ROCm)"),
    "OMP_NUM_THREADS": EnvVar("int", 1, 4096, doc="OpenMP threads (CPU)"),
    "MKL_NUM_THREADS": EnvVar("int", 1, 4096, doc="MKL threads (CPU)"),
}


@dataclass(frozen=True)
class Policy:
    """One policy: what to change for a point. None means 'leave as found'."""

    name: str
    description: str
    clock_level: int | None = None
    power_limit_w: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    source: str = "builtin"
    #: stream priorities the workload's streams are created with (backends/priority.py spec,
    #: e.g. "0=high,rest=low"); None: every stream at the default priority
    stream_priority: str | None = None

    def child_args(self) -> list[str]:
        """The run options this policy adds to the run's child (its stream priorities)."""
        return ["--stream-priority", self.stream_priority] if self.stream_priority else []

    @property
    def needs_gpu_control(self) -> bool:
        """True if the policy changes clocks or power (device state, not just env)."""
        return self.clock_level is not None or self.power_limit_w is not None

    def to_dict(self) -> JsonObject:
        """Plain dict for the JSON file (the request, not what took effect)."""
        return {
            "name": self.name,
            "description": self.description,
            "clock_level": self.clock_level,
            "power_limit_w": self.power_limit_w,
            "env": dict(self.env),
            "stream_priority": self.stream_priority,
            "source": self.source,
        }


BUILTIN_POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("baseline", "Nothing changed: the machine as found."),
        Policy(
            "priority_lc",
            "Latency-critical: clocks locked at the highest level (7) (upstream's meaning).",
            clock_level=7,
        ),
        Policy(
            "stream_priority_lc",
            "Stream 0 (latency-critical) created high priority, the rest low.",
            stream_priority="0=high,rest=low",
        ),
        Policy(
            "stream_priority_inverse",
            "Stream 0 created low priority, the rest high (the control for stream_priority_lc).",
            stream_priority="0=low,rest=high",
        ),
        Policy(
            "priority_be",
            "Best-effort: low clock level (2) and a 150 W power cap.",
            clock_level=2,
            power_limit_w=150.0,
        ),
        Policy(
            "multi_tenant_fair",
            "Two hardware queues per device (GPU_MAX_HW_QUEUES=2).",
            env={"GPU_MAX_HW_QUEUES": "2"},
        ),
        Policy(
            "high_queue",
            "Eight hardware queues per device (GPU_MAX_HW_QUEUES=8).",
            env={"GPU_MAX_HW_QUEUES": "8"},
        ),
        Policy(
            "default_uvm",
            "XNACK on: retry GPU page faults (unified memory), HSA_XNACK=1.",
            env={"HSA_XNACK": "1"},
        ),
        Policy("xnack_off", "XNACK off, HSA_XNACK=0.", env={"HSA_XNACK": "0"}),
    )
}


#: env variables that change what the CPU backend does: its queue pool (GPU_MAX_HW_QUEUES, see
#: backends/cpu.py) and the CPU math libraries torch uses; every other GPU-runtime variable
#: (HSA_XNACK, HIP_*, ROCR_*, CUDA_*, ...) is read by a GPU runtime the CPU backend never loads.
CPU_EFFECTIVE_ENV = ("GPU_MAX_HW_QUEUES",)
CPU_EFFECTIVE_PREFIXES = ("OMP_", "MKL_", "TORCH_", "PYTORCH_")


def cpu_ignored_env(policy: Policy) -> list[str]:
    """The policy's env variables that have no effect on the CPU backend."""
    return sorted(
        name
        for name in policy.env
        if name not in CPU_EFFECTIVE_ENV and not name.startswith(CPU_EFFECTIVE_PREFIXES)
    )


def not_applicable_reason(policy: Policy, backend: str) -> str | None:
    """Why the policy changes nothing on `backend` (None when some setting acts there).

    Clock/power settings on the CPU backend are handled by gpu_control (CPU_NOT_APPLICABLE).
    """
    if backend != "cpu" or not policy.env or policy.needs_gpu_control or policy.stream_priority:
        return None
    ignored = cpu_ignored_env(policy)
    if len(ignored) < len(policy.env):
        return None
    return (
        f"not applicable on the CPU backend: {', '.join(ignored)} "
        f"{'is a GPU-runtime variable' if len(ignored) == 1 else 'are GPU-runtime variables'}"
        " the CPU backend never reads (only GPU_MAX_HW_QUEUES and OMP_/MKL_/TORCH_ "
        "variables change it); run on a GPU to measure it"
    )


def validate_clock_level(value: Any, what: str = "--lock-clocks") -> int:
    """A clock level 0..7 (0 lowest, 7 highest) or a UsageError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{what} {value!r}: give a whole number 0 (lowest) … 7 (highest)")
    try:
        level = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{what} {value!r}: give a whole number 0 (lowest) … 7 (highest)") from None
    if level not in CLOCK_LEVELS:
        raise UsageError(f"{what} {level}: clock levels are 0 (lowest) … 7 (highest)")
    return level


def validate_power_limit(value: Any, what: str = "--power-limit") -> float:
    """A power limit in watts within a sanity range, or a UsageError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"{what} {value!r}: give watts, e.g. 250")
    try:
        watts = float(str(value).strip())
    except ValueError:
        raise UsageError(f"{what} {value!r}: give watts, e.g. 250") from None
    if not math.isfinite(watts) or not MIN_POWER_W <= watts <= MAX_POWER_W:
        raise UsageError(f"{what} {value}: watts must be within {MIN_POWER_W:g}..{MAX_POWER_W:g}")
    return watts


def validate_env(env: Any, where: str) -> dict[str, str]:
    """Env overrides as str→str: only ALLOWED_ENV names, each value of its type (UsageError)."""
    if not isinstance(env, Mapping):
        raise UsageError(f"{where}: env must be a table of NAME = value")
    clean: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise UsageError(f"{where}: env name {name!r} is not of the form [A-Z_][A-Z0-9_]*")
        if name in _ENV_FORBIDDEN:
            raise UsageError(
                f"{where}: env {name} changes which device runs; select the device with --device instead"
            )
        spec = ALLOWED_ENV.get(name)
        if spec is None:
            if _LOADS_OR_WRITES.search(name):
                raise UsageError(
                    f"{where}: env {name} names a file, folder or library that the "
                    "runtime would load or write; a policy may not set it (the "
                    "child may run as root)"
                )
            raise UsageError(
                f"{where}: env {name} is not a variable a policy may set; allowed: "
                f"{', '.join(sorted(ALLOWED_ENV))} (docs/policies.md)"
            )
        clean[name] = spec.check(value, f"{where}: env {name}")
    return clean


def _policy_from_table(name: str, table: Any, path: str) -> Policy:
    where = f"{path}: policy {name!r}"
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"{where}: names are lower-case letters, digits, _ and - (max 48)")
    if not isinstance(table, dict):
        raise UsageError(f"{where}: expected a table [policies.{name}]")
    unknown = sorted(set(table) - _POLICY_KEYS)
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_POLICY_KEYS))})"
        )
    description = table.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"{where}: description must be a string")
    clock = table.get("clock_level")
    power = table.get("power_limit_w")
    priority = table.get("stream_priority")
    if priority is not None:
        from aorta.hw_queue_eval.backends.priority import check_spec

        priority = check_spec(priority, f"{where}: stream_priority")
    policy = Policy(
        name=name,
        description=description,
        clock_level=None if clock is None else validate_clock_level(clock, f"{where}: clock_level"),
        power_limit_w=None if power is None else validate_power_limit(power, f"{where}: power_limit_w"),
        env=validate_env(table.get("env", {}), where),
        source=str(path),
        stream_priority=priority,
    )
    if not policy.needs_gpu_control and not policy.env and not priority and name != "baseline":
        raise UsageError(f"{where}: sets nothing (give clock_level, power_limit_w, env or stream_priority)")
    return policy


#: A policy file is a few tables of a few keys: larger or deeper input is not one (and the
#: TOML parser recurses per nesting level).
MAX_POLICY_FILE_BYTES = 256 * 1024
MAX_TOML_DEPTH = 16


def toml_depth(text: str) -> int:
    """Deepest nesting of arrays and inline tables in TOML `text` (strings and comments skipped)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            while i < n and text[i : i + len(quote)] != quote:
                i += 2 if quote[0] == '"' and text[i] == "\\" else 1
            i += len(quote)
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
        i += 1
    return deepest


def load_policy_file(path: str) -> dict[str, Policy]:
    """Policies from a TOML file: `[policies.NAME]` tables (see examples/policies.toml)."""
    from aorta.common.atomicio import read_small_text

    text = read_small_text(path, "--policy-file", MAX_POLICY_FILE_BYTES)
    if toml_depth(text) > MAX_TOML_DEPTH:
        raise UsageError(
            f"--policy-file {path} nests arrays or tables more than {MAX_TOML_DEPTH} deep: "
            "it is not a policy file (see examples/policies.toml)"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--policy-file {path} is not valid TOML: {exc}") from None
    tables = data.get("policies")
    extra = sorted(set(data) - {"policies"})
    if extra:
        raise UsageError(
            f"--policy-file {path}: unknown top-level key(s) {', '.join(extra)}; "
            "put each policy under [policies.NAME]"
        )
    if not isinstance(tables, dict) or not tables:
        raise UsageError(f"--policy-file {path} defines no [policies.NAME] table")
    return {name: _policy_from_table(name, table, path) for name, table in tables.items()}


def resolve_policies(names: str | None, policy_file: str | None) -> list[Policy]:
    """The policies to run, in order: named ones (built-in or from the file) or the defaults.

    With a file and no --policies, every policy in the file runs after baseline.
    """
    available = dict(BUILTIN_POLICIES)
    from_file: dict[str, Policy] = {}
    if policy_file:
        from_file = load_policy_file(policy_file)
        available.update(from_file)  # a file may redefine a built-in; the file's source says so
    if names is None or not names.strip():
        wanted: Iterable[str] = (
            ["baseline", *[n for n in from_file if n != "baseline"]] if from_file else DEFAULT_POLICIES
        )
    else:
        wanted = [n.strip() for n in names.split(",")]
    chosen: list[Policy] = []
    for name in wanted:
        if not name:
            raise UsageError(f"--policies {names!r}: an item is empty (stray comma?)")
        if name not in available:
            raise UsageError(
                f"unknown policy {name!r}: known are {', '.join(sorted(available))}"
                " (or define it in --policy-file)"
            )
        if any(p.name == name for p in chosen):
            raise UsageError(f"--policies {names!r}: {name} is listed twice")
        chosen.append(available[name])
    return chosen

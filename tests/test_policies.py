"""Policies: the built-in table, TOML validation, and the CLI's exit 2 on bad policy input."""

from __future__ import annotations

from pathlib import Path

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.gpu.policies import (
    BUILTIN_POLICIES,
    load_policy_file,
    resolve_policies,
    validate_clock_level,
)
from conftest import REPO, run_cli_inprocess


def test_builtins_are_the_guides_table() -> None:
    table = {name: (p.clock_level, p.power_limit_w, dict(p.env)) for name, p in BUILTIN_POLICIES.items()}
    assert table == {
        "baseline": (None, None, {}),
        "priority_lc": (7, None, {}),
        "priority_be": (2, 150.0, {}),
        "stream_priority_lc": (None, None, {}),
        "stream_priority_inverse": (None, None, {}),
        "multi_tenant_fair": (None, None, {"GPU_MAX_HW_QUEUES": "2"}),
        "high_queue": (None, None, {"GPU_MAX_HW_QUEUES": "8"}),
        "default_uvm": (None, None, {"HSA_XNACK": "1"}),
        "xnack_off": (None, None, {"HSA_XNACK": "0"}),
    }
    assert [p.name for p in resolve_policies(None, None)] == ["baseline", "priority_lc", "priority_be"]
    priorities = {n: p.stream_priority for n, p in BUILTIN_POLICIES.items() if p.stream_priority}
    assert priorities == {
        "stream_priority_lc": "0=high,rest=low",
        "stream_priority_inverse": "0=low,rest=high",
    }


def test_example_file_loads_and_runs_after_baseline() -> None:
    example = REPO / "examples" / "policies.toml"
    loaded = load_policy_file(str(example))
    assert loaded, "the example defines policies"
    chosen = resolve_policies(None, str(example))
    assert chosen[0].name == "baseline"
    assert [p.name for p in chosen[1:]] == list(loaded)


@pytest.mark.parametrize(
    "body, reason",
    [
        ("[policies.x\n", "not valid TOML"),
        ("[policies.lc]\nclock_level = 9\n", "clock levels are 0"),
        ("[policies.lc]\npower_limit_w = -5\n", "watts must be within"),
        ('[policies.q]\nenv = { gpu_max_hw_queues = "2" }\n', "is not of the form"),
        ('[policies.q]\nenv = { LD_PRELOAD = "/tmp/x.so" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { PATH = "/tmp" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { HSA_TOOLS_LIB = "/tmp/evil.so" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { CUDA_INJECTION64_PATH = "/tmp/evil.so" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { NCCL_NET_PLUGIN = "/tmp/evil.so" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { TORCH_LOGS_OUT = "/tmp/x/link" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { NCCL_DEBUG_FILE = "/etc/x" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { PYTHONSTARTUP = "/tmp/x.py" }\n', "library that the runtime"),
        ('[policies.q]\nenv = { HSA_SOMETHING_NEW = "1" }\n', "not a variable a policy may set"),
        ('[policies.q]\nenv = { GPU_MAX_HW_QUEUES = "0" }\n', "whole number 1..64"),
        ('[policies.q]\nenv = { GPU_MAX_HW_QUEUES = "/tmp/x" }\n', "whole number 1..64"),
        ("[policies.q]\nenv = { GPU_MAX_HW_QUEUES = 2.5 }\n", "whole number 1..64"),
        ('[policies.q]\nenv = { HSA_XNACK = "yes" }\n', "give 0 or 1"),
        ('[policies.q]\nenv = { NCCL_DEBUG = "/tmp/x" }\n', "use one of VERSION"),
        ('[policies.q]\nenv = { CUDA_VISIBLE_DEVICES = "1" }\n', "changes which device runs"),
        ('[policies.q]\nenv = { GPU_MAX_HW_QUEUES = "2; rm -rf /" }\n', "whole number"),
        ('[policies.q]\nenv = { HSA_XNACK = "1\\n" }\n', "give 0 or 1"),
        ("[policies.q]\nclocks = 3\n", "unknown key"),
        ("[policies.Bad-Name]\nclock_level = 3\n", "names are lower-case"),
        ('[policies.empty]\ndescription = "nothing"\n', "sets nothing"),
        ('title = "x"\n', "unknown top-level key"),
    ],
)
def test_malformed_policy_files_are_refused(tmp_path: Path, body: str, reason: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(body)
    with pytest.raises(UsageError, match=reason):
        load_policy_file(str(path))


def test_clock_level_bounds() -> None:
    assert validate_clock_level("0") == 0
    assert validate_clock_level(7) == 7
    for bad in ("9", "-1", "high", True):
        with pytest.raises(UsageError):
            validate_clock_level(bad)


def test_cli_unknown_policy_exits_2_with_reason(tmp_path: Path) -> None:
    out = tmp_path / "never-written.json"
    proc = run_cli_inprocess(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policies",
        "baseline,turbo",
        "-d",
        "cpu",
        "-o",
        str(out),
    )
    assert proc.returncode == 2
    assert not out.exists()
    assert "unknown policy 'turbo'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_malformed_policy_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[policies.q]\nenv = { LD_PRELOAD = "/tmp/evil.so" }\n')
    out = tmp_path / "out.json"
    proc = run_cli_inprocess(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "4",
        "--policy-file",
        str(bad),
        "-d",
        "cpu",
        "-o",
        str(out),
    )
    assert proc.returncode == 2
    assert "LD_PRELOAD names a file, folder or library" in proc.stderr
    assert not out.exists()


def test_cli_lock_clocks_9_exits_2(tmp_path: Path) -> None:
    for cmd in (
        ["run", "hetero_kernels", "--streams", "4"],
        ["policy-sweep", "hetero_kernels", "--streams", "4", "-o", str(tmp_path / "o.json")],
    ):
        proc = run_cli_inprocess(*cmd, "--lock-clocks", "9", "-d", "cpu")
        assert proc.returncode == 2, proc.stderr
        assert "--lock-clocks 9: clock levels are 0 (lowest) … 7 (highest)" in proc.stderr


def test_typed_env_values_are_normalised(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        "[policies.q]\nenv = { GPU_MAX_HW_QUEUES = 8, HSA_XNACK = true, "
        'CUDA_MODULE_LOADING = "LAZY", OMP_NUM_THREADS = "4" }\n'
    )
    env = dict(load_policy_file(str(path))["q"].env)
    assert env == {
        "GPU_MAX_HW_QUEUES": "8",
        "HSA_XNACK": "1",
        "CUDA_MODULE_LOADING": "LAZY",
        "OMP_NUM_THREADS": "4",
    }


def test_every_allowed_env_variable_is_documented() -> None:
    from aorta.hw_queue_eval.gpu.policies import _LOADS_OR_WRITES, ALLOWED_ENV

    doc = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    for name in ALLOWED_ENV:
        assert f"`{name}`" in doc, name
        assert not _LOADS_OR_WRITES.search(name), name  # no allowed name looks path-valued

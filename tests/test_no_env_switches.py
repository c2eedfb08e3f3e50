"""Issue 23 item 3: the tracefs root, the bpftrace binary and the GPU state folder are
command-line options (ebpf-info --tracefs DIR; --bpftrace PATH on run, sweep, policy-sweep,
ebpf-attach and ebpf-info; --state-dir DIR on run, sweep, policy-sweep and restore), never
environment variables. A variable is inherited silently, through sudo and into child processes;
an option is seen on the command line, and checked there (exit 2, one line)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_cli_inprocess, unavailable

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tracefs"
NOBODY = 65534
GONE = ("AORTA_TRACEFS", "BPFTRACE", "AORTA_STATE_DIR")  # environment switches that are options now
_READ = r"(?:environ\s*(?:\.get\s*\(|\.pop\s*\(|\[)|getenv\s*\()\s*"


def env_reads(text: str) -> list[str]:
    """Each place `text` reads one of GONE from the environment, or names it as a string at all
    (a constant read elsewhere: ENV = "BPFTRACE" … os.environ.get(ENV))."""
    found = []
    for name in GONE:
        literal = rf"""["']{name}["']"""
        for pattern in (rf"{_READ}{literal}", rf"{literal}\s+(?:not\s+)?in\s+(?:os\.)?environ", literal):
            found += [m.group(0) for m in re.finditer(pattern, text)]
    return found


def test_src_reads_none_of_the_gone_variables() -> None:
    hits = {
        str(path.relative_to(SRC)): env_reads(path.read_text(encoding="utf-8")) for path in SRC.rglob("*.py")
    }
    assert {path: found for path, found in hits.items() if found} == {}


def test_the_scan_catches_every_way_of_reading_them() -> None:
    for code in (
        'override = os.environ.get("BPFTRACE")',
        "x = os.environ['AORTA_TRACEFS']",
        'x = os.getenv("AORTA_TRACEFS", "")',
        'if "BPFTRACE" in os.environ:',
        'ENV_OVERRIDE = "AORTA_TRACEFS"',
        'override = os.environ.get("AORTA_STATE_DIR")',
    ):
        assert env_reads(code), code
    # bpftrace's own setting, which aorta sets for the child and never reads
    assert env_reads('f"BPFTRACE_MAP_KEYS_MAX={n}"; os.environ.get("BPFTRACE_MAP_KEYS_MAX")') == []


def _fake_bpftrace(folder: Path, script: str) -> str:
    """An executable stand-in for bpftrace (root-owned, 0755: usable by root)."""
    folder.mkdir(exist_ok=True)
    fake = folder / "bpftrace"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return str(fake)


def test_aorta_tracefs_is_ignored_and_tracefs_is_used(tmp_path: Path) -> None:
    tree = FIXTURES / "linux-6.17"
    ignored = run_cli_inprocess("ebpf-info", "--json", env={"AORTA_TRACEFS": str(tree)})
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout)["tracefs"]["root"] != str(tree)
    used = run_cli_inprocess("ebpf-info", "--json", "--tracefs", str(tree))
    assert used.returncode == 0, used.stderr
    data = json.loads(used.stdout)
    assert data["tracefs"] == {"root": str(tree), "note": f"{tree} (from --tracefs)"}
    assert data["families"]["amdgpu"]["events"]["amdgpu:amdgpu_cs_ioctl"] is True
    script = run_cli_inprocess("ebpf-info", "--show-script", "--tracefs", str(tree))
    assert script.returncode == 0, script.stderr
    assert f"// tracefs: {tree};" in script.stdout
    assert "tracepoint:amdgpu:amdgpu_cs_ioctl" in script.stdout


def test_bpftrace_variable_is_ignored_and_bpftrace_is_used(tmp_path: Path) -> None:
    fake = _fake_bpftrace(tmp_path / "bin", 'echo "bpftrace v0.99.1"')
    ignored = run_cli_inprocess(
        "ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.8"), env={"BPFTRACE": fake}
    )
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout)["bpftrace"]["path"] == shutil.which("bpftrace")
    used = run_cli_inprocess(
        "ebpf-info", "--json", "--tracefs", str(FIXTURES / "linux-6.8"), "--bpftrace", fake
    )
    assert used.returncode == 0, used.stderr
    bpftrace = json.loads(used.stdout)["bpftrace"]
    assert (bpftrace["path"], bpftrace["version"]) == (fake, "0.99.1")


@pytest.mark.slow
def test_run_starts_the_bpftrace_it_is_given(cli, tmp_path: Path) -> None:
    """The option reaches the run's tracer: a stand-in whose --version fails turns tracing off,
    naming that binary (and the run itself goes on)."""
    fake = _fake_bpftrace(tmp_path / "bin", "exit 3")
    out = tmp_path / "r.json"
    proc = cli(
        "run", "tiny_kernel_stress", "--streams", "2", "-i", "2", "-w", "1", "-d", "cpu",
        "--ebpf-trace", "--bpftrace", fake, "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"eBPF tracing is off: {fake} --version failed" in proc.stderr
    section = json.loads(out.read_text())["ebpf_queue_metrics"]
    assert section["status"] == "unavailable"
    assert section["error"].startswith(f"{fake} --version failed")


def test_ebpf_attach_starts_the_bpftrace_it_is_given(tmp_path: Path) -> None:
    fake = _fake_bpftrace(tmp_path / "bin", "exit 3")
    proc = run_cli_inprocess("ebpf-attach", "--pid", str(os.getpid()), "--duration", "1s", "--bpftrace", fake)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"error: eBPF tracing unavailable: {fake} --version failed: is bpftrace installed correctly?"
    )


def test_sweeps_pass_bpftrace_to_their_points() -> None:
    from aorta.hw_queue_eval.commands._options import passthrough_args

    values = {
        "ebpf_trace": True,
        "ebpf_memory_trace": False,
        "ebpf_gpu_runtime": False,
        "bpftrace": "/opt/bt",
    }
    assert passthrough_args(values) == ["--ebpf-trace", "--bpftrace", "/opt/bt"]
    assert passthrough_args({**values, "bpftrace": None}) == ["--ebpf-trace"]


COMMANDS = {
    "run": ("run", "tiny_kernel_stress", "--streams", "2"),
    "sweep": ("sweep", "tiny_kernel_stress", "--streams", "1,2"),
    "policy-sweep": ("policy-sweep", "tiny_kernel_stress", "--streams", "2"),
    "ebpf-attach": ("ebpf-attach", "--pid", str(os.getpid())),
    "ebpf-info": ("ebpf-info",),
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("bad", ["missing", "folder", "not_executable"])
def test_a_bad_bpftrace_is_one_line_exit_2(command: str, bad: str, tmp_path: Path) -> None:
    path = tmp_path / bad
    if bad == "folder":
        path.mkdir()
    elif bad == "not_executable":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    proc = run_cli_inprocess(*COMMANDS[command], "--bpftrace", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: --bpftrace {path}: not an executable regular file; give the path of bpftrace"
    )
    assert proc.stdout == ""


def test_a_bad_tracefs_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "missing", tmp_path / "empty", FIXTURES / "linux-6.8" / "events"):
        proc = run_cli_inprocess("ebpf-info", "--tracefs", str(bad))
        assert proc.returncode == 2
        assert proc.stderr.strip() == (
            f"error: --tracefs {bad}: no readable events/ folder; give a tracefs root "
            "(the folder holding events/)"
        )


# -- --state-dir DIR (was AORTA_STATE_DIR) ---------------------------------------------------------

#: the commands that read or write GPU state files, as the shortest command line that parses
STATE_COMMANDS = {
    "run": ("run", "tiny_kernel_stress", "--streams", "2"),
    "sweep": ("sweep", "tiny_kernel_stress", "--streams", "1,2"),
    "policy-sweep": ("policy-sweep", "tiny_kernel_stress", "--streams", "2"),
    "restore": ("restore",),
}


def test_the_old_state_dir_code_is_flagged() -> None:
    """The scan catches state.py as it was before --state-dir (it read AORTA_STATE_DIR)."""
    old = """    override = os.environ.get("AORTA_STATE_DIR")
    if override:
        return Path(override)"""
    assert env_reads(old) == ['environ.get("AORTA_STATE_DIR"', '"AORTA_STATE_DIR"']


def _state_record(folder: Path) -> Path:
    """A state file of a dead owner in `folder` whose tool field no restore may act on."""
    folder.mkdir(mode=0o700)
    path = folder / "gpu-nvidia-0.json"
    path.write_text(json.dumps({"state_version": 1, "vendor": "nvidia", "index": 0, "tool": "bogus"}))
    return path


def test_aorta_state_dir_is_ignored_and_state_dir_is_used(tmp_path: Path) -> None:
    planted = _state_record(tmp_path / "from-env")
    ignored = run_cli_inprocess(
        "restore",
        "--json",
        "--state-dir",
        str(tmp_path / "mine"),
        env={"AORTA_STATE_DIR": str(planted.parent)},
    )
    assert ignored.returncode == 0, ignored.stderr
    assert json.loads(ignored.stdout) == {
        "kind": "restore",
        "state_dir": str(tmp_path / "mine"),
        "outcomes": [],
    }
    used = run_cli_inprocess("restore", "--json", "--state-dir", str(planted.parent))
    assert used.returncode == 3, used.stderr  # the file there was read (and refused: bad tool)
    (outcome,) = json.loads(used.stdout)["outcomes"]
    assert outcome["state_file"] == str(planted) and outcome["status"] == "error"
    assert "tool 'bogus'" in outcome["message"]
    assert planted.exists()


def test_a_relative_bpftrace_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As --state-dir: a sweep point started in its private folder gets a path that still names it."""
    from aorta.ebpf.session import check_bpftrace

    _fake_bpftrace(tmp_path / "bin", "exit 0")
    monkeypatch.chdir(tmp_path)
    assert check_bpftrace("bin/bpftrace") == str(tmp_path / "bin" / "bpftrace")


def test_a_relative_state_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweep points run in their own folder: the value they are passed must not depend on it."""
    from aorta.hw_queue_eval.gpu.state import check_state_dir

    monkeypatch.chdir(tmp_path)
    assert check_state_dir("state") == str(tmp_path / "state")


def test_sweeps_pass_state_dir_to_their_points() -> None:
    from aorta.hw_queue_eval.commands._options import PASSTHROUGH_FLAGS, passthrough_args
    from aorta.hw_queue_eval.commands.policy import policy_sweep_command
    from aorta.hw_queue_eval.commands.sweep import sweep_command

    assert "state_dir" in PASSTHROUGH_FLAGS
    for command in (sweep_command, policy_sweep_command):
        assert "state_dir" in {p.name for p in command.params}, command.name
    assert passthrough_args({"ebpf_trace": False, "state_dir": "/var/lib/x"}) == ["--state-dir", "/var/lib/x"]


@pytest.mark.slow
def test_a_sweep_hands_state_dir_to_its_points(tmp_path: Path) -> None:
    out, state = tmp_path / "s.json", tmp_path / "state"
    proc = run_cli_inprocess(
        *STATE_COMMANDS["sweep"][:3], "1", "-i", "2", "-w", "1", "-d", "cpu", "--size", "small",
        "--state-dir", str(state), "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["flags"] == ["--state-dir", str(state)]
    assert [p["status"] for p in data["points"]] == ["ok"]


@pytest.mark.parametrize("command", list(STATE_COMMANDS))
@pytest.mark.parametrize("bad", ["file", "link", "empty"])
def test_a_bad_state_dir_is_one_line_exit_2(command: str, bad: str, tmp_path: Path) -> None:
    path = tmp_path / bad
    if bad == "file":
        path.write_text("not a folder")
    elif bad == "link":
        (tmp_path / "real").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "real")
    value = "" if bad == "empty" else str(path)
    proc = run_cli_inprocess(*STATE_COMMANDS[command], "--state-dir", value)
    assert proc.returncode == 2
    expected = (
        "error: --state-dir: give a folder path"
        if bad == "empty"
        else f"error: --state-dir {path} is a symbolic link or not a folder; remove it or give another folder"
    )
    assert proc.stderr.strip() == expected
    assert proc.stdout == ""


@pytest.mark.parametrize("plant", ["other_owner", "world_writable", "writable_parent", "in_writable_folder"])
def test_root_refuses_a_state_dir_another_user_can_change(tmp_path: Path, plant: str) -> None:
    """As root the state folder holds files root acts on (restore runs vendor tools with their
    values): it, the folder it is to be made in, and every folder above must be beyond other
    users, or the command stops with one line, exit 2, before any work."""
    if os.geteuid() != 0:
        unavailable("needs root: the check is root's", "CI runs as root: the root check must run")
    parent = tmp_path / "planted"
    parent.mkdir(mode=0o700)
    state = parent / "state"
    if plant == "in_writable_folder":  # not there yet: it would be made in a folder others can write
        parent.chmod(0o777)
    else:
        state.mkdir(mode=0o700)
    if plant == "other_owner":
        os.chown(state, NOBODY, NOBODY)
    elif plant == "world_writable":
        state.chmod(0o777)
    elif plant == "writable_parent":
        parent.chmod(0o777)
    for command in STATE_COMMANDS.values():
        proc = run_cli_inprocess(*command, "--state-dir", str(state), env={"SUDO_UID": ""})
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "--state-dir" in lines[0] and "another user" in lines[0], proc.stderr
        assert proc.stdout == ""
    parent.chmod(0o700)
    if state.exists():
        os.chown(state, 0, 0)
        state.chmod(0o700)
    trusted = run_cli_inprocess("restore", "--state-dir", str(state), env={"SUDO_UID": ""})
    assert trusted.returncode == 0, trusted.stderr  # the same folder, root's alone: used
    assert f"nothing to restore: no state files in {state}" in trusted.stdout


# -- one module reads the environment ---------------------------------------------------------------

ENV_MODULE = SRC / "aorta" / "common" / "environment.py"
_OS_ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def os_env_uses(text: str) -> list[str]:
    """Each `os.environ` / `os.getenv` … (or `from os import environ`) in the source `text`."""
    import ast

    found = []
    for node in ast.walk(ast.parse(text)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _OS_ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            found.append(f"line {node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [
                f"line {node.lineno}: from os import {a.name}" for a in node.names if a.name in _OS_ENV_NAMES
            ]
    return found


def test_only_the_environment_module_touches_os_environ() -> None:
    hits = {
        str(path.relative_to(SRC)): os_env_uses(path.read_text(encoding="utf-8"))
        for path in SRC.rglob("*.py")
        if path != ENV_MODULE
    }
    assert {path: found for path, found in hits.items() if found} == {}, (
        "read the environment through aorta.common.environment (declare the variable there)"
    )


def test_the_environment_scan_catches_each_form() -> None:
    for code in (
        "x = os.environ.get('A')",
        "x = os.getenv('A')",
        "os.environ['A'] = '1'",
        "from os import environ",
        "env = {**os.environ}",
    ):
        assert os_env_uses(code), code
    assert os_env_uses("env = environment.snapshot()") == []


def test_every_variable_read_by_name_is_declared() -> None:
    """environment.get("X") anywhere in src names a declared variable (a KeyError at run time
    otherwise, which this finds before a user does)."""
    import ast

    from aorta.common import environment

    names = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "from aorta.common import environment" not in text:
            continue  # `environment` there is something else (a result's environment section)
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "environment"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                names.add(node.args[0].value)
    assert {"SUDO_UID", "XDG_STATE_HOME", "TORCHELASTIC_RUN_ID"} <= names
    assert names <= set(environment.DECLARED), names - set(environment.DECLARED)
    with pytest.raises(KeyError, match="not declared"):
        environment.get("LD_PRELOAD")

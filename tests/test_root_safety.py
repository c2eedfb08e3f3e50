"""Root safety (issue 10, part A): what an unprivileged local user plants must not change what
root imports, executes or writes, and what root trusts.

The attacker is user nobody (uid 65534), acting through `setpriv --reuid=65534 --regid=65534
--clear-groups`; root runs aorta. Each test reproduces the attack and checks it fails; a control
shows the plant would have worked where that is cheap (a test that cannot fail proves nothing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aorta.common.procs import child_environment, python_module_command
from conftest import load_json, run_cli_inprocess, unavailable

NOBODY = 65534
SETPRIV = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
TINY = ("-i", "2", "-w", "1", "-d", "cpu", "--size", "small")
#: Modules a child imports early (click, json, argparse…), or that Python imports by itself
#: (sitecustomize, usercustomize), or our own package name.
PLANTED = (
    "click",
    "json",
    "argparse",
    "numpy",
    "torch",
    "sitecustomize",
    "usercustomize",
    "rich",
    "typing_extensions",
)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="the attacker is another user: needs root and setpriv",
)


def as_nobody(*argv: str) -> None:
    """Run a command as user nobody (the attacker); it must succeed."""
    subprocess.run([*SETPRIV, *argv], check=True, capture_output=True, timeout=60)


def nobody_folder(path: Path) -> Path:
    """A folder owned by nobody (as a user's own folder, or one in a shared /tmp)."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o755)
    return path


def plant_modules(folder: Path, markers: Path, staging: Path, package: bool = True) -> None:
    """As nobody, plant modules that leave a marker file when imported (as root, in the test);
    `package`: an aorta/ package too (no check inside aorta can defend against that one)."""
    body = textwrap.dedent(f"""\
        import os
        open(os.path.join({str(markers)!r}, __name__ + '-' + str(os.getuid())), 'w').close()
        raise ImportError('planted module imported')
        """)
    staging.mkdir(parents=True)
    for name in PLANTED:
        (staging / f"{name}.py").write_text(body)
    if package:
        (staging / "aorta").mkdir()
        (staging / "aorta" / "__init__.py").write_text(body)
        os.chmod(staging / "aorta", 0o755)
    as_nobody("cp", "-r", f"{staging}/.", str(folder))


@pytest.fixture
def world():
    """A folder every user can reach (pytest's tmp folders and the per-test TMPDIR are private to
    root): a fresh one in the shared /tmp, removed afterwards."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="aorta-i10-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def planted(world: Path) -> tuple[Path, Path]:
    """(a nobody-owned working folder full of planted modules, the folder of markers)."""
    markers = world / "markers"
    markers.mkdir()
    cwd = nobody_folder(world / "shared")
    plant_modules(cwd, markers, world / "staging")
    assert (cwd / "click.py").stat().st_uid == NOBODY
    return cwd, markers


def aorta_isolated(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """The aorta CLI started as README's entry point does: nothing imported from the cwd.

    PYTHONPATH points at the planted folder too: a user-writable search path must not reach
    the children either.
    """
    full = {**os.environ, "PYTHONPATH": f"{cwd}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    return subprocess.run(
        python_module_command("aorta.hw_queue_eval", *args),
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- 1. no imports from the working directory or PYTHONPATH in any child ------------------------


@needs_root
def test_control_plain_python_m_imports_the_planted_module(planted):
    cwd, markers = planted
    for module in ("aorta.hw_queue_eval", "aorta.tools.memory_pressure"):  # what children used to run
        subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert os.listdir(markers), "the plant must work on the unsafe launch"


@needs_root
def test_entry_point_imports_nothing_from_the_cwd(planted):
    cwd, markers = planted
    entry = Path(sys.executable).parent / "aorta-hwq"
    if not entry.exists():
        pytest.skip("no aorta-hwq entry point next to this interpreter")
    proc = subprocess.run(
        [str(entry), "--version"], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(markers)) == []


@needs_root
@pytest.mark.parametrize("mode", [0o755, 0o777], ids=["0755", "0777"])
def test_root_python_m_drops_the_cwd_entry(world, mode):
    """`sudo python -m aorta.hw_queue_eval …` (the guide's form): the cwd that -m puts first on
    sys.path is dropped before any third-party import; a warning when others can write there."""
    markers = world / "markers"
    markers.mkdir()
    cwd = nobody_folder(world / "shared")
    plant_modules(cwd, markers, world / "staging", package=False)
    os.chmod(cwd, mode)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the cwd is the only way in
    proc = subprocess.run(
        [sys.executable, "-m", "aorta.hw_queue_eval", "list"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hetero_kernels" in proc.stdout
    assert sorted(os.listdir(markers)) == []  # neither click.py nor rich.py nor json.py ran
    warned = f"warning: running as root from {cwd}, a folder other users can write" in proc.stderr
    assert warned == bool(mode & 0o002)


def test_only_the_cwd_entry_of_python_m_is_dropped(monkeypatch, tmp_path):
    """A script's folder, -c's '' and every other entry stay; nothing changes for other users."""
    import aorta

    cwd = str(tmp_path)
    monkeypatch.chdir(tmp_path)
    cases = [
        (0, "-m", [cwd, "/lib/site"], ["/lib/site"]),  # root, python -m: the cwd entry goes
        (0, "-m", ["/venv/bin", cwd], ["/venv/bin", cwd]),  # not first: not -m's entry
        (0, "-c", ["", "/lib/site"], ["", "/lib/site"]),  # -c means to import from the cwd
        (0, "/venv/bin/aorta-hwq", ["/venv/bin"], ["/venv/bin"]),  # the entry point
        (1000, "-m", [cwd, "/lib/site"], [cwd, "/lib/site"]),  # not root: as before
    ]
    for euid, argv0, path, kept in cases:
        monkeypatch.setattr(os, "geteuid", lambda euid=euid: euid)
        monkeypatch.setattr(sys, "argv", [argv0])
        monkeypatch.setattr(sys, "path", list(path))
        aorta._drop_cwd_entry_as_root()
        assert sys.path == kept, (euid, argv0, path)


@needs_root
@pytest.mark.slow
def test_sweep_children_import_nothing_from_cwd_or_pythonpath(planted, tmp_path):
    cwd, markers = planted
    out = tmp_path / "s.json"
    proc = aorta_isolated("sweep", "hetero_kernels", "--streams", "1,2", *TINY, "-o", str(out), cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert [p["status"] for p in load_json(out)["points"]] == ["ok", "ok"]
    assert sorted(os.listdir(markers)) == []


@needs_root
@pytest.mark.slow
def test_policy_sweep_children_import_nothing_from_cwd_or_pythonpath(planted, tmp_path):
    cwd, markers = planted
    out = tmp_path / "p.json"
    proc = aorta_isolated(
        "policy-sweep",
        "hetero_kernels",
        "--streams",
        "2",
        "--policies",
        "baseline,multi_tenant_fair",
        *TINY,
        "-o",
        str(out),
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    points = load_json(out)["points"]
    assert [p["status"] for p in points] == ["ok", "ok"]
    assert points[1]["in_effect"]["queue_pool_size"] == 2  # the policy env still reaches it
    assert sorted(os.listdir(markers)) == []


CHURN_CHECK = """
import os, time

def churning(pid):
    # churn() opened the file a second time (/dev/fd/N): imports done, aorta code running
    try:
        fds = os.listdir(f'/proc/{pid}/fd')
        return sum('.aorta-churn-' in os.readlink(f'/proc/{pid}/fd/{fd}') for fd in fds) >= 2
    except OSError:
        return False

me = os.getppid()
deadline = time.monotonic() + 60
alive = 0
while not alive and time.monotonic() < deadline:  # the churner starts beside this command
    time.sleep(0.02)
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
            stat = open(f'/proc/{pid}/stat').read()
        except OSError:
            continue
        if b'--churn-worker' in argv and int(stat[stat.rfind(')') + 2:].split()[1]) == me \\
                and churning(pid):
            alive += 1
print('churners', alive)
"""


@pytest.mark.slow
@needs_root
def test_pressure_churner_imports_nothing_from_cwd(planted, tmp_path):
    cwd, markers = planted
    churn_dir = tmp_path / "churn"
    churn_dir.mkdir()
    proc = subprocess.run(
        python_module_command(
            "aorta.tools.memory_pressure",
            "--limit",
            "256M",
            "--churn",
            "8M",
            "--churn-dir",
            str(churn_dir),
            "--",
            sys.executable,
            "-I",
            "-c",
            CHURN_CHECK,
        ),
        cwd=cwd,
        env={**child_environment(), "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode == 2 and "cgroup" in proc.stderr:
        pytest.skip(f"no usable memory cgroup here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "churners 1" in proc.stdout, "the churner must be running (it ran aorta code)"
    assert sorted(os.listdir(markers)) == []


def test_child_command_is_isolated_and_drops_python_variables():
    argv = python_module_command("aorta.hw_queue_eval", "run")
    assert argv[:3] == [sys.executable, "-I", "-c"]
    assert Path(argv[4]).name == "aorta"
    assert argv[5:] == ["aorta.hw_queue_eval", "run"]
    env = child_environment(
        {"GPU_MAX_HW_QUEUES": "2"}, base={"PYTHONPATH": "/tmp/x", "PYTHONSTARTUP": "/tmp/y", "HOME": "/r"}
    )
    from aorta.common.caches import passwd_home, private_cache_env

    assert env == {"HOME": passwd_home(), "GPU_MAX_HW_QUEUES": "2", **private_cache_env({})}


# -- 3. no writes through a folder link another user planted -------------------------------------


@pytest.fixture
def planted_link(world: Path) -> tuple[Path, Path]:
    """(nobody's link /…/x/results → a root-only folder, that root-only folder)."""
    secret = world / "root-only"
    secret.mkdir(mode=0o700)
    shared = nobody_folder(world / "x")
    as_nobody("ln", "-s", str(secret), str(shared / "results"))
    return shared / "results", secret


STATE = ("--state-dir", "{state}")  # never the machine's /var/lib/aorta
LINKED_OUTPUT_CASES = [
    ("run", "hetero_kernels", "--streams", "1", *TINY, *STATE, "-o", "{link}/out.json"),
    ("run", "hetero_kernels", "--streams", "1", *TINY, *STATE, "--trace-out", "{link}/t.json"),
    ("sweep", "hetero_kernels", "--streams", "1", *TINY, *STATE, "-o", "{link}/s.json"),
    ("policy-sweep", "hetero_kernels", "--streams", "1", *TINY, *STATE, "-o", "{link}/p.json"),
    ("compare", "-b", "{fixture}", "-t", "{fixture}", "-o", "{link}/c.json"),
    ("report", "{fixture}", "-o", "{link}/rep"),
    ("report", "{fixture}", "-o", "{link}"),
    ("list", "-o", "{link}/l.json"),
    ("restore", *STATE, "-o", "{link}/r.json"),
]


@needs_root
@pytest.mark.parametrize("argv", LINKED_OUTPUT_CASES, ids=lambda a: " ".join(a[:3]))
def test_no_write_through_a_planted_folder_link(planted_link, tmp_path, argv):
    link, secret = planted_link
    fixture = tmp_path / "base.json"  # outputs are checked before inputs are read
    fixture.write_text("{}")
    args = [a.format(link=link, fixture=fixture, state=tmp_path / "state") for a in argv]
    proc = run_cli_inprocess(*args, env={"SUDO_UID": ""})
    assert proc.returncode == 2, proc.stderr
    assert "could have planted" in proc.stderr or "symbolic link" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert os.listdir(secret) == []


def test_trusted_links_are_still_followed(tmp_path):
    from aorta.common.atomicio import atomic_write_json

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "mine").symlink_to(real)  # made by this user in a folder only it can write
    os.chmod(tmp_path, 0o755)
    atomic_write_json(tmp_path / "mine" / "sub.json", {"ok": 1})
    assert json.loads((real / "sub.json").read_text()) == {"ok": 1}


@needs_root
def test_the_invoking_users_own_link_is_followed_under_sudo(world, monkeypatch):
    """`sudo aorta-hwq run -o ~/results/r.json` with ~/results the user's own link: followed;
    the same link is refused when that user is not the one who ran sudo."""
    from aorta.common.atomicio import atomic_write_json
    from aorta.common.errors import UsageError

    real = world / "real"
    real.mkdir()
    home = nobody_folder(world / "home")
    as_nobody("ln", "-s", str(real), str(home / "results"))
    monkeypatch.setenv("SUDO_UID", "")
    with pytest.raises(UsageError, match="could have planted"):
        atomic_write_json(home / "results" / "r.json", {})
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    atomic_write_json(home / "results" / "r.json", {"ok": 1})
    assert json.loads((real / "r.json").read_text()) == {"ok": 1}


@pytest.mark.slow
@needs_root
def test_report_folder_race_with_a_planted_link(world):
    """nobody keeps swapping the report folder for a link to a root-only folder while root
    writes reports into it: nothing may ever land in the root-only folder."""
    from aorta.common.atomicio import OutputFolder
    from aorta.common.errors import UsageError

    secret = world / "root-only"
    secret.mkdir(mode=0o700)
    shared = nobody_folder(world / "shared")
    target = shared / "rep"
    racer = subprocess.Popen(
        [
            *SETPRIV,
            "sh",
            "-c",
            f"while :; do ln -s {secret} {target} "
            f"2>/dev/null; rm -f {target} 2>/dev/null; rmdir {target} "
            "2>/dev/null; done",
        ]
    )
    tries = refused = 0
    try:
        for _ in range(300):
            tries += 1
            try:
                with OutputFolder(target, "report folder") as folder:
                    folder.write_text("index.html", "<p>report</p>")
            except UsageError:
                refused += 1
            if target.is_dir() and not target.is_symlink():  # root's own report: start again
                shutil.rmtree(target, ignore_errors=True)
    finally:
        racer.kill()
        racer.wait()
    assert os.listdir(secret) == [], f"written through the link ({tries} tries)"
    assert tries == 300, "the race never happened: the test proves nothing"
    assert refused > 0, "the race never happened: the test proves nothing"


# -- 5. planted checkpoints ----------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("plant", ["owner", "mode"])
def test_resume_refuses_a_checkpoint_root_does_not_trust(tmp_path, plant):
    out = tmp_path / "s.json"
    out.write_text(json.dumps({"kind": "sweep", "fingerprint": "x", "points": []}))
    if plant == "owner":
        os.chown(out, NOBODY, NOBODY)
    else:
        os.chmod(out, 0o666)
    proc = run_cli_inprocess(
        "sweep", "hetero_kernels", "--streams", "1", *TINY, "-o", str(out), "--resume", env={"SUDO_UID": ""}
    )
    assert proc.returncode == 2, proc.stderr
    assert ("belongs to user 65534" if plant == "owner" else "writable by every user") in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@needs_root
def test_resume_accepts_the_invoking_users_checkpoint(tmp_path):
    out = tmp_path / "s.json"
    out.write_text(json.dumps({"kind": "sweep", "fingerprint": "x", "points": []}))
    os.chown(out, NOBODY, NOBODY)
    proc = run_cli_inprocess(
        "sweep",
        "hetero_kernels",
        "--streams",
        "1",
        *TINY,
        "-o",
        str(out),
        "--resume",
        env={"SUDO_UID": str(NOBODY)},
    )
    assert proc.returncode == 2
    assert "other settings" in proc.stderr  # got past the owner check


@pytest.mark.parametrize("plant", ["other_owner", "world_writable", "writable_folder"])
@pytest.mark.parametrize("option", ["--bpftrace", "--tracefs"])
def test_root_refuses_a_bpftrace_or_tracefs_another_user_can_change(tmp_path, plant, option):
    """--bpftrace names the binary root runs, --tracefs the formats root renders programs from:
    as root either must be beyond other users, or the command stops with one line, exit 2."""
    if os.geteuid() != 0:
        unavailable("needs root: the check is root's", "CI runs as root: the root check must run")
    from conftest import run_cli

    folder = tmp_path / "planted"
    folder.mkdir(mode=0o755)
    if option == "--bpftrace":
        target = folder / "bpftrace"
        target.write_text("#!/bin/sh\necho 'bpftrace v0.17.0'\n")
        target.chmod(0o755)
    else:
        target = folder / "tracefs"
        shutil.copytree(Path(__file__).parent / "fixtures" / "tracefs" / "linux-6.8", target)
    if plant == "other_owner":
        os.chown(target, 65534, 65534)
    elif plant == "world_writable":
        target.chmod(0o777)
    else:
        folder.chmod(0o777)
    proc = run_cli("ebpf-info", option, str(target), timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "another user" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    folder.chmod(0o755)
    if plant != "writable_folder":
        os.chown(target, 0, 0)
        target.chmod(0o755)
    assert run_cli("ebpf-info", option, str(target), timeout=120).returncode == 0  # trusted: used

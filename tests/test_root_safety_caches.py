"""Root safety (issue 21, items 1 and 3): another user's cache folder or HOME never reaches root.

1. torch compile (and triton, torch extensions, the GPU JITs) keep compiled code in folders under
   TMPDIR and HOME by default; a folder another user made there first must never be written or
   loaded by root (common/caches.py). 3. torchrun ranks never import `usercustomize` from another
   user's HOME (sweeps/childrun.py point_command, procs.child_environment).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aorta.common.caches import CACHE_VARIABLES, passwd_home, private_cache_env
from aorta.common.procs import child_environment, python_module_command
from aorta.hw_queue_eval.sweeps.childrun import point_command
from conftest import load_json, run_cli_inprocess
from test_root_safety import NOBODY, TINY, as_nobody, needs_root

CACHE_AND_TMP = (*CACHE_VARIABLES, "TMPDIR")


@pytest.fixture
def shared_tmp():
    """A sticky folder every user can write, as /tmp (pytest's own folders are root's only)."""
    path = Path(tempfile.mkdtemp(prefix="aorta-i21-", dir="/tmp"))
    os.chmod(path, 0o1777)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def nobody_made(path: Path, mode: int = 0o777) -> Path:
    """A folder user nobody made (mkdir as nobody), with `mode`."""
    as_nobody("mkdir", "-p", "-m", f"{mode:o}", str(path))
    assert path.stat().st_uid == NOBODY
    return path


def without_caches(**extra: str) -> dict[str, str]:
    """This environment without any cache variable (as a user's shell), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_AND_TMP}
    return {**env, **extra}


def assert_private(path: str) -> None:
    st = os.stat(path)
    assert st.st_uid == os.geteuid() and not st.st_mode & 0o022, (path, oct(st.st_mode))


# -- 1. private cache folders ------------------------------------------------------------------


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "sweep"])  # sweep: its point's child, as policy-sweep's
def test_torch_compile_never_writes_or_loads_a_planted_inductor_cache(shared_tmp, tmp_path, command):
    planted = nobody_made(shared_tmp / "torchinductor_root")  # the default folder, made first
    home = nobody_made(shared_tmp / "home")  # HOME another user's (sudo -E, su without -)
    out = tmp_path / "r.json"
    proc = subprocess.run(
        python_module_command(
            "aorta.hw_queue_eval", command, "torch_compile", "--streams", "4", *TINY, "-o", str(out)
        ),
        env=without_caches(TMPDIR=str(shared_tmp), HOME=str(home)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = load_json(out)
    assert (result["points"][0] if command == "sweep" else result)["status"] == "ok"
    assert os.listdir(planted) == [], "root wrote into (so would load from) nobody's cache folder"
    assert os.listdir(home) == [], "root wrote a cache into another user's HOME"


@needs_root
@pytest.mark.parametrize("variable", ["TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME"])
@pytest.mark.parametrize(
    "plant", ["nobody's folder", "root's folder, mode 777", "under nobody's folder", "nobody's link"]
)
def test_a_cache_folder_another_user_can_change_is_refused(shared_tmp, tmp_path, variable, plant):
    if plant == "nobody's folder":
        given = nobody_made(shared_tmp / "c", 0o755)
    elif plant == "root's folder, mode 777":
        given = shared_tmp / "c"
        given.mkdir()
        os.chmod(given, 0o777)
    elif plant == "under nobody's folder":
        given = nobody_made(shared_tmp / "n") / "c"  # root would make it in a folder nobody controls
    else:
        secret = tmp_path / "root-only"
        secret.mkdir(mode=0o700)
        given = nobody_made(shared_tmp / "n") / "c"
        as_nobody("ln", "-s", str(secret), str(given))
    proc = run_cli_inprocess(
        "run",
        "torch_compile",
        "--streams",
        "4",
        *TINY,
        "-o",
        str(tmp_path / "r.json"),
        env={variable: str(given)},
    )
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith(f"error: {variable} folder"), line
    assert line.endswith(f"or unset {variable}") and ("another user" in line or "user 65534" in line), line
    assert not (tmp_path / "r.json").exists()
    if plant == "under nobody's folder":
        assert not given.exists(), "root made a folder inside nobody's"


def test_every_cache_variable_names_a_private_folder(tmp_path):
    env = private_cache_env({"TMPDIR": "/tmp"})  # the shared /tmp is replaced, not used
    assert set(env) == set(CACHE_AND_TMP)
    for name in CACHE_AND_TMP:
        assert_private(env[name])
        assert not env[name].startswith("/tmp/"), name
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    kept = private_cache_env({"TMPDIR": str(mine), "TRITON_CACHE_DIR": str(tmp_path / "new" / "t")})
    assert kept["TMPDIR"] == str(mine)  # a private TMPDIR stays
    assert kept["TRITON_CACHE_DIR"] == str(tmp_path / "new" / "t")
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700  # made 0700, by root


def test_every_child_gets_private_caches_and_its_own_home(tmp_path):
    env = child_environment(
        {"GPU_MAX_HW_QUEUES": "2"},
        base={"PYTHONPATH": "/tmp/x", "HOME": "/home/someone", "TMPDIR": "/tmp", "PATH": "/usr/bin"},
    )
    assert env["HOME"] == passwd_home()
    assert env["GPU_MAX_HW_QUEUES"] == "2" and env["PATH"] == "/usr/bin" and "PYTHONPATH" not in env
    for name in CACHE_AND_TMP:
        assert_private(env[name])


# -- 3. torchrun ranks -----------------------------------------------------------------------


def test_ranks_start_isolated_with_this_package():
    argv = point_command(["hetero_kernels", "--streams", "1"], "/x/p.json", 2)
    rank = argv[argv.index("--no-python") + 1 :]
    assert argv[:4] == [sys.executable, "-I", "-m", "torch.distributed.run"]
    assert rank == python_module_command(
        "aorta.hw_queue_eval", "run", "hetero_kernels", "--streams", "1", "-o", "/x/p.json"
    )
    assert "-m" not in argv[argv.index("--nproc-per-node") :]  # torchrun's own `python -u -m` start


def site_venv(folder: Path) -> Path:
    """A venv with system site packages (as setup builds next to an existing torch): the user
    site of HOME is on, and this checkout's environment (torch, aorta) is reachable from it."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)],
        check=True,
        timeout=120,
    )
    site_dirs = list(folder.glob("lib/python*/site-packages"))
    ours = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_dirs[0] / "aorta_test_env.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours)
    )
    return folder / "bin" / "python"


@needs_root
@pytest.mark.slow
def test_ranks_never_import_usercustomize_from_a_foreign_home(shared_tmp, tmp_path):
    home = nobody_made(shared_tmp / "home")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    user_site = nobody_made(home / ".local" / "lib" / version / "site-packages")
    markers = shared_tmp / "markers"
    markers.mkdir()
    staging = shared_tmp / "usercustomize.py"
    staging.write_text(
        f"import os\nopen(os.path.join({str(markers)!r}, 'rank-' + str(os.getpid())), 'w').close()\n"
    )
    as_nobody("cp", str(staging), str(user_site / "usercustomize.py"))
    python = site_venv(tmp_path / "venv")
    env = without_caches(HOME=str(home))
    env.pop("PYTHONPATH", None)
    subprocess.run([str(python), "-c", "pass"], env=env, check=True, timeout=60)
    assert os.listdir(markers), "control: a plain start of this interpreter imports the plant"
    for name in os.listdir(markers):
        os.unlink(markers / name)
    out = tmp_path / "s.json"
    ranks = ("--nproc-per-node", "2", "-o", str(out))
    driver = "import sys\nfrom aorta.hw_queue_eval.cli import main\nmain(sys.argv[1:])"
    proc = subprocess.run(
        [str(python), "-I", "-c", driver, "sweep", "hetero_kernels", "--streams", "1", *TINY, *ranks],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    point = load_json(out)["points"][0]
    assert point["status"] == "ok", point["error"]
    assert point["result"]["distributed"]["world_size"] == 2
    assert os.listdir(markers) == [], "a rank imported usercustomize from nobody's HOME"


def test_without_a_usable_home_the_caches_are_a_private_folder_of_this_run(tmp_path, monkeypatch):
    import aorta.common.caches as caches

    not_a_folder = tmp_path / "home"
    not_a_folder.write_text("")  # a passwd home that is a file (or missing, or another user's)
    monkeypatch.setattr(caches, "passwd_home", lambda: str(not_a_folder))
    env = private_cache_env({})
    root = Path(env["TORCHINDUCTOR_CACHE_DIR"]).parent
    assert root.name.startswith(f"aorta-cache-{os.getpid()}-") and root.parent == Path(tempfile.gettempdir())
    for name in CACHE_AND_TMP:
        assert_private(env[name])
        assert Path(env[name]).parent == root

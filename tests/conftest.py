"""Shared test fixtures: run the CLI as a real subprocess against this checkout's sources."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Subprocesses import this checkout's package, even when another copy is installed.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

# torch.compile's compiled-kernel cache: aorta points it at root's private ~/.cache/aorta
# (common/caches.py), one folder for the whole session, so the per-test TMPDIR below does not
# recompile per test.


# A terminal's Ctrl+C reaches a process whose SIGINT is at its default. pytest started in the
# background by a shell (`&`) or as a pytest-xdist worker has SIGINT ignored, and an ignored
# signal stays ignored across exec: Python then never raises KeyboardInterrupt, and every test
# that sends SIGINT to a run or a sweep would wait for an exit that cannot come (three timed out
# at 60 s under -n 4). A handler here is reset to the default in each process the tests start.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _signal_handlers() -> Any:
    """main() ignores SIGINT and SIGTERM once a command ends (common/interrupts.commit); a test
    calling it here must not leave them ignored: every process a later test starts would inherit
    the ignored SIGINT (see above)."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


#: the CLI with replaced collaborators (a fake GPU, a crashing point, a failing rank)
CLI_WITH_FAKES = Path(__file__).resolve().parent / "cli_with_fakes.py"


def cli_command(*fakes: str) -> list[str]:
    """argv of the CLI: `python -m aorta.hw_queue_eval`, or with `fakes` (cli_with_fakes.py
    options such as "--fake-gpu", "nvidia:0") the test entry point that injects them."""
    if not fakes:
        return [sys.executable, "-m", "aorta.hw_queue_eval"]
    return [sys.executable, str(CLI_WITH_FAKES), *fakes, "--"]


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: str | Path | None = None,
    fakes: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """`python -m aorta.hw_queue_eval ARGS` in a subprocess; returns the completed process.

    `fakes`: run it through cli_with_fakes.py with those options instead."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*cli_command(*fakes), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
        check=False,
    )


def run_cli_inprocess(
    *args: str, env: dict[str, str] | None = None, fakes: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`main(ARGS)` in this process, same exit code and streams as `run_cli`, without starting an
    interpreter: for tests of parsing, validation and their messages. Whatever needs a real
    process (signals, the child environment, cleanup of children, a run's own imports) keeps
    `run_cli`. An exception escaping main fails the test as a traceback would.

    `fakes`: cli_with_fakes.py options (e.g. "--fake-gpu", "nvidia:0"), passed as the same
    Collaborators that entry point would give main."""
    from click.testing import CliRunner

    from aorta.hw_queue_eval.cli import main
    from cli_with_fakes import parse

    collaborators, _ = parse([*fakes, "--"])
    # main installs its own SIGTERM handler and ignores both signals once the command is done
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    environ, tempdir = dict(os.environ), tempfile.tempdir  # main sets private caches (caches.py)
    with CliRunner().isolation(env=env) as (out, err, _both):
        try:
            main(list(args), collaborators)
            code: int = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.environ.clear()
            os.environ.update(environ)
            tempfile.tempdir = tempdir
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["aorta-hwq", *args], code, stdout, stderr)


def load_json(path: str | Path) -> Any:
    """Read a JSON file written by the tool."""
    return json.loads(Path(path).read_text())


@pytest.fixture
def cli():
    """The `run_cli` helper as a fixture."""
    return run_cli


@pytest.fixture
def ebpf_ready() -> None:
    """Real-eBPF tests: skip with the reason where impossible, fail when CI=true (ebpf_support)."""
    from ebpf_support import require_ebpf

    require_ebpf()


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own TMPDIR (inherited by its subprocesses), outside tmp_path: checks for
    leftover temp folders then see only this test's, never those of other runs on the machine."""
    folder = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _xdist_run_folder(config: pytest.Config) -> Path | None:
    """Inside a pytest-xdist worker, the run's own temp root (the parent of the worker's
    --basetemp, shared by every worker of this run, made by pytest for root); None otherwise."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Inside a pytest-xdist worker (`-n N`), a `serial` test runs (set-up, its module's fixtures,
    call, tear-down) while no other worker's test does (machine_share.py); other tests share the
    machine. A plain run is serial already."""
    folder = _xdist_run_folder(item.config)
    if folder is None:
        yield
        return
    from machine_share import machine_share

    alone = item.get_closest_marker("serial") is not None
    workers = int(getattr(item.config, "workerinput", {}).get("workercount", 1))
    with machine_share(folder, alone, workers):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure caused by the machine refusing a new process or thread (EAGAIN, several suites at
    once) becomes a skip with that reason; any other failure stays one. CI=true keeps it a failure."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed or item.get_closest_marker("resource_limits"):
        return
    from resource_limits import exhaustion_reason, frames_of

    reason = exhaustion_reason(call.excinfo.value, frames_of(call.excinfo))
    if reason is None:
        return
    if in_ci():
        report.sections.append(("resource exhaustion", f"{reason}: kept as a failure in CI"))
        return
    report.outcome = "skipped"
    report.longrepr = (
        str(item.path),
        (item.location[1] or 0) + 1,
        f"Skipped: resource exhaustion, not a test result: {reason}",
    )


def _stat_fields(stat_file: Path) -> list[str] | None:
    """The fields of a /proc …/stat file after the command name (field 3, the state, first);
    None when it cannot be read (the process or thread is gone)."""
    try:
        stat = stat_file.read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _parents() -> dict[int, int]:
    """pid → parent pid of every process now."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry / "stat")) is not None:
            table[int(entry.name)] = int(fields[1])
    return table


def process_identity(pid: int) -> tuple[int, int] | None:
    """(pid, start time in clock ticks since boot) of process `pid`; None when there is none.
    With pid_max 32768 a busy suite reuses a pid within seconds: "is it still running?" must ask
    about this identity, not the bare pid (a sweep's dead child once read as alive that way)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return None if fields is None else (pid, int(fields[19]))  # field 22, starttime


def still_running(identity: tuple[int, int] | None) -> bool:
    """Whether that very process (same pid, same start time) runs; a zombie has ended."""
    if identity is None:
        return False
    fields = _stat_fields(Path(f"/proc/{identity[0]}/stat"))
    return fields is not None and fields[0] != "Z" and int(fields[19]) == identity[1]


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll `condition` every 5 ms until it holds; fail the test naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        time.sleep(0.005)


def process_tree(pid: int) -> set[int]:
    """`pid` and all its live descendants."""
    parents = _parents()
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def queue_thread_ticks(pid: int) -> int:
    """CPU time (clock ticks, user + system) of the CPU backend's queue threads (comm
    `aorta-hwq*`, as named by the backend) in process `pid`."""
    ticks = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("aorta-hwq"):
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14, 15)
    return ticks


#: Queue-thread CPU time that only measured iterations reach: a warm-up of a few iterations of a
#: small workload stays far below it, and the queue threads idle until the warm-up starts.
MEASURING_TICKS = 20


def wait_until_measuring(
    proc: subprocess.Popen[str],
    processes: int = 1,
    timeout: float = 120,
    ignore: set[int] | frozenset[int] = frozenset(),
) -> list[int]:
    """Block until `processes` benchmark processes in `proc`'s tree (minus `ignore`) are inside
    their measured iterations (queue threads past MEASURING_TICKS); their pids. Fails the test
    (killing `proc`) when `proc` ends first or `timeout` passes: a signal sent afterwards is known
    to land mid-measurement, not in start-up."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [p for p in process_tree(proc.pid) - set(ignore) if queue_thread_ticks(p) >= MEASURING_TICKS]
        if len(busy) >= processes:
            return busy
        if proc.poll() is not None or time.monotonic() > deadline:
            ended = proc.poll() is not None
            proc.kill()
            _out, err = proc.communicate(timeout=30)
            pytest.fail(
                f"{'ended' if ended else 'timed out'} before {processes} process(es) "
                f"were measuring (exit {proc.returncode}): {(err or '')[-2000:]}"
            )
        time.sleep(0.02)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything collection created (test items, torch, numpy, matplotlib …) out of the
    collector's reach: every in-process run makes two full collections (run/gcwindow.py), and
    each would otherwise walk this whole heap again (0.2–0.5 s per run in a full session). Only
    objects made before any test ran are frozen; each test's own garbage is collected as before.
    A pytest-xdist worker then says it has collected (machine_share.py: serial tests wait for all)."""
    gc.collect()
    gc.freeze()
    folder = _xdist_run_folder(session.config)
    if folder is not None:
        from machine_share import announce_collected

        announce_collected(folder, os.environ["PYTEST_XDIST_WORKER"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every real-eBPF test (marked `ebpf`, or asking for `ebpf_ready`) is also `slow`: starting
    bpftrace alone takes seconds, so the inner loop `-m "not slow"` leaves them to the full run.

    In a pytest-xdist worker, `serial` tests (timing ground truths that need the machine to
    themselves) go first, so they wait only for the workers' first tests rather than holding
    three workers idle in the middle of the run. A plain run keeps the collection order."""
    for item in items:
        if item.get_closest_marker("ebpf") or "ebpf_ready" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("serial") is None)  # stable: serial first


def in_ci() -> bool:
    """CI=true: what a test needs must be there (a skip would hide the test)."""
    return os.environ.get("CI", "").lower() == "true"


def load_file_module(path: Path) -> ModuleType:
    """A script or bench file (not a package module) imported by path, registered in sys.modules
    under its stem (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def unavailable(why: str, in_ci_why: str | None = None) -> NoReturn:
    """Skip locally, fail in CI: `why` names what is missing and how to get it."""
    if in_ci():
        pytest.fail(in_ci_why or f"{why} (required in CI)")
    pytest.skip(why)


CHILD_CPU_BUDGET_S = 1.0  # an interpreter that imports torch alone takes 1.5-1.8 s of CPU here
_CHILD_CPU_LOG = os.environ.get("AORTA_TEST_CHILD_CPU_LOG")  # a file: list offenders, don't fail


@pytest.fixture(autouse=True)
def _heavy_children_only_in_slow_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test whose child processes use more than CHILD_CPU_BUDGET_S of CPU (a torch import, a
    real run) must be marked `slow`, so the inner loop `-m "not slow"` stays fast: measured, not
    guessed, from the CPU time of the children it waited for."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    before = children_cpu_s()
    yield
    verdict = child_cpu_verdict(children_cpu_s() - before)
    if verdict and _CHILD_CPU_LOG:
        with open(_CHILD_CPU_LOG, "a") as log:
            log.write(f"{request.node.nodeid}\t{verdict}\n")
    elif verdict:
        pytest.fail(verdict)


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_cpu_verdict(used_s: float) -> str | None:
    """Why a test not marked slow whose children used `used_s` CPU seconds fails, or None."""
    if used_s <= CHILD_CPU_BUDGET_S:
        return None
    return (
        f"its child processes used {used_s:.1f} s of CPU (budget {CHILD_CPU_BUDGET_S} s outside "
        "`slow`): mark it @pytest.mark.slow"
    )


def vendor_library(key: str) -> Path:
    """The real vendor library `key` (tests/vendor_libs.py: cudart, nccl, amdhip64, …) fetched
    by `setup.sh --test`; skip locally, fail in CI when it is not there."""
    import vendor_libs

    path = vendor_libs.library(key)
    if path is None:
        unavailable(
            f"real {key} library not fetched (python tests/vendor_libs.py {key})",
            f"CI needs the real {key} library: run scripts/setup.sh --test",
        )
    return path

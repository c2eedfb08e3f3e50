"""Bad input on the command line: one line naming the problem, exit 2, no traceback, no work."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from aorta.common.procs import process_state
from aorta.hw_queue_eval.cli import main

BAD_ARGS = [
    (["run", "hetero_kernels", "--streams", "1", "--seed", str(1 << 64)], "64 bits"),
    (["run", "hetero_kernels", "--streams", "1", "--seed", str(-(1 << 63) - 1)], "64 bits"),
    (["run", "hetero_kernels", "--streams", "1", "--threads-per-queue", "100000"], "CPUs"),
    (["sweep", "hetero_kernels", "-s", "1", "--threads-per-queue", "100000"], "CPUs"),
    (["sweep", "hetero_kernels", "-s", "1", "--timeout", "inf"], "--timeout"),
    (["sweep", "hetero_kernels", "-s", "1", "--timeout", "1e400"], "--timeout"),
    (["sweep", "hetero_kernels", "-s", "1", "--timeout", "nan"], "--timeout"),
    (["policy-sweep", "hetero_kernels", "--streams", "1", "--timeout", "inf"], "--timeout"),
    (["policy-sweep", "hetero_kernels", "--streams", "1", "--repeats", "100000000000"], "--repeats"),
    (["compare", "-b", "{base}", "-t", "{base}", "--threshold", "inf"], "--threshold"),
    (["compare", "-b", "{base}", "-t", "{base}", "--threshold", "nan"], "--threshold"),
    (["run", "hetero_kernels", "--streams", "1", "-o", ""], "empty"),
    (["run", "hetero_kernels", "--streams", "1", "-d", ""], "empty"),
    (["run", "hetero_kernels", "--streams", "1", "--trace-out", ""], "empty"),
    (["sweep", "hetero_kernels", "-s", "1", "-o", ""], "empty"),
    (["sweep", "hetero_kernels", "-s", "1", "--trace-out", ""], "empty"),
    (["policy-sweep", "hetero_kernels", "--streams", "1", "-o", ""], "empty"),
    (["compare", "-b", "{base}", "-t", "{base}", "-o", ""], "empty"),
    (["report", "{base}", "-o", ""], "empty"),
    (["report", ""], "RESULT_FILE': is empty"),
    (["run", "hetero_kernels", "--streams", "1", "--dist-timeout", "60"], "under torchrun only"),
    (["run", "hetero_kernels", "--streams", "1", "--dist-timeout", "0"], "--dist-timeout must be"),
    (["sweep", "hetero_kernels", "-s", "1,2", "-d", "tpu"], "'tpu' is not known"),
    (["policy-sweep", "hetero_kernels", "--streams", "1", "--policies", ""], "empty"),  # ran the defaults
    (
        ["policy-sweep", "hetero_kernels", "--streams", "1", "--policy-file", "/dev/zero"],
        "not a regular file",
    ),
]


@pytest.mark.parametrize(
    ("args", "words"), BAD_ARGS, ids=lambda a: " ".join(a)[:60] if isinstance(a, list) else a
)
def test_bad_option_is_one_line_exit_2(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("{base}", "result.json") for a in args]  # the option is checked first
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert words in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def _exit(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def test_ebpf_attach_to_a_thread_names_its_process(capsys):
    code = (
        "import threading, time, sys\n"
        "def work():\n    print(threading.get_native_id(), flush=True); time.sleep(30)\n"
        "threading.Thread(target=work, daemon=True).start(); time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        tid = int(proc.stdout.readline())
        rc, _, err = _exit(["ebpf-attach", "--pid", str(tid), "--duration", "1s"], capsys)
        assert rc == 2
        assert f"is a thread of process {proc.pid}" in err
        assert len(err.strip().splitlines()) == 1
    finally:
        proc.kill()
        proc.wait()


def test_ebpf_attach_to_a_zombie_says_it_exited(capsys):
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while process_state(proc.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        rc, _, err = _exit(["ebpf-attach", "--pid", str(proc.pid), "--duration", "1s"], capsys)
        assert rc == 2
        assert "has exited" in err
    finally:
        proc.wait()


def test_state_dir_that_is_a_file_is_an_error(tmp_path, capsys):
    state = tmp_path / "state"
    state.write_text("not a folder")
    rc, out, err = _exit(["restore", "--state-dir", str(state)], capsys)
    assert rc == 2
    assert "not a folder" in err
    assert "nothing to restore" not in out
    rc, out, _ = _exit(["restore", "--state-dir", str(tmp_path / "absent")], capsys)
    assert rc == 0
    assert "nothing to restore" in out


def test_ebpf_info_show_script_honours_json_and_output(tmp_path, capsys):
    out = tmp_path / "script.json"
    rc, stdout, _ = _exit(["ebpf-info", "--show-script", "--json", "-o", str(out)], capsys)
    assert rc == 0
    printed, written = json.loads(stdout), json.loads(out.read_text())
    assert printed == written
    assert written["kind"] == "ebpf_script"
    assert written["program"] is None or "BEGIN" in written["program"]
    assert written["program"] is not None or written["error"]


def test_a_deeply_nested_policy_file_is_one_line(tmp_path, capsys):
    deep = tmp_path / "deep.toml"
    deep.write_text('[policies.x]\nenv = { A = "1" }\nx = ' + "[" * 2000 + "]" * 2000 + "\n")
    rc, _, err = _exit(
        ["policy-sweep", "hetero_kernels", "--streams", "1", "--policy-file", str(deep)], capsys
    )
    assert rc == 2, err
    assert "more than 16 deep" in err and len(err.strip().splitlines()) == 1


def test_a_huge_policy_file_is_refused_before_reading_it_all(tmp_path, capsys):
    huge = tmp_path / "huge.toml"
    huge.write_text("# " + "x" * (1 << 20) + "\n")
    rc, _, err = _exit(
        ["policy-sweep", "hetero_kernels", "--streams", "1", "--policy-file", str(huge)], capsys
    )
    assert rc == 2, err
    assert "larger than 256 KiB" in err


def test_toml_depth_skips_strings_and_comments():
    from aorta.hw_queue_eval.gpu.policies import toml_depth

    assert toml_depth('[policies.x]\nenv = { A = "[[[[" }  # [[[[') == 1
    assert toml_depth("a = '''[[[\n[['''\nb = [[1, [2]], {c = {d = 1}}]") == 3
    assert toml_depth('a = "\\"[["') == 0


@pytest.mark.parametrize("node", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_an_unbounded_or_blocking_input_file_is_refused(tmp_path, capsys, node, command):
    """/dev/zero was read without end, a FIFO blocked forever: only regular files are read."""
    import os

    path = node
    if node == "fifo":
        path = str(tmp_path / "in.json")
        os.mkfifo(path)
    args = (
        ["report", path, "-o", str(tmp_path / "rep")]
        if command == "report"
        else ["compare", "-b", path, "-t", path]
    )
    rc, _, err = _exit(args, capsys)
    assert rc == 2, err
    assert "is not a regular file" in err and len(err.strip().splitlines()) == 1

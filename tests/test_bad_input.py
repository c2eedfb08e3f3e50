"""Bad input on the command line: one line naming the problem, exit 2, no traceback, no work."""

from __future__ import annotations

import pytest

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
    (["policy-sweep", "hetero_kernels", "--streams", "1", "--repeats", "100000000000"],
     "--repeats"),
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
]


@pytest.mark.parametrize(("args", "words"), BAD_ARGS, ids=lambda a: " ".join(a)[:60]
                         if isinstance(a, list) else a)
def test_bad_option_is_one_line_exit_2(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.replace("{base}", "result.json") for a in args]  # the option is checked first
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # nothing written

"""Fuzz compare / report / --resume inputs: random JSON mutations of real result files.

The seeds are real files (tests/fixtures/results: a `run`, a 2-point `sweep` and a `policy-sweep`
of hetero_kernels on the CPU backend, checked below to still match the schema). Each case mutates
one to a few nodes (type swaps, deletions, huge or empty values, NaN, numbers that overflow to
infinity, subnormals, lone surrogates, thousands of copies of a point, deep nesting, junk lists)
and feeds the file to the command in-process. Allowed outcomes: exit 0/1 with output, or exit 2
with exactly one `error:` line. Any other exception (a traceback) fails the test and prints the
mutation. Every field of every seed is also given a value of another type in turn (`report`),
and mutated policy TOML files go to --policy-file. AORTA_FUZZ_SCALE multiplies the counts
(default: 1000 per reader; e.g. AORTA_FUZZ_SCALE=10 for a long hunt). Each case costs a few
milliseconds: the copy is a JSON round trip and the seed's node paths are listed once, not per
case; `report` encodes a sample of its PNGs only (the figures are built for every case).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from aorta.common.errors import UsageError
from aorta.hw_queue_eval.cli import main
from aorta.hw_queue_eval.results.validation import check_input
from aorta.hw_queue_eval.sweeps.checkpoint import CheckpointFile

SEEDS = Path(__file__).parent / "fixtures" / "results"
SCALE = float(os.environ.get("AORTA_FUZZ_SCALE", "1"))
DEEP = 5000

JUNK: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2.5,
    -1e308,
    1e308,
    10**30,
    -(10**30),
    "",
    "x",
    "4",
    "1e400",
    "NaN",
    [],
    {},
    [1, 2],
    ["a"],
    {"a": 1},
    {"p50": "1"},
    [[[[]]]],
    "\u202e<script>",
    5e-324,  # a subnormal: every ratio over it overflows to infinity
    -5e-324,
    1e-310,
    "\ud800",  # a lone surrogate (written as the escape \\ud800)
    "x\udfffy",
]
#: Raw-text mutations the JSON writer cannot make: numbers that overflow to infinity, and lone
#: surrogate escapes inside a string.
OVERFLOWS = ("1e999", "-1e999", "1.7976931348623159e308", "5e-324")


def _seed(name: str) -> dict[str, Any]:
    return json.loads((SEEDS / name).read_text())


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node[:6]):
            out.extend(_paths(value, (*prefix, index)))
    return out


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def mutate(doc: Any, rng: random.Random, paths: list[tuple] | None = None) -> tuple[Any, str, str | None]:
    """(mutated doc, description, raw JSON text override or None). `paths`: `_paths(doc)` when
    the caller already has it (the seeds'), so it is not walked again for every case."""
    seed_paths = paths if paths is not None else _paths(doc)
    doc = json.loads(json.dumps(doc))  # a deep copy of a JSON document, several times faster
    roll = rng.random()
    if roll < 0.03:
        return doc, "deeply nested text", "[" * 100_000 + "]" * 100_000
    if roll < 0.06:
        path = rng.choice(seed_paths[1:])
        doc = _set(doc, path, _deep(200))
        return doc, f"{path}: nested 200 deep", None
    if roll < 0.10:
        text = json.dumps(doc)
        text = text.replace(": 1,", ": NaN,", 1) if ": 1," in text else text.replace("1", "Infinity", 1)
        return doc, "NaN/Infinity token", text
    if roll < 0.14:  # a number of the file becomes one that overflows (or a subnormal)
        text = json.dumps(doc)
        numbers = [m.start() for m in re.finditer(r"(?<=: )-?[0-9][0-9.eE+-]*", text)]
        if numbers:
            at = rng.choice(numbers)
            end = re.match(r"-?[0-9][0-9.eE+-]*", text[at:]).end() + at
            big = rng.choice(OVERFLOWS)
            return doc, f"number at {at} = {big}", text[:at] + big + text[end:]
    if roll < 0.16:
        text = json.dumps(doc)
        quotes = [m.start() for m in re.finditer(r': "', text)]
        if quotes:
            at = rng.choice(quotes) + 3
            return doc, f"lone surrogate at {at}", text[:at] + "\\udc80" + text[at:]
    if roll < 0.19 and isinstance(doc.get("points"), list) and doc["points"]:
        copies = rng.choice((2, 3, 50, 50, 5000 if rng.random() < 0.1 else 500))
        doc["points"] = [copy.deepcopy(rng.choice(doc["points"]))] * copies + doc["points"]
        return doc, f"a point repeated {copies} times", None
    steps = []
    for step in range(rng.choice((1, 1, 1, 2, 3))):
        paths = seed_paths if step == 0 else _paths(doc)
        path = rng.choice(paths[1:] if len(paths) > 1 else paths)
        action = rng.random()
        if action < 0.25 and path:
            doc = _set(doc, path, None, delete=True)
            steps.append(f"del {path}")
        elif action < 0.40:
            old = _get(doc, path)
            value = str(old) if not isinstance(old, str) else (int(old) if old.isdigit() else [old])
            doc = _set(doc, path, value)
            steps.append(f"retype {path}")
        else:
            value = copy.deepcopy(rng.choice(JUNK))
            doc = _set(doc, path, value)
            steps.append(f"{path} = {str(value)[:30]}")
    return doc, "; ".join(steps), None


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _write(tmp: Path, name: str, doc: Any, raw: str | None) -> Path:
    path = tmp / name
    path.write_text(raw if raw is not None else json.dumps(doc))
    return path


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    captured = capsys.readouterr()
    code = info.value.code
    return code if isinstance(code, int) else 0, captured.err


def test_seeds_are_valid_results():
    for name in ("run.json", "sweep.json", "policy_sweep.json"):
        check_input(name, _seed(name))


def _fuzz(family: str, cases: int, run_case, tmp_path: Path) -> Counter:
    rng = random.Random(f"aorta-fuzz-{family}")
    tally: Counter = Counter()
    seeds = {n: _seed(n) for n in ("run.json", "sweep.json", "policy_sweep.json")}
    seed_paths = {n: _paths(doc) for n, doc in seeds.items()}
    for case in range(cases):
        name = (
            rng.choice(sorted(seeds))
            if family != "resume"
            else rng.choice(("sweep.json", "policy_sweep.json"))
        )
        doc, how, raw = mutate(seeds[name], rng, seed_paths[name])
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        try:
            outcome = run_case(folder, name, doc, raw)
        except Exception as exc:  # a traceback: report the mutation that caused it
            raise AssertionError(
                f"{family} case {case} ({name}: {how}) raised {type(exc).__name__}: {exc}"
            ) from exc
        tally[outcome] += 1
    print(f"{family}: {cases} cases, outcomes {dict(tally)}")
    return tally


@pytest.mark.slow
def test_fuzz_compare(tmp_path, capsys):
    def case(folder: Path, name: str, doc: Any, raw: str | None) -> str:
        mutated = _write(folder, name, doc, raw)
        original = SEEDS / name
        code, err = _cli(["compare", "-b", str(mutated), "-t", str(original), "--json"], capsys)
        assert code in (0, 1, 2), (code, err)
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith("error:"), err
        return f"exit {code}"

    tally = _fuzz("compare", int(1000 * SCALE), case, tmp_path)
    assert tally["exit 2"] > 0
    assert tally["exit 0"] + tally["exit 1"] > 0


def _cheap_png(monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """PNG encoding (most of a report's time) only for every `every`-th figure: the figures are
    still built from the data for every case, and drawn in full for a sample of them."""
    from aorta.hw_queue_eval.report import plots

    real, calls = plots.png_of, [0]

    def png(fig: Any) -> bytes:
        calls[0] += 1
        return real(fig) if calls[0] % every == 0 else b"\x89PNG\r\n\x1a\n"

    monkeypatch.setattr(plots, "png_of", png)


@pytest.mark.slow
def test_fuzz_report(tmp_path, capsys, monkeypatch):
    _cheap_png(monkeypatch, every=10)

    def case(folder: Path, name: str, doc: Any, raw: str | None) -> str:
        mutated = _write(folder, name, doc, raw)
        out = folder / "report"
        code, err = _cli(["report", str(mutated), "-o", str(out)], capsys)
        assert code in (0, 2), (code, err)
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1, err
            assert lines[0].startswith("error:"), err
        else:
            assert (out / "index.html").is_file()
        return f"exit {code}"

    tally = _fuzz("report", int(1000 * SCALE), case, tmp_path)
    assert tally["exit 2"] > 0
    assert tally["exit 0"] > 0


def _wrong_type(value: Any, index: int) -> Any:
    """A JSON value of another type than `value` (rotating over the kinds, by `index`)."""
    kinds: list[Any] = ["x", 1.5, 7, [], {}, True, None, ["a", 1], {"k": "v"}]
    for step in range(len(kinds)):
        candidate = kinds[(index + step) % len(kinds)]
        if type(candidate) is not type(value):
            return copy.deepcopy(candidate)
    return "x"


@pytest.mark.slow
def test_every_report_field_of_the_wrong_type(tmp_path, capsys, monkeypatch):
    """Each field of each seed (lists: their first items), in turn given a value of another
    type: `report` draws it or refuses it in one line, never a traceback (vs_baseline as a
    string was an AttributeError, env_mismatch as a number a TypeError)."""
    _cheap_png(monkeypatch, every=25)
    tally: Counter = Counter()
    for name in ("run.json", "sweep.json", "policy_sweep.json"):
        seed = _seed(name)
        for index, path in enumerate(_paths(seed)[1:]):
            doc = _set(json.loads(json.dumps(seed)), path, _wrong_type(_get(seed, path), index))
            folder = tmp_path / f"{name}-{index}"
            folder.mkdir()
            mutated = _write(folder, name, doc, None)
            try:
                code, err = _cli(["report", str(mutated), "-o", str(folder / "r")], capsys)
            except Exception as exc:
                raise AssertionError(f"{name} {path} of the wrong type: {type(exc).__name__}: {exc}") from exc
            assert code in (0, 2), (path, err)
            assert code == 0 or len(err.strip().splitlines()) == 1, (path, err)
            tally[code] += 1
    print(f"wrong types: {dict(tally)}")
    assert sum(tally.values()) >= 1000
    assert tally[0] > 0 and tally[2] > 0


@pytest.mark.slow
def test_fuzz_resume(tmp_path):
    def case(folder: Path, name: str, doc: Any, raw: str | None) -> str:
        mutated = _write(folder, name, doc, raw)
        seed = _seed(name)
        kind = seed["kind"]
        try:
            file = CheckpointFile.resume(mutated, kind, {"fingerprint": seed["fingerprint"]})
        except UsageError as exc:
            assert "\n" not in str(exc)
            return "refused"
        for point in seed["points"]:
            file.done(point["key"])  # the question --resume asks of every point
        file.to_dict()
        kept = len(file.points)
        assert all(p.get("status") != "ok" or isinstance(p.get("result"), dict) for p in file.points)
        dropped = sum("will be measured again" in note for note in file.notes)  # the CLI prints them
        return "all kept" if not dropped else f"redone {min(dropped, 3)}+" if kept else "all redone"

    tally = _fuzz("resume", int(1000 * SCALE), case, tmp_path)
    assert tally["refused"] > 0
    assert sum(v for k, v in tally.items() if k.startswith("redone")) > 0


def test_resume_redoes_an_ok_point_without_result(tmp_path):
    seed = _seed("sweep.json")
    seed["points"][0]["result"] = None
    path = tmp_path / "s.json"
    path.write_text(json.dumps(seed))
    file = CheckpointFile.resume(path, "sweep", {"fingerprint": seed["fingerprint"]})
    assert not file.done(seed["points"][0]["key"])
    assert file.done(seed["points"][1]["key"])
    (note,) = file.notes  # the command prints it; the library only returns it
    assert "will be measured again" in note


def test_sweep_resume_prints_the_points_it_redoes(tmp_path, capsys):
    """The library returns the note; the sweep command prints it (children fail at once)."""
    from aorta.hw_queue_eval.commands.collaborators import Collaborators

    def failing_child(run_args, out_path, nproc_per_node):
        return [sys.executable, "-I", "-c", "raise SystemExit(3)"]

    out = tmp_path / "s.json"
    args = ["sweep", "hetero_kernels", "-s", "1,2", "-d", "cpu", "-i", "2", "-w", "1", "-o", str(out)]
    seams = Collaborators(point_command=failing_child)
    with pytest.raises(SystemExit) as first:
        main(args, seams)
    assert first.value.code == 1
    data = json.loads(out.read_text())
    data["points"][0].update(status="ok", result=None)  # claims ok, holds nothing
    out.write_text(json.dumps(data))
    capsys.readouterr()
    with pytest.raises(SystemExit) as again:
        main([*args, "--resume"], seams)
    err = capsys.readouterr().err
    assert again.value.code == 1
    (line,) = [line for line in err.splitlines() if line.startswith("resume: point")]
    assert '"streams": 1' in line
    assert line.endswith("it will be measured again")


POLICY_SEED = Path(__file__).parent.parent / "examples" / "policies.toml"
TOML_JUNK = (
    "1",
    "-1",
    "1e999",
    "inf",
    "nan",
    "-inf",
    "99999999999999999999999",
    '""',
    '"x"',
    '"\\u202e"',
    "true",
    "[]",
    "[1, [2]]",
    "{}",
    '{ A = "1" }',
    "1979-05-27T07:32:00Z",
    "'''multi\nline'''",
)


def mutate_toml(text: str, rng: random.Random) -> tuple[str, str]:
    """(mutated policy-file text, description): deep nesting, huge size, junk values, cut or
    repeated lines, binary junk."""
    lines = text.splitlines()
    roll = rng.random()
    if roll < 0.05:
        depth = rng.choice((17, 100, 2000, 100_000))
        return text + f"\nx = {'[' * depth}{']' * depth}\n", f"array nested {depth} deep"
    if roll < 0.08:
        depth = rng.choice((17, 2000))
        return (
            text + "\n[policies.deep]\nenv = " + "{ A = " * depth + "1" + " }" * depth,
            "inline tables deep",
        )
    if roll < 0.10:
        return text + "\n# " + "x" * rng.choice((300_000, 2_000_000)), "huge comment"
    if roll < 0.12:
        junk = bytes(rng.randrange(256) for _ in range(200))
        return junk.decode("utf-8", "surrogateescape"), "binary junk"  # written back as bytes
    steps = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        index = rng.randrange(len(lines))
        action = rng.random()
        if action < 0.5 and "=" in lines[index]:
            key = lines[index].split("=", 1)[0]
            lines[index] = f"{key}= {rng.choice(TOML_JUNK)}"
            steps.append(f"line {index} = junk")
        elif action < 0.7:
            del lines[index]
            steps.append(f"del line {index}")
        elif action < 0.85:
            lines.insert(index, lines[index])
            steps.append(f"repeat line {index}")
        else:
            cut = rng.randrange(len(lines[index]) + 1)
            lines[index] = lines[index][:cut]
            steps.append(f"cut line {index}")
    return "\n".join(lines) + "\n", "; ".join(steps)


@pytest.mark.slow
def test_fuzz_policy_file(tmp_path):
    """1000 mutated policy files: policies or one UsageError line, never a traceback."""
    from aorta.hw_queue_eval.gpu.policies import resolve_policies

    rng = random.Random("aorta-fuzz-policy-file")
    seed = POLICY_SEED.read_text()
    tally: Counter = Counter()
    for case in range(int(1000 * SCALE)):
        text, how = mutate_toml(seed, rng)
        path = tmp_path / f"p{case}.toml"
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            resolve_policies(None, str(path))
            tally["read"] += 1
        except UsageError as exc:
            assert "\n" not in str(exc), (how, exc)
            tally["refused"] += 1
        except Exception as exc:
            raise AssertionError(
                f"policy file case {case} ({how}) raised {type(exc).__name__}: {exc}"
            ) from exc
    print(f"policy files: {dict(tally)}")
    assert tally["read"] > 0 and tally["refused"] > 0

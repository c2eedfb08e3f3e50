"""Types a checker holds (issue 23, item 2): no bare `dict[str, Any]` in src/ outside a short list.

Inside the process a structure with known fields is a dataclass; a `dict[str, Any]` is right only
at the JSON edge, where it is spelled `JsonObject` (src/aorta/common/jsontypes.py), so the name says
what it is (docs/architecture.md, "Types"). The scan reads the code, not the text: every
`dict[str, Any]`, `Dict[str, Any]`, `Mapping[str, Any]` and `MutableMapping[str, Any]` in an
annotation, an alias, a cast or a quoted forward reference counts; a docstring that names one
does not. A file on ALLOWED must still need its entry, so the list can only shrink.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "aorta"

#: file (relative to the repository) → why it may still spell `dict[str, Any]`
ALLOWED: dict[str, str] = {
    "src/aorta/common/jsontypes.py": "defines JsonObject, the one spelling of the JSON edge",
}

_MAPPINGS = frozenset({"dict", "Dict", "Mapping", "MutableMapping"})


def _name(node: ast.expr) -> str | None:
    """`x` of a bare name or of a dotted one (`typing.Dict`, `collections.abc.Mapping`)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_bare_dict(node: ast.Subscript) -> bool:
    """`dict[str, Any]` or one of its spellings."""
    if _name(node.value) not in _MAPPINGS or not isinstance(node.slice, ast.Tuple):
        return False
    parts = node.slice.elts
    return len(parts) == 2 and _name(parts[0]) == "str" and _name(parts[1]) == "Any"


def _quoted(node: ast.Constant) -> ast.Expression | None:
    """A string constant read as a type expression (a forward reference), None if it is not one."""
    if not isinstance(node.value, str) or len(node.value) > 200:
        return None
    try:
        return ast.parse(node.value.strip(), mode="eval")
    except (SyntaxError, ValueError):  # ValueError: a NUL in the string (Python 3.11.2; later: SyntaxError)
        return None


def bare_dict_lines(source: str) -> list[int]:
    """Lines of `source` that spell a bare `dict[str, Any]` in code (sorted, one per hit)."""
    lines: list[int] = []

    def walk(tree: ast.AST, line: int | None) -> None:
        for node in ast.walk(tree):
            at = line if line is not None else getattr(node, "lineno", 0)
            if isinstance(node, ast.Subscript) and _is_bare_dict(node):
                lines.append(at)
            elif isinstance(node, ast.Constant) and (inner := _quoted(node)) is not None:
                walk(inner, at)

    walk(ast.parse(source), None)
    return sorted(lines)


@functools.cache
def _hits() -> dict[str, list[int]]:
    """Every file of the package with a bare `dict[str, Any]`, and its lines (read once: both
    tests below use it)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = bare_dict_lines(path.read_text(encoding="utf-8"))
        if lines:
            found[path.relative_to(REPO).as_posix()] = lines
    return found


def test_no_bare_dict_outside_the_allow_list() -> None:
    unexplained = {name: lines for name, lines in _hits().items() if name not in ALLOWED}
    assert not unexplained, (
        "a bare dict[str, Any]: spell JSON as JsonObject (aorta.common.jsontypes), make an in-process "
        "structure a dataclass (docs/architecture.md, Types): "
        + "; ".join(f"{name}:{','.join(map(str, lines))}" for name, lines in unexplained.items())
    )


def test_every_allow_listed_file_still_needs_its_entry() -> None:
    hits = _hits()
    stale = sorted(name for name in ALLOWED if name not in hits)
    assert not stale, f"no bare dict[str, Any] left in {stale}: take them off ALLOWED"


def test_every_entry_says_why() -> None:
    assert all(len(reason.split()) >= 3 for reason in ALLOWED.values()), ALLOWED


PLANTED = '''
"""A docstring that names dict[str, Any] is text, not a type."""
import typing
from collections.abc import Mapping
from typing import Any, Dict, TypeAlias, cast

Alias: TypeAlias = dict[str, Any]
def f(a: Dict[str, Any], b: "dict[str, Any]", c: typing.Mapping[str, typing.Any]) -> Mapping[str, Any]:
    return cast("dict[str, Any]", a)
ok: dict[str, int] = {}
also_ok: dict[int, Any] = {}
text = "dict[str, Any] in a message"
'''


def test_the_scan_sees_every_spelling_and_no_text() -> None:
    # line 7 the alias; line 8 four parameters' and the return's; line 9 the quoted cast
    assert bare_dict_lines(PLANTED) == [7, 8, 8, 8, 8, 9]


@pytest.mark.parametrize("spelling", ["dict[str, Any]", "Dict[str, Any]", "typing.Mapping[str, Any]"])
def test_a_planted_violation_fails_the_check(spelling: str) -> None:
    source = f"from typing import Any\n\n\ndef load() -> {spelling}:\n    return {{}}\n"
    assert bare_dict_lines(source) == [4]
    assert bare_dict_lines(source.replace(spelling, "JsonObject")) == []

"""Collect every error and warning message aorta can print, from its source (for the docs test).

A message is: the text given to a user-facing error (UsageError, SessionError, ProgramError,
DeviceLeftChanged, MeasurementFailed, click's exceptions), a string literal that starts with
"error:", "warning:" or "note:", the reason of a not-ready Readiness(False, …), a reason appended
to `problems`/`warnings`, or a `return None, "…"` reason in the eBPF engine. f-string parts that
vary are replaced by "{}"; the longest fixed fragment is the message's key, which
docs/troubleshooting.md must contain verbatim.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "aorta"
ERROR_CALLS = {
    "UsageError",
    "SessionError",
    "ProgramError",
    "ClickException",
    "BadParameter",
    "DeviceLeftChanged",
    "MeasurementFailed",
}
PREFIXES = ("error:", "warning:", "note:")
REASON_LISTS = {"problems", "warnings"}
MIN_KEY = 12
STRIP = " :;,.()'\"`-—"


@dataclass(frozen=True)
class Message:
    """One message: where it is, its text with {} for the varying parts, and its key."""

    file: str
    line: int
    text: str

    @property
    def key(self) -> str:
        """The longest fixed fragment (what the troubleshooting page must quote)."""
        parts = [p.strip(STRIP) for p in self.text.split("{}")]
        return max(parts, key=len)


def _text(node: ast.AST) -> str | None:
    """A string expression with its varying parts as {} (None if it is not a string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left or "{}") + (right or "{}")
    if isinstance(node, ast.IfExp):
        return _text(node.body) or _text(node.orelse)
    return None


def _call_name(node: ast.Call) -> str | None:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", None)


def _found(tree: ast.AST, in_engine: bool) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in ERROR_CALLS and node.args:
                text = _text(node.args[0])
                if text:
                    out.append((node.lineno, text))
            elif (
                name == "Readiness"
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value is False
            ):
                text = _text(node.args[1])
                if text:
                    out.append((node.lineno, text))
            elif (
                name == "append"
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in REASON_LISTS
                and node.args
            ):
                text = _text(node.args[0])
                if text:
                    out.append((node.lineno, text))
        elif isinstance(node, (ast.Constant, ast.JoinedStr)):
            text = _text(node)
            if text and text.startswith(PREFIXES):
                out.append((node.lineno, text))
        elif (
            in_engine
            and isinstance(node, ast.Return)
            and isinstance(node.value, ast.Tuple)
            and len(node.value.elts) == 2
            and isinstance(node.value.elts[0], ast.Constant)
            and node.value.elts[0].value is None
        ):
            text = _text(node.value.elts[1])
            if text:
                out.append((node.lineno, text))
    return out


def collect(src: Path = SRC) -> list[Message]:
    """Every message in the package whose key is long enough to quote (wrappers like 'error: {}' are not)."""
    messages = {}
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_engine = "ebpf" in path.relative_to(src).parts
        for line, text in _found(tree, in_engine):
            msg = Message(str(path.relative_to(src.parent)), line, text)
            if len(msg.key) >= MIN_KEY:
                messages.setdefault(msg.key, msg)
    return sorted(messages.values(), key=lambda m: (m.file, m.line))


if __name__ == "__main__":  # print the list (to write or extend docs/troubleshooting.md)
    for m in collect():
        print(f"{m.file}:{m.line}\t{m.key}")

"""The package layout stays honest: no import cycles among aorta modules, no private names
imported across modules (a helper two modules need is public in the module that owns it).

Read from the source with ast, so lazy imports inside functions count too: a cycle deferred
to call time is still a cycle in the design.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(path: Path) -> str:
    """aorta.x.y for src/aorta/x/y.py (a package's __init__.py is the package itself)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports_of(name: str) -> list[tuple[str, str | None, int]]:
    """(imported aorta module, imported name or None, line) for every import in module `name`.

    `from pkg import mod` counts as importing the module pkg.mod; `from mod import thing` as
    importing `thing` from mod.
    """
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("aorta")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("aorta"):
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    found.append((submodule, None, node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the aorta modules it imports (itself excluded)."""
    return {name: {m for m, _, _ in imports_of(name) if m in MODULES and m != name} for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                cycle = visit(dep)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_walk_sees_the_package():
    graph = import_graph()
    assert len(graph) > 100
    assert "aorta.hw_queue_eval.config.run_config" in graph["aorta.hw_queue_eval.commands.run"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles_among_aorta_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_no_private_names_imported_across_modules():
    private = [
        f"{MODULES[name].relative_to(SRC)}:{line}: {thing} from {source}"
        for name in MODULES
        for source, thing, line in imports_of(name)
        if thing and thing.startswith("_") and not thing.startswith("__") and source != name
    ]
    assert private == [], "make these public in the module that owns them:\n" + "\n".join(private)


ARCHITECTURE = SRC.parent / "docs" / "architecture.md"


def declared_folder_order() -> list[str]:
    """The folder order docs/architecture.md declares ("Folder order: `a` → `b` → ..."), lowest first."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index("Folder order:")
    block = text[start : text.index("\n\n", start)]
    return re.findall(r"`([\w]+)`", block)


def folder_of(module: str) -> str:
    """The folder a module belongs to: a sub-package of aorta.hw_queue_eval, else of aorta; the
    CLI modules at the top of hw_queue_eval are `hw_queue_eval`; aorta's own __init__ is `aorta`."""
    parts = module.split(".")
    if parts[:2] == ["aorta", "hw_queue_eval"]:
        if len(parts) > 2 and (SRC / "aorta" / "hw_queue_eval" / parts[2]).is_dir():
            return parts[2]
        return "hw_queue_eval"
    return parts[1] if len(parts) > 1 else "aorta"


def folder_edges() -> dict[tuple[str, str], list[str]]:
    """(importing folder, imported folder) → the module imports behind it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, deps in import_graph().items():
        for dep in deps:
            pair = (folder_of(name), folder_of(dep))
            if pair[0] != pair[1]:
                edges.setdefault(pair, []).append(f"{name} → {dep}")
    return edges


def test_the_declared_order_names_every_folder_once():
    order = declared_folder_order()
    assert len(order) == len(set(order)), order
    assert set(order) == {folder_of(name) for name in MODULES}


def test_folders_import_only_from_folders_below_them():
    rank = {folder: i for i, folder in enumerate(declared_folder_order())}
    upward = [
        f"{src} imports {dst} (above it): " + "; ".join(sorted(why)[:3])
        for (src, dst), why in sorted(folder_edges().items())
        if rank[dst] > rank[src]
    ]
    assert upward == [], "move the shared piece down, or fix the order in docs/architecture.md:\n" + (
        "\n".join(upward)
    )


def test_the_folder_check_sees_an_upward_import():
    """The walk is not vacuous: backends import ops (down), and the reverse would be reported."""
    edges = folder_edges()
    assert ("backends", "ops") in edges and ("commands", "run") in edges
    rank = {folder: i for i, folder in enumerate(declared_folder_order())}
    assert rank["ops"] < rank["backends"] < rank["run"] < rank["commands"]

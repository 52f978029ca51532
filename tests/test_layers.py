"""Package layers, checked on the source: nothing imports upward, no import circle,
no source imports another.

Layers, lowest first (``docs/ARCHITECTURE.md``): a module may import its own
package and any package of a lower layer, never a higher one. Imports inside
functions (and ``TYPE_CHECKING`` blocks) count too: a lazy import upward is
still a cycle in the design, and so is a circle of modules within one layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import structspec
from structspec.sources import SOURCES

ROOT = Path(structspec.__file__).parent

#: Top-level modules and packages of ``structspec``, lowest layer first.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "__init__ errors files config rates sources backends",
        "model",
        "syntax",
        "drafts",
        "engine",
        "runtime",
        "completion metrics detect",
        "lsp http bench",
        "commands cli __main__",
    )
)
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_targets(path: Path, package: str = "structspec") -> list[tuple[int, str, list[str]]]:
    """``(line, module, names)`` of every import of ``package`` in ``path``, nested ones included.

    ``names`` are those of ``from module import names`` (empty for ``import module``).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == package or node.module.startswith(package + "."):
                found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name, [])
                for a in node.names
                if a.name == package or a.name.startswith(package + ".")
            ]
    return found


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``structspec`` import in ``path``, nested ones included."""
    found = []
    for line, module, names in _import_targets(path):
        if module == "structspec" and names:
            found += [(line, f"structspec.{name}") for name in names]
        else:
            found.append((line, module))
    return found


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_every_top_level_module_has_a_layer() -> None:
    tops = {_top(_module_name(p)) for p in _modules()}
    assert tops <= set(RANK), f"give these a layer: {sorted(tops - set(RANK))}"


def test_nothing_imports_upward() -> None:
    upward = []
    for path in _modules():
        here = _module_name(path)
        rank = RANK[_top(here)]
        for line, target in _imports(path):
            if RANK.get(_top(target), -1) > rank:
                upward.append(f"{path.relative_to(ROOT)}:{line} {here} -> {target}")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_the_old_model_to_engine_arrow_would_fail(tmp_path: Path) -> None:
    """The check is not vacuous: ``model`` importing ``engine`` is upward."""
    assert RANK["model"] < RANK["engine"]
    bad = tmp_path / "bad.py"
    bad.write_text("from structspec.engine.control import CostModel\n")
    assert _imports(bad) == [(1, "structspec.engine.control")]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package at ``root`` it imports (nested imports included).

    ``from package import name`` points at the submodule ``package.name`` when
    there is one, else (a name defined in the package) at the package.
    """
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for here, path in paths.items():
        targets: set[str] = set()
        for _, module, names in _import_targets(path, root.name):
            submodules = {f"{module}.{name}" for name in names} & paths.keys()
            targets |= submodules
            if len(submodules) < max(len(names), 1):
                targets |= {module} & paths.keys()
        graph[here] = targets - {here}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph``: its strongly connected parts of two or more modules.

    Each is given as one closed path through it (``a -> b -> ... -> a``), sorted.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(_closed_path(graph, set(part)) for part in parts)


def _closed_path(graph: dict[str, set[str]], part: set[str]) -> list[str]:
    """A path from the part's first module back to it, through the part (breadth first)."""
    start = min(part)
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & part):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [*reversed(path), start]
                if w not in came:
                    came[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"not a circle: {sorted(part)}")


def test_no_import_circle() -> None:
    found = circles(import_graph(ROOT))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    """The check is not vacuous: a circle through a nested import and a package is named."""
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from planted.sub import b\n")
    (pkg / "sub" / "b.py").write_text("import planted.c\n")
    (pkg / "c.py").write_text("def f():\n    from planted import a\n")
    (pkg / "d.py").write_text("from planted import a, c\n")  # into the circle, not part of it
    graph = import_graph(pkg)
    assert graph["planted.d"] == {"planted.a", "planted.c"}
    assert circles(graph) == [["planted.a", "planted.sub.b", "planted.c", "planted.a"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_no_draft_source_imports_another() -> None:
    modules = {s.module for s in SOURCES}
    assert len(modules) == len(SOURCES), "one module per source"
    crossing = []
    for path in _modules():
        here = _module_name(path)
        if here not in modules:
            continue
        for line, target in _imports(path):
            if target in modules and target != here:
                crossing.append(f"{here}:{line} -> {target}")
    assert not crossing, "draft sources importing each other:\n" + "\n".join(crossing)


def test_every_package_imports_first_without_a_cycle() -> None:
    """Importing any package first (as a command or a test does) finds no import cycle."""
    import subprocess
    import sys

    first = sorted({_module_name(p) for p in _modules() if p.name == "__init__.py"})
    first += ["structspec.config", "structspec.sources", "structspec.runtime"]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    for name in first:
        env_path = str(ROOT.parent)
        proc = subprocess.run(
            [sys.executable, "-c", code, name],
            capture_output=True,
            text=True,
            env={"PYTHONPATH": env_path, "PATH": ""},
            timeout=60,
        )
        assert proc.returncode == 0, f"import {name}:\n{proc.stderr[-2000:]}"

"""Package layers, checked on the source: nothing imports upward, no source imports another.

Layers, lowest first (``docs/ARCHITECTURE.md``): a module may import its own
package and any package of a lower layer, never a higher one. Imports inside
functions count too: a lazy import upward is still a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

import structspec
from structspec.drafts.registry import SOURCES

ROOT = Path(structspec.__file__).parent

#: Top-level modules and packages of ``structspec``, lowest layer first.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "__init__ errors files config",
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
#: Modules any layer may import: they import nothing of structspec when loaded
#: (the draft-source registry, so that ``config`` takes the source names from it).
LEAVES = frozenset({"structspec.drafts.registry"})


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``structspec`` import in ``path``, nested ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "structspec":
                found += [(node.lineno, f"structspec.{a.name}") for a in node.names]
            elif node.module.startswith("structspec."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("structspec.")]
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
            if target not in LEAVES and RANK.get(_top(target), -1) > rank:
                upward.append(f"{path.relative_to(ROOT)}:{line} {here} -> {target}")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_leaves_import_nothing_when_loaded() -> None:
    for name in LEAVES:
        path = ROOT.parent / (name.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only; TYPE_CHECKING blocks are not run
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                assert not any(n.startswith("structspec") for n in names), (name, node.lineno)


def test_the_old_model_to_engine_arrow_would_fail(tmp_path: Path) -> None:
    """The check is not vacuous: ``model`` importing ``engine`` is upward."""
    assert RANK["model"] < RANK["engine"]
    bad = tmp_path / "bad.py"
    bad.write_text("from structspec.engine.control import CostModel\n")
    assert _imports(bad) == [(1, "structspec.engine.control")]


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
    first += ["structspec.config", "structspec.runtime", "structspec.drafts.registry"]
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

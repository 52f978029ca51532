"""Build draft sources by name (the names of ``structspec.config.SOURCE_NAMES``).

Each factory takes the model (for its tokenizer) and returns a fresh source.
Imports are lazy so that a source's dependencies (tree-sitter grammars, rule
files) load only when it is enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from structspec.config import SOURCE_NAMES
from structspec.drafts.base import DraftSource
from structspec.model.base import Model


def _lookup(model: Model) -> DraftSource:
    from structspec.drafts.lookup import LookupSource

    return LookupSource()


def _rules(model: Model) -> DraftSource:
    from structspec.drafts.rules import RulesSource

    return RulesSource.default(model)


def _python(model: Model) -> DraftSource:
    from structspec.drafts.python_syntax import PythonSyntaxSource

    return PythonSyntaxSource(model)


def _ast(model: Model) -> DraftSource:
    from structspec.drafts.ast_shadow import ASTShadowSource

    return ASTShadowSource(model)


def _motif(model: Model) -> DraftSource:
    from structspec.drafts.motif import MotifSource

    return MotifSource(model)


FACTORIES: dict[str, Callable[[Model], DraftSource]] = {
    "lookup": _lookup,
    "rules": _rules,
    "python": _python,
    "ast": _ast,
    "motif": _motif,
}
assert tuple(FACTORIES) == SOURCE_NAMES


def build_sources(names: Iterable[str], model: Model) -> list[DraftSource]:
    """Sources in the order of ``SOURCE_NAMES`` (ties in expected gain go to the earlier)."""
    wanted = set(names)
    if "all" in wanted:
        wanted = set(SOURCE_NAMES)
    unknown = wanted - set(SOURCE_NAMES)
    if unknown:
        raise ValueError(f"unknown draft source(s): {', '.join(sorted(unknown))}")
    return [FACTORIES[name](model) for name in SOURCE_NAMES if name in wanted]

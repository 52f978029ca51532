"""Build draft sources by name (the names of ``structspec.config.SOURCE_NAMES``).

Each factory takes the model (for its tokenizer) and the options, and returns
a fresh source.
Imports are lazy so that a source's dependencies (tree-sitter grammars, rule
files) load only when it is enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from structspec.config import SOURCE_NAMES, resolve_sources
from structspec.drafts.base import DraftSource
from structspec.model.base import Model


def _lookup(model: Model, options: SourceOptions) -> DraftSource:
    from structspec.drafts.lookup import LookupSource

    return LookupSource()


def _rules(model: Model, options: SourceOptions) -> DraftSource:
    from structspec.drafts.rules import RulesSource

    if options.rules_file:
        return RulesSource.load(options.rules_file, model)  # RulesError: a bad user file
    return RulesSource.default(model)


def _python(model: Model, options: SourceOptions) -> DraftSource:
    from structspec.drafts.python_syntax import PythonSyntaxSource

    return PythonSyntaxSource(model)


def _ast(model: Model, options: SourceOptions) -> DraftSource:
    from structspec.drafts.ast_shadow import ASTShadowSource

    return ASTShadowSource(model)


def _motif(model: Model, options: SourceOptions) -> DraftSource:
    from structspec.drafts.motif import MotifSource

    return MotifSource(model)


@dataclass(frozen=True)
class SourceOptions:
    """Options of the sources that have any (``rules_file``: a mined rules file)."""

    rules_file: str = ""


FACTORIES: dict[str, Callable[[Model, SourceOptions], DraftSource]] = {
    "lookup": _lookup,
    "rules": _rules,
    "python": _python,
    "ast": _ast,
    "motif": _motif,
}
assert tuple(FACTORIES) == SOURCE_NAMES


def build_sources(names: Iterable[str], model: Model, *, rules_file: str = "") -> list[DraftSource]:
    """Sources in the order of ``SOURCE_NAMES`` (ties in expected gain go to the earlier)."""
    options = SourceOptions(rules_file=rules_file)
    return [FACTORIES[name](model, options) for name in resolve_sources(names)]

"""The one list of draft sources: names, modules, and how each is built.

``SOURCES`` is the registry. The config's source names (``SOURCE_NAMES``,
``resolve_sources``), the CLI's help and the language table's check of its
``sources`` all come from it; editors pass names through and the server warns
about unknown ones (``config.apply``). Adding a source is its module plus one
entry here (and, to enable it per language, ``grammars/languages.toml``); see
``docs/ARCHITECTURE.md``.

This module imports nothing of structspec at load time, so that ``config``
(below every layer) can take the names from it, and a source's module (its
tree-sitter grammars, numpy, rule files) is imported only when the source is
built. A source class declares::

    name: ClassVar[str]                    # its registry name
    priors: ClassVar[Mapping[str, float]]  # starting acceptance per `name` or `name:tier`

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> DraftSource: ...
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from structspec.drafts.base import DraftSource
    from structspec.model.base import Model


@dataclass(frozen=True)
class SourceEntry:
    """A draft source: its name, the module and class that implement it, one line of help.

    ``reads_corpus``: the source reads ``DraftContext.corpus`` (the other open
    buffers), so a server tokenizes them when the source is enabled.
    """

    name: str
    module: str
    cls: str
    summary: str
    reads_corpus: bool = False


#: Every draft source, in planner order (ties in expected gain go to the earlier).
SOURCES: tuple[SourceEntry, ...] = (
    SourceEntry(
        "lookup",
        "structspec.drafts.lookup",
        "LookupSource",
        "the buffer and open files",
        reads_corpus=True,
    ),
    SourceEntry("rules", "structspec.drafts.rules", "RulesSource", "mined n-gram rules"),
    SourceEntry("python", "structspec.drafts.python_syntax", "PythonSyntaxSource", "Python syntax"),
    SourceEntry("ast", "structspec.drafts.ast_shadow", "ASTShadowSource", "syntax tree shadow"),
    SourceEntry(
        "motif",
        "structspec.drafts.motif",
        "MotifSource",
        "repeated line shapes",
        reads_corpus=True,
    ),
    SourceEntry(
        "recycle",
        "structspec.drafts.recycle",
        "RecycleSource",
        "the document's latest suggestions",
    ),
    SourceEntry("suffix", "structspec.drafts.suffix", "SuffixSource", "the text after the cursor"),
    SourceEntry(
        "nearby", "structspec.drafts.nearby", "NearbySource", "the lines around the cursor"
    ),
)

#: Names of the draft sources a user can choose (``sources = ["all"]`` is every one).
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


@dataclass(frozen=True)
class SourceOptions:
    """Options of the sources that have any (``rules_file``: a mined rules file)."""

    rules_file: str = ""


def resolve_sources(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` in the order of ``SOURCE_NAMES``, ``all`` expanded.

    Raises ``ValueError`` naming every unknown name (the message is for the user).
    """
    names = tuple(names)
    unknown = [n for n in names if n != "all" and n not in SOURCE_NAMES]
    if unknown:
        raise ValueError(
            f"unknown draft source(s) {', '.join(unknown)}; choose from all, "
            + ", ".join(SOURCE_NAMES)
        )
    return tuple(s for s in SOURCE_NAMES if s in names or "all" in names)


def reads_corpus(names: Iterable[str]) -> bool:
    """Whether any of the sources ``names`` reads the corpus of open buffers."""
    enabled = set(resolve_sources(names))
    return any(s.reads_corpus for s in SOURCES if s.name in enabled)


def source_class(name: str) -> Any:
    """The class of source ``name`` (importing its module now), its priors validated."""
    entry = next((s for s in SOURCES if s.name == name), None)
    if entry is None:
        raise ValueError(f"unknown draft source {name!r}")
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    check_priors(name, cls.priors)
    if cls.name != name:
        raise TypeError(f"{entry.module}.{entry.cls}.name is {cls.name!r}, registered as {name!r}")
    return cls


def check_priors(name: str, priors: Mapping[str, float]) -> None:
    """A source's priors must be keyed ``name`` or ``name:tier``, each in ``(0, 1]``."""
    for key, value in priors.items():
        if key.partition(":")[0] != name:
            raise ValueError(f"source {name!r} declares a prior for another source: {key!r}")
        if not (isinstance(value, float | int) and math.isfinite(value) and 0.0 < value <= 1.0):
            raise ValueError(f"source {name!r}: prior {key!r} = {value!r} is not in (0, 1]")


def build_sources(names: Iterable[str], model: Model, *, rules_file: str = "") -> list[DraftSource]:
    """Fresh sources for ``names``, in the order of ``SOURCE_NAMES``."""
    options = SourceOptions(rules_file=rules_file)
    return [source_class(name).build(model, options) for name in resolve_sources(names)]

"""The draft sources as plain data: names, modules, and what each reads from an editor.

``SOURCES`` is the one list of draft sources. It sits at the bottom layer
(beside ``config``) and imports nothing of structspec, so that every layer
can read it: the config's source names (``SOURCE_NAMES``,
``resolve_sources``), the CLI's help, the language table's check of its
``sources``, and the completion layer's question of what to gather for a
generation (``editor_inputs``). Building a source from its entry is
``drafts.registry``'s job. Adding a source is its module plus one entry here
(and, to enable it per language, ``grammars/languages.toml``); see
``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceEntry:
    """A draft source: its name, the module and class that implement it, one line of help.

    The ``reads_*`` flags say which of ``DraftContext``'s editor inputs the
    source reads, so that a server gathers them only when an enabled source
    does: ``corpus`` (the other open buffers), ``suffix_tokens`` (the text
    after the cursor) and ``recent_suggestions`` (the document's latest
    generations).
    """

    name: str
    module: str
    cls: str
    summary: str
    reads_corpus: bool = False
    reads_suffix: bool = False
    reads_recent_suggestions: bool = False


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
        reads_recent_suggestions=True,
    ),
    SourceEntry(
        "suffix",
        "structspec.drafts.suffix",
        "SuffixSource",
        "the text after the cursor",
        reads_suffix=True,
    ),
    SourceEntry(
        "nearby",
        "structspec.drafts.nearby",
        "NearbySource",
        "the lines around the cursor",
        reads_suffix=True,
    ),
)

#: Names of the draft sources a user can choose (``sources = ["all"]`` is every one).
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


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


@dataclass(frozen=True)
class EditorInputs:
    """Which editor inputs a generation gathers for its draft sources (``editor_inputs``)."""

    corpus: bool = False
    suffix: bool = False
    recent_suggestions: bool = False


def editor_inputs(names: Iterable[str]) -> EditorInputs:
    """What the enabled sources ``names`` read from the editor (none of them: nothing)."""
    enabled = [s for s in SOURCES if s.name in set(resolve_sources(names))]
    return EditorInputs(
        corpus=any(s.reads_corpus for s in enabled),
        suffix=any(s.reads_suffix for s in enabled),
        recent_suggestions=any(s.reads_recent_suggestions for s in enabled),
    )

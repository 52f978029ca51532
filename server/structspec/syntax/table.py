"""The language table: ``grammars/languages.toml`` and the query files beside it.

The table is data (see the comments at the top of ``languages.toml``); this
module reads and validates it once, and opens tree-sitter grammars from the
installed ``tree_sitter_<lang>`` wheels on demand. A language whose wheel is
missing keeps working on lexical state alone (``LanguageSpec.grammar()`` is
``None``), and a malformed entry is skipped with a warning rather than failing
the whole server.

The grammars folder is found, in order, at ``$STRUCTSPEC_GRAMMARS``, at
``grammars/`` of the source checkout (an editable install) and at
``structspec/grammars`` inside the installed package.
"""

from __future__ import annotations

import importlib
import os
import re
import tomllib
import warnings
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from structspec.sources import SOURCE_NAMES


class GrammarTableError(ValueError):
    """The language table cannot be read (the message is one line for the user)."""


def grammars_dir() -> Path:
    """The folder holding ``languages.toml`` and ``<lang>/*.scm``."""
    env = os.environ.get("STRUCTSPEC_GRAMMARS")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve()
    candidates += [here.parents[3] / "grammars", here.parents[1] / "grammars"]
    for path in candidates:
        if (path / "languages.toml").is_file():
            return path
    raise GrammarTableError(
        "grammars/languages.toml not found (looked in "
        + ", ".join(str(p) for p in candidates)
        + "); set STRUCTSPEC_GRAMMARS to the grammars folder"
    )


@dataclass(frozen=True)
class DomainSpec:
    """A domain's draft sources and per-source draft caps."""

    name: str
    sources: tuple[str, ...]
    caps: dict[str, int]


@dataclass(frozen=True)
class LanguageSpec:
    """One ``[languages.<name>]`` entry; see ``languages.toml`` for the fields."""

    name: str
    language_ids: tuple[str, ...]
    extensions: tuple[str, ...]
    domain: str
    grammar_package: str | None = None
    grammar_function: str = "language"
    brackets: tuple[tuple[str, str], ...] = ()
    quotes: tuple[str, ...] = ()
    line_comment: tuple[str, ...] = ()
    block_comment: tuple[str, str] | None = None
    indent: str = "    "
    block_style: str = "none"
    object_notation: bool = False
    statement_end: str = ""
    block_openers: frozenset[str] = frozenset()
    keywords: frozenset[str] = frozenset()
    continuations: dict[str, str] = field(default_factory=dict)
    void_elements: frozenset[str] = frozenset()
    block_elements: frozenset[str] = frozenset()
    content_patterns: tuple[re.Pattern[str], ...] = ()
    shebangs: tuple[str, ...] = ()
    queries_dir: Path | None = None

    def grammar(self) -> Any | None:
        """The tree-sitter ``Language`` (``None`` when its wheel is not installed)."""
        return _grammar(self.grammar_package, self.grammar_function)

    def query_source(self, name: str = "shadow") -> str | None:
        """The text of ``grammars/<lang>/<name>.scm``, if present."""
        if self.queries_dir is None:
            return None
        path = self.queries_dir / f"{name}.scm"
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return None


@cache
def _grammar(package: str | None, function: str) -> Any | None:
    if not package:
        return None
    try:
        import tree_sitter

        module = importlib.import_module(package)
        return tree_sitter.Language(getattr(module, function)())
    except Exception as exc:  # a missing or incompatible wheel: lexical state only
        warnings.warn(f"tree-sitter grammar {package}.{function} unavailable: {exc}", stacklevel=2)
        return None


@dataclass(frozen=True)
class GenericSpec:
    """The ``[generic]`` table: facts across languages (see ``languages.toml``)."""

    keywords: frozenset[str] = frozenset()
    block_endings: tuple[str, ...] = ()
    comment_starts: tuple[str, ...] = ()
    #: languageId -> line-comment leader, for ids without a language entry.
    line_comments: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LanguageTable:
    """All languages and domains, with lookup maps."""

    languages: dict[str, LanguageSpec]
    domains: dict[str, DomainSpec]
    by_language_id: dict[str, LanguageSpec]
    by_extension: dict[str, LanguageSpec]
    generic: GenericSpec = field(default_factory=GenericSpec)

    def comment_leader(self, language_id: str | None) -> str:
        """The line-comment leader of a languageId ('' when unknown or none)."""
        if not language_id:
            return ""
        leader = self.generic.line_comments.get(language_id)
        if leader is not None:
            return leader
        lang = self.for_language_id(language_id)
        return lang.line_comment[0] if lang is not None and lang.line_comment else ""

    def language_of_suffixes(self) -> dict[str, str]:
        """File suffix (``.py``) -> the languageId of its language (the first one listed)."""
        return {
            ext: lang.language_ids[0]
            for lang in self.languages.values()
            if lang.language_ids
            for ext in lang.extensions
            if ext.startswith(".")
        }

    def for_language_id(self, language_id: str | None) -> LanguageSpec | None:
        if not language_id:
            return None
        key = language_id.strip().lower()
        return self.by_language_id.get(key) or self.languages.get(key)

    def for_path(self, path: str | None) -> LanguageSpec | None:
        if not path:
            return None
        p = Path(path)
        name = p.name.lower()
        return self.by_extension.get(name) or self.by_extension.get(p.suffix.lower())


def _strs(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GrammarTableError(f"{where}.{key} must be a list of strings")
    return tuple(value)


def _flag(entry: dict[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise GrammarTableError(f"{where}.{key} must be true or false")
    return value


def _language(name: str, entry: dict[str, Any], root: Path) -> LanguageSpec:
    where = f"languages.{name}"
    grammar = entry.get("grammar") or {}
    if not isinstance(grammar, dict):
        raise GrammarTableError(f"{where}.grammar must be a table")
    brackets = []
    for pair in _strs(entry, "brackets", where):
        if len(pair) != 2:
            raise GrammarTableError(f"{where}.brackets: {pair!r} is not an opener/closer pair")
        brackets.append((pair[0], pair[1]))
    block = _strs(entry, "block_comment", where)
    if block and len(block) != 2:
        raise GrammarTableError(f"{where}.block_comment must be [opener, closer] or []")
    continuations = entry.get("continuations", {})
    if not isinstance(continuations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in continuations.items()
    ):
        raise GrammarTableError(f"{where}.continuations must map strings to strings")
    try:
        sources = _strs(entry, "content_patterns", where)
        patterns = tuple(re.compile(p, re.MULTILINE) for p in sources)
    except re.error as exc:
        raise GrammarTableError(f"{where}.content_patterns: {exc}") from exc
    indent = entry.get("indent", "    ")
    if not isinstance(indent, str) or not indent or indent.strip():
        raise GrammarTableError(f"{where}.indent must be spaces or a tab")
    qdir = root / name
    return LanguageSpec(
        name=name,
        language_ids=tuple(s.lower() for s in _strs(entry, "language_ids", where)),
        extensions=tuple(s.lower() for s in _strs(entry, "extensions", where)),
        domain=str(entry.get("domain", "generic")),
        grammar_package=grammar.get("package"),
        grammar_function=str(grammar.get("function", "language")),
        brackets=tuple(brackets),
        quotes=tuple(sorted(_strs(entry, "quotes", where), key=len, reverse=True)),
        line_comment=_strs(entry, "line_comment", where),
        block_comment=(block[0], block[1]) if block else None,
        indent=indent,
        block_style=str(entry.get("block_style", "none")),
        object_notation=_flag(entry, "object_notation", where),
        statement_end=str(entry.get("statement_end", "")),
        block_openers=frozenset(_strs(entry, "block_openers", where)),
        keywords=frozenset(_strs(entry, "keywords", where)),
        continuations={k.lower(): v for k, v in continuations.items()},
        void_elements=frozenset(s.lower() for s in _strs(entry, "void_elements", where)),
        block_elements=frozenset(s.lower() for s in _strs(entry, "block_elements", where)),
        content_patterns=patterns,
        shebangs=_strs(entry, "shebangs", where),
        queries_dir=qdir if qdir.is_dir() else None,
    )


def _domain(name: str, entry: dict[str, Any]) -> DomainSpec:
    where = f"domains.{name}"
    sources = _strs(entry, "sources", where)
    unknown = [s for s in sources if s not in SOURCE_NAMES]
    if unknown:
        raise GrammarTableError(f"{where}.sources: unknown source(s) {', '.join(unknown)}")
    caps = entry.get("caps", {})
    if not isinstance(caps, dict) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in caps.values()
    ):
        raise GrammarTableError(f"{where}.caps must map source names to token counts >= 0")
    return DomainSpec(name, sources, {str(k): int(v) for k, v in caps.items()})


def _generic(entry: Any) -> GenericSpec:
    if not isinstance(entry, dict):
        raise GrammarTableError("[generic] must be a table")
    leaders = entry.get("line_comments", {})
    if not isinstance(leaders, dict):
        raise GrammarTableError("generic.line_comments must map a leader to languageIds")
    line_comments = {
        lid: str(leader)
        for leader in leaders
        for lid in _strs(leaders, leader, "generic.line_comments")
    }
    return GenericSpec(
        frozenset(_strs(entry, "keywords", "generic")),
        _strs(entry, "block_endings", "generic"),
        _strs(entry, "comment_starts", "generic"),
        line_comments,
    )


def parse_table(data: dict[str, Any], root: Path) -> LanguageTable:
    """Validate a parsed ``languages.toml``; bad entries are skipped with a warning.

    The one entry the table cannot do without is ``[domains.generic]``: its
    absence is a ``GrammarTableError``, like an unreadable file.
    """
    domains: dict[str, DomainSpec] = {}
    for name, entry in (data.get("domains") or {}).items():
        try:
            domains[name] = _domain(name, entry)
        except GrammarTableError as exc:
            warnings.warn(f"grammars: skipping domain: {exc}", stacklevel=2)
    if "generic" not in domains:
        # The domain of every buffer no language claims: without it there is no safe default.
        raise GrammarTableError(
            "languages.toml: [domains.generic] is missing or invalid; it is the domain of "
            "every buffer no language claims (see the shipped grammars/languages.toml)"
        )
    languages: dict[str, LanguageSpec] = {}
    for name, entry in (data.get("languages") or {}).items():
        try:
            if not isinstance(entry, dict):
                raise GrammarTableError(f"languages.{name} must be a table")
            lang = _language(name, entry, root)
            if lang.domain not in domains:
                raise GrammarTableError(f"languages.{name}.domain: no domain {lang.domain!r}")
            languages[name] = lang
        except GrammarTableError as exc:
            warnings.warn(f"grammars: skipping language: {exc}", stacklevel=2)
    by_id: dict[str, LanguageSpec] = {}
    by_ext: dict[str, LanguageSpec] = {}
    for lang in languages.values():
        for lid in lang.language_ids:
            by_id.setdefault(lid, lang)
        for ext in lang.extensions:
            by_ext.setdefault(ext, lang)
    try:
        generic = _generic(data.get("generic", {}))
    except GrammarTableError as exc:
        warnings.warn(f"grammars: skipping [generic]: {exc}", stacklevel=2)
        generic = GenericSpec()
    return LanguageTable(languages, domains, by_id, by_ext, generic)


@cache
def load_table(path: str | None = None) -> LanguageTable:
    """The language table (cached); ``path`` overrides the grammars folder."""
    root = Path(path) if path else grammars_dir()
    try:
        with open(root / "languages.toml", "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise GrammarTableError(f"cannot read {root / 'languages.toml'}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GrammarTableError(f"{root / 'languages.toml'}: {exc}") from exc
    return parse_table(data, root)

"""Which language a buffer is in (its domain then decides the draft sources: ``drafts.domain``).

The language is detected, in order of trust, from the LSP languageId,
the file name or extension, a ``#!`` line, and the text itself (the
``content_patterns`` of the language table, scored by how many lines match).
"""

from __future__ import annotations

import json
import re
import warnings

from structspec.syntax.table import (
    GrammarTableError,
    LanguageSpec,
    LanguageTable,
    load_table,
)

_SHEBANG = re.compile(r"\A#!\s*(?:/usr/bin/env\s+)?(?:\S*/)?([\w.+-]+)")
#: How much text content detection looks at (its start: headers decide most).
_SNIFF_CHARS = 8192


def _sniff(table: LanguageTable, text: str) -> LanguageSpec | None:
    head = text[:_SNIFF_CHARS]
    m = _SHEBANG.match(head)
    if m:
        interp = re.sub(r"[\d.]+$", "", m.group(1)) or m.group(1)
        for lang in table.languages.values():
            if interp in lang.shebangs or m.group(1) in lang.shebangs:
                return lang
    stripped = head.lstrip()
    if stripped[:1] in ("{", "[") and "json" in table.languages:
        try:
            json.loads(text)
            return table.languages["json"]
        except ValueError:
            pass  # may still be JSON cut short: the patterns below decide
    best: LanguageSpec | None = None
    best_score = 0
    for lang in table.languages.values():
        score = sum(len(p.findall(head)) for p in lang.content_patterns)
        if score > best_score:
            best, best_score = lang, score
    return best


def detect_language(
    language_id: str | None = None,
    path: str | None = None,
    text: str = "",
    *,
    table: LanguageTable | None = None,
) -> tuple[LanguageSpec | None, str]:
    """The language of a buffer and what decided it (``languageId``, ``path``, ``content``)."""
    table = table or load_table()
    lang = table.for_language_id(language_id)
    if lang is not None:
        return lang, "languageId"
    lang = table.for_path(path)
    if lang is not None:
        return lang, "path"
    if text:
        lang = _sniff(table, text)
        if lang is not None:
            return lang, "content"
    return None, "default"


def resolve_language(language_id: str | None, text: str) -> LanguageSpec | None:
    """The table's entry for a buffer: its languageId when the table knows it, else its text.

    ``None`` without a table (a warning says why) or when nothing matches.
    """
    try:
        table = load_table()
    except GrammarTableError as exc:
        warnings.warn(f"no language table: {exc}", stacklevel=2)
        return None
    lang = table.for_language_id(language_id)
    if lang is None:
        lang, _ = detect_language(None, None, text, table=table)
    return lang

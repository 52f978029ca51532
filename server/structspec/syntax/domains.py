"""Which language a buffer is in (its domain then decides the draft sources: ``drafts.domain``).

The language is detected, in order of trust, from the LSP languageId,
the file name or extension, a ``#!`` line, and the text itself (the
``content_patterns`` of the language table, scored by how many lines match).
"""

from __future__ import annotations

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


#: One JSON token (a string may not span lines), or whitespace.
_JSON_TOKEN = re.compile(
    r'\s+|"(?:[^"\\\n]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|[\[\]{}:,]'
)
#: What a text cut short (by typing or the sniffing limit) may end with: the start of a
#: string or of a literal.
_JSON_CUT = re.compile(
    r'"(?:[^"\\\n]|\\.)*\\?\Z|t(?:r(?:ue?)?)?\Z|f(?:a(?:l(?:se?)?)?)?\Z|n(?:u(?:ll?)?)?\Z'
)
_CLOSING = {"]": "[", "}": "{"}


def _json_prefix(head: str) -> bool:
    """Whether ``head`` reads as the start of a JSON value (maybe cut short, as while typing).

    Tokens and bracket nesting are checked, in one pass over at most
    ``_SNIFF_CHARS`` characters and without recursion: a document of 200,000
    ``[`` is no deeper for this than one of three. The grammar between tokens
    is not checked; sniffing needs a strong hint, not a parser.
    """
    stripped = head.lstrip()
    if stripped[:1] not in ("{", "["):
        return False
    open_brackets: list[str] = []
    pos = len(head) - len(stripped)
    while pos < len(head):
        m = _JSON_TOKEN.match(head, pos)
        if m is None:
            return _JSON_CUT.match(head, pos) is not None
        token = m.group()
        if token in ("[", "{"):
            open_brackets.append(token)
        elif token in _CLOSING:
            if not open_brackets or open_brackets.pop() != _CLOSING[token]:
                return False
            if not open_brackets and head[m.end() :].strip():
                return False  # something after the value: not one JSON document
        pos = m.end()
    return True


def _sniff(table: LanguageTable, text: str) -> LanguageSpec | None:
    head = text[:_SNIFF_CHARS]
    m = _SHEBANG.match(head)
    if m:
        interp = re.sub(r"[\d.]+$", "", m.group(1)) or m.group(1)
        for lang in table.languages.values():
            if interp in lang.shebangs or m.group(1) in lang.shebangs:
                return lang
    if "json" in table.languages and _json_prefix(head):
        return table.languages["json"]
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

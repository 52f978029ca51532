"""SymbolicMotifCache as a draft source: code patterns that generalise across names.

A *motif* is one line of code with its identifiers abstracted to placeholders
numbered by first appearance: ``current = current.next`` is ``[I0 = I0.I1]``,
``self.name = name`` is ``[self.I0 = I0]`` (keywords and common names such as
``self`` stay literal), ``a[i], a[j] = a[j], a[i]`` is
``[I0[I1], I0[I2] = I0[I2], I0[I1]]``.

The cache collects motifs from every completed line of the context (buffer and
output so far) and of the corpus (other open buffers). When the line being
written matches a motif's abstract prefix, the rest of the motif is replayed
with the *current* bindings: after ``self.age = `` the motif ``[self.I0 = I0]``
drafts ``age``; after ``nums[lo], nums[hi] = `` it drafts
``nums[hi], nums[lo]`` and the newline and indentation that followed. A
placeholder that the current line has not bound yet replays the motif's own
identifier (tier suffix ``+free``: a guess the controller learns to weigh).

Everything works on token ids: a token is an identifier when its text is one
(with or without a leading space, which is kept as part of the symbol so that
replayed tokens are the ones the tokenizer itself produces); classifications
are cached per token id, so a query is a few dictionary hits.

The tier is the matched prefix length bucket (``p1``, ``p2``, ``p3``, ``p5``),
plus ``+free`` when the draft invents a binding.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Sequence

from structspec.drafts.base import Draft, DraftContext
from structspec.model.base import Model
from structspec.syntax.table import GrammarTableError, load_table

#: Longest line (in tokens) that is abstracted and indexed.
MAX_LINE = 40
#: Index entries kept before the cache starts over (memory bound).
MAX_ENTRIES = 200_000

_IDENT = re.compile(r"( ?)([A-Za-z_][A-Za-z0-9_]*)\Z")
# Token classes.
_LITERAL, _IDENTIFIER, _NEWLINE, _SPACE = 0, 1, 2, 3

#: Names kept literal when the grammar table is unavailable.
_FALLBACK_KEYWORDS = frozenset(
    {"def", "class", "if", "else", "elif", "for", "while", "return", "in", "not", "and", "or",
     "is", "None", "True", "False", "self", "import", "from", "as", "with", "try", "except",
     "finally", "lambda", "yield", "pass", "break", "continue", "function", "var", "let",
     "const", "new", "this", "null", "true", "false", "func", "package"}
)


def _keywords(language: str | None) -> frozenset[str]:
    """Names kept literal for an LSP languageId (the fallback list when unknown)."""
    try:
        lang = load_table().for_language_id(language)
    except GrammarTableError as exc:
        warnings.warn(f"motif source: keyword lists unavailable: {exc}", stacklevel=2)
        lang = None
    if lang is None:
        return _FALLBACK_KEYWORDS
    return _FALLBACK_KEYWORDS | lang.keywords | {w.upper() for w in lang.keywords}


def _placeholder(k: int, space: bool) -> int:
    """Symbol of placeholder ``k`` (negative; literals are their token ids)."""
    return -(2 + 2 * k + int(space))


def _tier(prefix: int) -> str:
    for t in (5, 3, 2):
        if prefix >= t:
            return f"p{t}"
    return "p1"


class MotifSource:
    """The SymbolicMotifCache draft source; see the module docstring."""

    name = "motif"

    def __init__(self, model: Model, *, min_prefix: int = 1, max_line: int = MAX_LINE) -> None:
        self.model = model
        self.min_prefix = max(1, min_prefix)
        self.max_line = max_line
        self._language: str | None = None
        self._keywords = _keywords(None)
        self._classes: dict[str | None, tuple[dict[int, int], dict[int, tuple[str, bool]]]] = {}
        self._class: dict[int, int] = {}
        self._names: dict[int, tuple[str, bool]] = {}
        self._set_language(None)
        self._variants: dict[tuple[str, bool], int | None] = {}
        # abstract prefix -> (motif sequence, start, end of the line body + newline)
        self._index: dict[tuple[int, ...], tuple[Sequence[int], int, int]] = {}
        self._seen_lines: set[tuple[int, ...]] = set()
        self._key: tuple[int, int] | None = None
        self._pos = 0  # tokens of the context scanned
        self._line_start = 0  # first body token of the current line
        self._corpus: dict[int, tuple[Sequence[int], int, int]] = {}  # id -> (seq, pos, start)
        self.calls = 0
        self.seconds = 0.0

    # -- token classes -------------------------------------------------------
    def _set_language(self, language: str | None) -> None:
        """Switch keyword lists (and with them the class cache) to ``language``."""
        self._language = language
        self._keywords = _keywords(language)
        if language not in self._classes:
            self._classes[language] = ({}, {})
        self._class, self._names = self._classes[language]

    def _cls(self, tok: int) -> int:
        c = self._class.get(tok)
        if c is not None:
            return c
        text = self.model.token_bytes(tok).decode("utf-8", "replace")
        if "\n" in text:
            c = _NEWLINE
        elif not text or text.isspace():
            c = _SPACE
        else:
            m = _IDENT.match(text)
            if m and m.group(2) not in self._keywords:
                c = _IDENTIFIER
                name_space = (m.group(2), bool(m.group(1)))
                self._names[tok] = name_space
                self._variants.setdefault(name_space, tok)
            else:
                c = _LITERAL
        self._class[tok] = c
        return c

    def _variant(self, name: str, space: bool) -> int | None:
        """The single token spelling ``name`` (with a leading space if ``space``), if any."""
        key = (name, space)
        if key in self._variants:
            return self._variants[key]
        ids = self.model.tokenize((" " if space else "") + name, add_bos=False)
        tok = ids[0] if len(ids) == 1 else None
        self._variants[key] = tok
        return tok

    def abstract(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], list[str]]:
        """Symbols of a line and the names its placeholders stand for, in order."""
        names: list[str] = []
        slots: dict[str, int] = {}
        out: list[int] = []
        for tok in tokens:
            if self._cls(tok) == _IDENTIFIER:
                name, space = self._names[tok]
                k = slots.get(name)
                if k is None:
                    k = slots[name] = len(names)
                    names.append(name)
                out.append(_placeholder(k, space))
            else:
                out.append(tok)
        return tuple(out), names

    # -- collecting ----------------------------------------------------------
    def _add_line(self, seq: Sequence[int], start: int, end: int) -> None:
        """Index the line ``seq[start:end]`` (body tokens, ending with a newline token)."""
        if end - start < 2:
            return
        body = tuple(seq[start : min(end, start + self.max_line)])
        if body in self._seen_lines:
            return
        if len(self._index) > MAX_ENTRIES:
            self._index.clear()
            self._seen_lines.clear()
        self._seen_lines.add(body)
        symbols, _ = self.abstract(body)
        entry = (seq, start, end)
        index = self._index
        for j in range(self.min_prefix, len(symbols)):
            index[symbols[:j]] = entry

    def _scan(self, seq: Sequence[int], pos: int, start: int, stop: int) -> tuple[int, int]:
        """Index lines completed in ``seq[pos:stop]``; returns (pos, current line start)."""
        cls = self._cls
        for i in range(pos, stop):
            c = cls(seq[i])
            if c == _NEWLINE:
                self._add_line(seq, start, i + 1)
                start = i + 1
            elif c == _SPACE and start == i:
                start = i + 1  # indentation before the body
        return stop, start

    def _sync(self, ctx: DraftContext) -> None:
        toks = ctx.tokens
        if self._key != (ctx.generation, id(toks)) or len(toks) < self._pos:
            self._key = (ctx.generation, id(toks))
            if ctx.language != self._language:
                # Symbols of different keyword lists do not compare: start over.
                self._set_language(ctx.language)
                self._index.clear()
                self._seen_lines.clear()
                self._corpus.clear()
            self._pos, self._line_start = 0, 0
            for seq in ctx.corpus:
                self._scan_corpus(seq)
        # The pending token (last) may still change the line; scan up to it.
        self._pos, self._line_start = self._scan(toks, self._pos, self._line_start, len(toks) - 1)

    def _scan_corpus(self, seq: Sequence[int]) -> None:
        if len(self._corpus) > 64:
            self._corpus.clear()
        entry = self._corpus.get(id(seq))
        if entry is None or entry[0] is not seq or len(seq) < entry[1]:
            entry = (seq, 0, 0)
        pos, start = self._scan(seq, entry[1], entry[2], len(seq))
        self._corpus[id(seq)] = (seq, pos, start)

    # -- proposing -----------------------------------------------------------
    def propose(self, ctx: DraftContext) -> Draft | None:
        t0 = time.perf_counter()
        try:
            return self._propose(ctx)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - t0

    def _propose(self, ctx: DraftContext) -> Draft | None:
        toks = ctx.tokens
        if len(toks) < 2 or ctx.max_tokens <= 0:
            return None
        self._sync(ctx)
        start = self._line_start
        cls = self._cls
        last = toks[-1]
        c_last = cls(last)
        if c_last == _NEWLINE or (c_last == _SPACE and start == len(toks) - 1):
            return None  # at a line start: nothing to match yet
        if len(toks) - start > self.max_line:
            return None
        current = toks[start:]
        symbols, names = self.abstract(current)
        hit = self._index.get(symbols)
        if hit is None:
            return None
        seq, m_start, m_end = hit
        motif = seq[m_start:m_end]
        m_symbols, _ = self.abstract(motif)
        j = len(symbols)
        out: list[int] = []
        free = False
        limit = ctx.max_tokens
        for i in range(j, len(m_symbols)):
            if len(out) >= limit:
                break
            sym = m_symbols[i]
            if sym >= 0:
                out.append(sym)
                continue
            k, space = divmod(-sym - 2, 2)
            if k < len(names):
                tok = self._variant(names[k], bool(space))
                if tok is None:
                    break
                out.append(tok)
            else:
                out.append(motif[i])
                free = True
        if len(out) < limit and m_end < len(seq) and cls(motif[-1]) == _NEWLINE:
            nxt = seq[m_end]
            if cls(nxt) == _SPACE:
                out.append(nxt)  # the indentation of the line that followed
        if not out:
            return None
        return Draft(tuple(out), self.name, _tier(j) + ("+free" if free else ""))

    def observe(self, draft: Draft, accepted: int) -> None:
        pass

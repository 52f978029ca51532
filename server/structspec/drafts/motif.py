"""Line motifs as a draft source: code patterns that generalise across names.

A *motif* is one line of code with its identifiers abstracted to placeholders
numbered by first appearance: ``current = current.next`` is ``[I0 = I0.I1]``,
``self.name = name`` is ``[self.I0 = I0]`` (keywords and common names such as
``self`` stay literal), ``a[i], a[j] = a[j], a[i]`` is
``[I0[I1], I0[I2] = I0[I2], I0[I1]]``.

The cache collects motifs from every completed line of the context (buffer and
output so far) and of the corpus (other open buffers), each line alone and
together with the line before it (not across a blank line): a two-line motif carries names
bound on the first line into the second (``def get_x(self):`` /
``return self._x`` drafts ``y`` after ``def get_y(self):`` / ``return self._``). When the line being
written matches a motif's abstract prefix, the rest of the motif is replayed
with the *current* bindings: after ``self.age = `` the motif ``[self.I0 = I0]``
drafts ``age``; after ``nums[lo], nums[hi] = `` it drafts
``nums[hi], nums[lo]`` and the newline and indentation that followed. A
placeholder that the current line has not bound yet replays the motif's own
identifier (tier suffix ``+free``: a guess the planner learns to weigh).

Everything works on token ids: a token is an identifier when its text is one
(with or without a leading space, which is kept as part of the symbol so that
replayed tokens are the ones the tokenizer itself produces); classifications
are cached per token id, so a query is a few dictionary hits.

The tier is the matched prefix length bucket of the line (``p1``, ``p2``,
``p3``, ``p5``), prefixed with ``l2:`` for a two-line motif, plus ``+free``
when the draft invents a binding. A match whose names are the same as the
motif's is left to the lookup source (it is a plain repeat).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext, TimedPropose
from structspec.drafts.feedback import TierGate
from structspec.model.base import Model

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
from structspec.syntax.table import GrammarTableError, LanguageSpec, load_table

#: Acceptance priors per tier (first drafted token followed by the model), measured
#: offline on gemma-3-270m greedy output, like the ast source's.
PRIORS: dict[str, float] = {
    "motif": 0.5,
    "motif:l2:p0": 0.7,
    "motif:l2:p0+free": 0.5,
    "motif:l2:p1": 0.75,
    "motif:l2:p1+free": 0.55,
    "motif:l2:p2+free": 0.55,
    "motif:l2:p3+free": 0.55,
    "motif:l2:p5+free": 0.5,
    "motif:l2:p5": 0.55,
    "motif:p5": 0.65,
    "motif:p5+free": 0.35,
}
#: Longest line (in tokens) that is abstracted and indexed.
MAX_LINE = 40
#: Tokens of the current line needed before a one-line motif is trusted (two-line
#: motifs match from the first token: the line before makes them specific).
SINGLE_LINE_MIN = 5
#: Index entries kept before the cache starts over (memory bound).
MAX_ENTRIES = 200_000
#: Corpus tokens one generation scans at most: ``propose`` runs on the decode
#: path, and a new corpus (other buffers, the regions around a new place) is
#: tens of thousands of tokens at about 2.6 µs each in this source's Python
#: on a 2-core EPYC (``docs/MEASUREMENTS.md`` §17).
#: The rest is scanned by later generations or at idle time (``prepare``).
CORPUS_SCAN_PER_GENERATION = 8192
#: Tokens ``prepare`` scans between two looks at its ``stop``.
PREPARE_SLICE = 4096
#: Symbols held by the index keys before the cache starts over. A line of n
#: tokens adds n keys of 1..n symbols (n*n/2 references), so the entry count
#: alone let the index reach ~60 MB of objects (+200 MB RSS in ``serve``);
#: this bound keeps it near 25 MB.
MAX_KEY_SYMBOLS = 3_000_000

_IDENT = re.compile(r"( ?)([A-Za-z_][A-Za-z0-9_]*)\Z")
# Token classes.
_LITERAL, _IDENTIFIER, _NEWLINE, _SPACE = 0, 1, 2, 3


def _keywords(lang: LanguageSpec | None) -> frozenset[str]:
    """Names kept literal in ``lang`` (the table's generic ones when unknown)."""
    try:
        table = load_table()
    except GrammarTableError as exc:
        warnings.warn(f"motif source: keyword lists unavailable: {exc}", stacklevel=2)
        return frozenset()
    common = table.generic.keywords
    if lang is None:
        return common
    return common | lang.keywords | {w.upper() for w in lang.keywords}


#: An indexed line: (sequence, line start, line end, previous line start, previous line end).
_Entry = tuple[Sequence[int], int, int, int, int]


@dataclass
class _Cursor:
    """Scan position in a token sequence: next token to scan, current and previous line."""

    pos: int = 0
    start: int = 0  # first body token of the current line
    prev_start: int = 0  # body of the line before, if not blank (else prev_end == prev_start)
    prev_end: int = 0


def _placeholder(k: int, space: bool) -> int:
    """Symbol of placeholder ``k`` (negative; literals are their token ids)."""
    return -(2 + 2 * k + int(space))


def _tier(prefix: int) -> str:
    for t in (5, 3, 2, 1):
        if prefix >= t:
            return f"p{t}"
    return "p0"


class MotifSource(TimedPropose):
    """The line-motif draft source; see the module docstring."""

    name = "motif"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> MotifSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls(model)

    def __init__(
        self,
        model: Model,
        *,
        min_prefix: int = 1,
        max_line: int = MAX_LINE,
        single_line_min: int = SINGLE_LINE_MIN,
    ) -> None:
        self.model = model
        self.min_prefix = max(1, min_prefix)
        self.single_line_min = single_line_min
        self.max_line = max_line
        self._language: LanguageSpec | None = None
        self._keywords = _keywords(None)
        self._classes: dict[str | None, tuple[dict[int, int], dict[int, tuple[str, bool]]]] = {}
        self._class: dict[int, int] = {}
        self._names: dict[int, tuple[str, bool]] = {}
        self._set_language(None)
        self._variants: dict[tuple[str, bool], int | None] = {}
        # abstract prefix of a line -> where the line is; _index2: of the line before + the line
        self._index: dict[tuple[int, ...], _Entry] = {}
        self._index2: dict[tuple[int, ...], _Entry] = {}
        self._seen: set[tuple[int, ...]] = set()
        #: Symbols held by the keys of both indexes (``MAX_KEY_SYMBOLS``).
        self._symbols = 0
        self._key: tuple[int, int] | None = None
        self._cur = _Cursor()
        self._corpus: dict[int, tuple[Sequence[int], _Cursor]] = {}
        self.gate = TierGate()

    # -- token classes -------------------------------------------------------
    def _set_language(self, language: LanguageSpec | None) -> None:
        """Switch keyword lists (and with them the class cache) to ``language``."""
        self._language = language
        self._keywords = _keywords(language)
        key = language.name if language is not None else None
        if key not in self._classes:
            self._classes[key] = ({}, {})
        self._class, self._names = self._classes[key]

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
    def _add_line(self, seq: Sequence[int], cur: _Cursor, end: int) -> None:
        """Index the line ``seq[cur.start:end]`` (ending with a newline token) alone and
        together with the line before it (unless that is blank)."""
        start = cur.start
        if end - start < 2 or end - start > self.max_line:
            return
        body = tuple(seq[start:end])
        prev = tuple(seq[cur.prev_start : cur.prev_end]) if cur.prev_end > cur.prev_start else ()
        entries = len(self._index) + len(self._index2)
        if entries > MAX_ENTRIES or self._symbols > MAX_KEY_SYMBOLS:
            self._index.clear()
            self._index2.clear()
            self._seen.clear()
            self._symbols = 0
        key = prev + body
        if key in self._seen:
            return
        self._seen.add(key)
        entry = (seq, start, end, cur.prev_start, cur.prev_end)
        symbols, _ = self.abstract(body)
        index = self._index
        for j in range(self.min_prefix, len(symbols)):
            index[symbols[:j]] = entry
            self._symbols += j
        if prev:
            symbols, _ = self.abstract(prev + body)
            index = self._index2
            for j in range(len(prev), len(symbols)):  # from the line's start on
                index[symbols[:j]] = entry
                self._symbols += j

    def _scan(self, seq: Sequence[int], cur: _Cursor, stop: int) -> None:
        """Index the lines completed in ``seq[cur.pos:stop]``, advancing ``cur``."""
        cls = self._cls
        for i in range(cur.pos, stop):
            c = cls(seq[i])
            if c == _NEWLINE:
                if i > cur.start:  # not a blank line
                    self._add_line(seq, cur, i + 1)
                    cur.prev_start, cur.prev_end = cur.start, i + 1
                else:  # a blank line ends a block: no pairs across it
                    cur.prev_start = cur.prev_end = 0
                cur.start = i + 1
            elif c == _SPACE and cur.start == i:
                cur.start = i + 1  # indentation before the body
        cur.pos = max(cur.pos, stop)

    def _sync(self, ctx: DraftContext) -> None:
        toks = ctx.tokens
        if self._key != (ctx.generation, id(toks)) or len(toks) < self._cur.pos:
            self._key = (ctx.generation, id(toks))
            self._use_language(ctx.language_spec())
            self._cur = _Cursor()
            left = CORPUS_SCAN_PER_GENERATION
            for seq in ctx.corpus:
                if left <= 0:
                    break
                left -= self._scan_corpus(seq, left)
        # The pending token (last) may still change the line; scan up to it.
        self._scan(toks, self._cur, len(toks) - 1)

    def _use_language(self, language: LanguageSpec | None) -> None:
        if language is not self._language:
            # Symbols of different keyword lists do not compare: start over.
            self._set_language(language)
            self._index.clear()
            self._index2.clear()
            self._seen.clear()
            self._symbols = 0
            self._corpus.clear()

    def _scan_corpus(self, seq: Sequence[int], most: int) -> int:
        """Scan at most ``most`` more tokens of the corpus sequence ``seq``; how many were."""
        if len(self._corpus) > 64:
            self._corpus.clear()
        entry = self._corpus.get(id(seq))
        if entry is None or entry[0] is not seq or len(seq) < entry[1].pos:
            entry = (seq, _Cursor())
            self._corpus[id(seq)] = entry
        cur = entry[1]
        start = cur.pos
        self._scan(seq, cur, min(len(seq), start + most))
        return cur.pos - start

    def prepare(self, ctx: DraftContext, stop: Callable[[], bool]) -> None:
        """Idle time: scan the corpus that generations scan a slice each, until ``stop()``."""
        self._use_language(ctx.language_spec())
        for seq in ctx.corpus:
            while not stop() and self._scan_corpus(seq, PREPARE_SLICE):
                pass

    # -- proposing -----------------------------------------------------------
    def _propose(self, ctx: DraftContext) -> Draft | None:
        toks = ctx.tokens
        if len(toks) < 2 or ctx.max_tokens <= 0:
            return None
        self._sync(ctx)
        cur = self._cur
        start = cur.start
        c_last = self._cls(toks[-1])
        if c_last == _NEWLINE or (c_last == _SPACE and start == len(toks) - 1):
            return self._line_start(ctx, c_last == _NEWLINE)
        if len(toks) - start > self.max_line:
            return None
        current = toks[start:]
        # Two-line motifs first: names bound on the line before carry over.
        if cur.prev_end > cur.prev_start:
            prev = toks[cur.prev_start : cur.prev_end]
            symbols, names = self.abstract(prev + current)
            hit = self._index2.get(symbols)
            if hit is not None:
                draft = self._replay(ctx, hit, symbols, names, prev + current, True)
                if draft is not None:
                    return draft
        if len(current) < self.single_line_min:
            return None  # a short prefix of one line matches too many lines to be right
        symbols, names = self.abstract(current)
        hit = self._index.get(symbols)
        if hit is None:
            return None
        return self._replay(ctx, hit, symbols, names, current, False)

    def _line_start(self, ctx: DraftContext, after_newline: bool) -> Draft | None:
        """At the start of a line: the line that followed a line shaped like the last one
        (tier ``l2:p0``), with its indentation when that is still to come."""
        toks, cur = ctx.tokens, self._cur
        # After the newline, the line it ends; after the indentation, the line before.
        prev = toks[cur.start :] if after_newline else toks[cur.prev_start : cur.prev_end]
        if len(prev) < 2 or len(prev) > self.max_line:
            return None
        symbols, names = self.abstract(prev)
        hit = self._index2.get(symbols)
        if hit is None:
            return None
        head: list[int] = []
        if after_newline:
            seq, m_start = hit[0], hit[1]
            if m_start > hit[4] and self._cls(seq[m_start - 1]) == _SPACE:
                head = [seq[m_start - 1]]  # the motif line's indentation
        return self._replay(ctx, hit, symbols, names, prev, True, head)

    def _replay(
        self,
        ctx: DraftContext,
        hit: _Entry,
        symbols: tuple[int, ...],
        names: list[str],
        current: Sequence[int],
        two_lines: bool,
        head: Sequence[int] = (),
    ) -> Draft | None:
        seq, m_start, m_end, p_start, p_end = hit
        motif = list(seq[m_start:m_end])
        if two_lines:
            motif = [*seq[p_start:p_end], *motif]
        j = len(symbols)
        body_j = j - (p_end - p_start) if two_lines else j  # matched tokens of the line itself
        if body_j >= 2 and all(motif[i] == current[i] for i in range(j)):
            # Same names too: a plain repeat, which the lookup source drafts already.
            return None
        m_symbols, _ = self.abstract(motif)
        cls = self._cls
        out: list[int] = list(head)
        free = False
        limit = ctx.max_tokens
        complete = True
        for i in range(j, len(m_symbols)):
            if len(out) >= limit:
                complete = False
                break
            sym = m_symbols[i]
            if sym >= 0:
                out.append(sym)
                continue
            k, space = divmod(-sym - 2, 2)
            if k < len(names):
                tok = self._variant(names[k], bool(space))
                if tok is None:
                    complete = False
                    break
                out.append(tok)
            else:
                out.append(motif[i])
                free = True
        if complete and len(out) < limit and m_end < len(seq) and cls(motif[-1]) == _NEWLINE:
            nxt = seq[m_end]
            if cls(nxt) == _SPACE:
                out.append(nxt)  # the indentation of the line that followed
        if not out:
            return None
        tier = ("l2:" if two_lines else "") + _tier(body_j) + ("+free" if free else "")
        if not self.gate.allows(tier):
            return None
        return Draft(tuple(out), self.name, tier)

    def observe(self, draft: Draft, accepted: int) -> None:
        self.gate.observe(draft.tier, accepted)

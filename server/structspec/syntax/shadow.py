"""A tree-sitter parse of the text around the cursor, kept up to date incrementally.

``ShadowTree`` owns a parser and the language's ``grammars/<lang>/shadow.scm``
queries. Text only ever grows at the end during a generation, so an update is
``tree.edit`` (an insertion at the end) and a reparse that reuses the old tree;
reparsing is lazy: it happens when someone asks about the cursor.

``cursor(tail_start)`` answers what a drafter must know before proposing syntax:

- ``skip``: the cursor is inside a ``@skip`` capture (string literal, comment)
  that has not ended;
- ``broken``: an ERROR node lies in finished code before ``tail_start`` (the
  start of the statement being typed): the parse around the cursor is not to
  be trusted. An ERROR that reaches the cursor is just the half-typed tail and
  does not count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from structspec.syntax.table import LanguageSpec

#: ERROR nodes closer than this to the window start are artefacts of cutting the
#: window in the middle of a construct, not errors in the buffer.
_WINDOW_SLACK = 64
#: How far back before the statement being typed an ERROR node counts as next to it
#: (an error further up, or an artefact of a buffer shown from its middle, does not).
_ERROR_LOOKBACK = 240


@dataclass(frozen=True, slots=True)
class CursorInfo:
    skip: bool
    broken: bool


class ShadowTree:
    """Incrementally parsed text ending at the cursor (see the module docstring)."""

    def __init__(self, lang: LanguageSpec) -> None:
        import tree_sitter as ts

        grammar = lang.grammar()
        if grammar is None:
            raise ValueError(f"no tree-sitter grammar for {lang.name}")
        self.lang = lang
        self._ts = ts
        self._parser = ts.Parser(grammar)
        self._query, self._errors = _queries(lang)
        self.data = b""
        self._tree: Any | None = None
        self._dirty = False
        self._row = 0  # point of the end of the text
        self._col = 0
        self.line_starts: list[int] = [0]
        self._slack = 0
        self.parses = 0
        self.full_parses = 0

    def reset(self, data: bytes, *, cut: bool = False) -> None:
        """Start over with ``data``; ``cut``: it starts in the middle of the buffer."""
        self._slack = _WINDOW_SLACK if cut else 0
        self.data = b""
        self._tree = None
        self._row, self._col = 0, 0
        self.line_starts = [0]
        self.append(data)

    def append(self, data: bytes) -> None:
        if not data:
            return
        start = len(self.data)
        start_point = (self._row, self._col)
        self.data += data
        nl = data.count(b"\n")
        if nl:
            pos = start
            for _ in range(nl):
                pos = self.data.index(b"\n", pos) + 1
                self.line_starts.append(pos)
            self._row += nl
            self._col = len(data) - data.rindex(b"\n") - 1
        else:
            self._col += len(data)
        if self._tree is not None:
            self._tree.edit(
                start_byte=start,
                old_end_byte=start,
                new_end_byte=len(self.data),
                start_point=start_point,
                old_end_point=start_point,
                new_end_point=(self._row, self._col),
            )
        self._dirty = True

    def tree(self) -> Any:
        """The current tree (reparsed incrementally if text was appended)."""
        if self._dirty or self._tree is None:
            old = self._tree
            if old is None:
                self._tree = self._parser.parse(self.data)
            else:
                self._tree = self._parser.parse(self.data, old)
            self.parses += 1
            self.full_parses += old is None
            self._dirty = False
        return self._tree

    def line_start(self, line_no: int) -> int:
        """Byte offset of the start of line ``line_no`` (0-based, clamped)."""
        return self.line_starts[max(0, min(line_no, len(self.line_starts) - 1))]

    def cursor(self, tail_start: int) -> CursorInfo:
        """What encloses the end of the text; see the module docstring."""
        root = self.tree().root_node
        cur = len(self.data)
        skip = False
        if self._query is not None and cur > 0:
            qc = self._ts.QueryCursor(self._query)
            qc.set_byte_range(max(0, cur - 1), cur)
            for node in qc.captures(root).get("skip", []):
                if node.start_byte < cur <= node.end_byte:
                    skip = skip or _unfinished(node, cur, self.data)
        broken = False
        if root.has_error:
            # Errors on the first line are artefacts of text shown from its middle.
            lo = max(self._slack, self.line_start(1), tail_start - _ERROR_LOOKBACK)
            if tail_start > lo:
                qc = self._ts.QueryCursor(self._errors)
                qc.set_byte_range(lo, tail_start)
                for nodes in qc.captures(root).values():
                    if any(
                        lo <= n.start_byte and n.end_byte <= tail_start and not _inside_error(n)
                        for n in nodes
                    ):
                        broken = True
                        break
        return CursorInfo(skip, broken)


_QUERIES: dict[str, tuple[Any | None, Any]] = {}


def _queries(lang: LanguageSpec) -> tuple[Any | None, Any]:
    """The compiled ``shadow.scm`` and ERROR queries of a language (compiled once per
    process: a large grammar's query takes a noticeable time to compile)."""
    key = f"{lang.name}:{lang.grammar_package}:{lang.grammar_function}"
    hit = _QUERIES.get(key)
    if hit is None:
        import tree_sitter as ts

        grammar = lang.grammar()
        if grammar is None:
            raise ValueError(f"no tree-sitter grammar for {lang.name}")
        source = lang.query_source("shadow") or ""
        query = ts.Query(grammar, source) if source.strip() else None
        hit = _QUERIES[key] = (query, ts.Query(grammar, "(ERROR) @error"))
    return hit


def _inside_error(node: Any) -> bool:
    """Whether an ancestor is an ERROR too (the outermost one is what counts)."""
    parent = node.parent
    while parent is not None:
        if parent.type == "ERROR":
            return True
        parent = parent.parent
    return False


def _unfinished(node: Any, cur: int, data: bytes) -> bool:
    """Whether a string/comment node that reaches ``cur`` still goes on after it."""
    if node.end_byte > cur:
        return True
    if node.has_error or node.is_missing:
        return True
    last = node.child(node.child_count - 1) if node.child_count else None
    if last is not None and last.is_missing:
        return True
    if "comment" in node.type:
        text = data[node.start_byte : node.end_byte]
        # A line comment runs to the end of the line; a block comment ends with its closer.
        return not (text.endswith(b"*/") or text.endswith(b"-->"))
    return False

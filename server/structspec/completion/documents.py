"""Open documents as an editor sends them: full text plus incremental edits.

Positions are LSP positions: a zero-based line and a column counted in the
code units of the negotiated position encoding (UTF-16 unless the client
offered another). Everything here is forgiving, because an editor's view and
ours can drift apart (a lost notification, a buggy client): a position past the
end of a line is clamped to the line's end, a line past the end of the document
to the document's end, a reversed range is put in order, and an edit to an
unknown document is reported to the caller rather than raised.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from urllib.parse import unquote, urlparse

#: Line breaks as LSP defines them.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)


def uri_path(uri: str) -> str:
    """The file path of a document URI (``uri`` itself when it has none or is malformed)."""
    try:
        return unquote(urlparse(uri).path) or uri
    except ValueError:  # a malformed URI (``file://[x``) names no path we can read
        return uri


#: UTF-8 continuation bytes: every byte of a character but its first.
_CONTINUATION = bytes(range(0x80, 0xC0))


def column_to_index(line: str, column: int, encoding: str) -> int:
    """Python index in ``line`` of an LSP column (clamped to ``[0, len(line)]``).

    A column that falls inside a character (half of a surrogate pair, the middle
    of a UTF-8 sequence) resolves to the start of the next character. The work is
    the C string functions' over ``line[:column]`` (a character is at least one
    code unit), not a Python step per character: a keystroke at the end of a
    1 MB minified line with one non-ASCII character cost 0.2 s per conversion.
    """
    if column <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(column, len(line))
    head = line[:column]
    if encoding == UTF16:
        return _utf16_index(head, column)
    # UTF-8: the characters that start before byte ``column``.
    data = head.encode("utf-8", "surrogatepass")
    return len(data[:column].translate(None, _CONTINUATION))


#: Characters measured at once by the codec in ``_utf16_index``.
_UTF16_PIECE = 4096


def _utf16_units(text: str) -> int:
    """UTF-16 code units of ``text`` (a lone surrogate is one), counted by the codec."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _utf16_index(head: str, column: int) -> int:
    """Index in ``head`` of UTF-16 column ``column`` (``head``: the line's first ``column``
    characters, which hold at least ``column`` units if the line does).

    Pieces are measured by the codec, and only the piece that holds the column
    is walked a character at a time: a Python step per astral character (a line
    of a million emoji) cost half a second per conversion.
    """
    units = start = 0
    while start < len(head):
        piece = head[start : start + _UTF16_PIECE]
        width = _utf16_units(piece)
        if units + width >= column:
            for i, ch in enumerate(piece):
                if units >= column:
                    return start + i
                units += 2 if ch >= "\U00010000" else 1
                if units >= column:  # at its end, or inside it: the next character
                    return start + i + 1
        units += width
        start += len(piece)
    return len(head)


def index_to_column(line: str, index: int, encoding: str) -> int:
    """LSP column of Python index ``index`` in ``line``."""
    index = max(0, min(index, len(line)))
    if encoding == UTF32 or line.isascii():
        return index
    head = line[:index]
    if encoding == UTF16:
        return _utf16_units(head)
    return len(head.encode("utf-8", "surrogatepass"))


@dataclass
class Document:
    """One open document. ``text`` is replaced (never mutated) by every edit."""

    uri: str
    language: str
    version: int
    text: str
    _line_starts: list[int] | None = field(default=None, repr=False)
    #: Offset just after the last incremental edit (where the user is typing),
    #: ``None`` until one arrives or after a full-text replacement.
    edited_at: int | None = field(default=None, repr=False)
    #: Changes with every open and edit, in the whole store (``DocumentStore``):
    #: what caches of the text are keyed by. The client's ``version`` is not
    #: enough: editors start it again at 1 when a file is reopened.
    revision: int = field(default=0, repr=False)

    def line_starts(self) -> list[int]:
        """Offsets where each line starts (computed once per text)."""
        if self._line_starts is None:
            self._line_starts = [0, *(m.end() for m in _LINE_BREAK.finditer(self.text))]
        return self._line_starts

    def line_bounds(self, line: int) -> tuple[int, int]:
        """``(start, end)`` offsets of ``line`` without its line break (clamped)."""
        starts = self.line_starts()
        line = max(0, min(line, len(starts) - 1))
        start = starts[line]
        if line + 1 < len(starts):
            end = starts[line + 1]
            # Drop the break itself: "\r\n" is two characters.
            end -= 2 if self.text.startswith("\r\n", end - 2) and end - 2 >= start else 1
        else:
            end = len(self.text)
        return start, end

    def line_text(self, line: int) -> str:
        start, end = self.line_bounds(line)
        return self.text[start:end]

    def offset_at(self, line: int, column: int, encoding: str = UTF16) -> int:
        """Offset of an LSP position; past-the-end lines and columns are clamped."""
        starts = self.line_starts()
        if line < 0:
            return 0
        if line >= len(starts):
            return len(self.text)
        start, end = self.line_bounds(line)
        # A column counts at least one unit per character: the line up to it will do.
        head = self.text[start : min(end, start + max(0, column))]
        return start + column_to_index(head, column, encoding)

    def position_at(self, offset: int, encoding: str = UTF16) -> tuple[int, int]:
        """LSP ``(line, column)`` of an offset (clamped to the text)."""
        import bisect

        offset = max(0, min(offset, len(self.text)))
        starts = self.line_starts()
        line = bisect.bisect_right(starts, offset) - 1
        start, end = self.line_bounds(line)
        return line, index_to_column(self.text[start:end], min(offset, end) - start, encoding)

    def replace(self, start: int, end: int, new_text: str) -> None:
        """Replace ``text[start:end]`` (offsets clamped and ordered)."""
        n = len(self.text)
        start, end = max(0, min(start, n)), max(0, min(end, n))
        if end < start:
            start, end = end, start
        self.text = self.text[:start] + new_text + self.text[end:]
        self._line_starts = None
        self.edited_at = start + len(new_text)


def _split_lines(text: str) -> list[str]:
    """``text`` as lines, each with its line break; the last (maybe empty) has none."""
    lines = []
    pos = 0
    for m in _LINE_BREAK.finditer(text):
        lines.append(text[pos : m.end()])
        pos = m.end()
    lines.append(text[pos:])
    return lines


def _without_break(line: str) -> str:
    if line.endswith("\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith(("\n", "\r")) else line


#: Edits of one ``didChange`` applied one by one to the text; past this, as lines.
_EDITS_ONE_BY_ONE = 8


def _exact_offsets(
    doc: Document, positions: Sequence[tuple[int, int]], encoding: str
) -> list[int] | None:
    """Offsets of LSP positions in ascending order; ``None`` if one needs clamping.

    Clamping: past the last line or its line's end, or inside a character. Each
    position converts from the one before it on its line, so a line's
    positions cost one pass over it (a Replace All on a minified line).
    """
    offsets: list[int] = []
    line_no, base, column_at, index_at, text = -1, 0, 0, 0, ""
    for line, column in positions:
        if line != line_no:
            if not 0 <= line < len(doc.line_starts()):
                return None
            start, end = doc.line_bounds(line)
            line_no, base, column_at, index_at, text = line, start, 0, 0, doc.text[start:end]
        step = column - column_at
        if step < 0:
            return None
        segment = text[index_at : index_at + step]  # a character is at least one unit
        index = column_to_index(segment, step, encoding)
        if index_to_column(segment, index, encoding) != step:
            return None
        column_at, index_at = column, index_at + index
        offsets.append(base + index_at)
    return offsets


def _apply_at_once(doc: Document, changes: Sequence[TextChange], encoding: str) -> bool:
    """Apply ``changes`` in one pass over the text when each ends before the one before
    it starts; ``False`` (nothing applied) for any other batch.

    That is how editors send one operation's edits (VS Code's Replace All and
    multi-cursor typing: the last in the document first), so that no edit
    moves the positions of the ones after it: each position is read in the
    text as it was, and the pieces between the edits are joined once. But
    where an edit ends at a line start after a ``\\r`` and the edit before
    starts there, a ``\\n`` that one writes would join the ``\\r`` and move
    the line: such a batch, and one with positions that need clamping (past a
    line's end, inside a character), is left to the edit-by-edit paths. On
    one line of 220,000 characters, ``_Lines`` re-split the whole line per
    edit: 2,857 edits took 8.8 s, 17.7 s with one non-ASCII character in it.
    """
    ranges = [change.range for change in changes]
    if not ranges or any(r is None for r in ranges):
        return False
    ordered: list[tuple[int, int]] = []  # the positions in the text's order
    for r in reversed(ranges):
        assert r is not None
        first, last = (r.start_line, r.start_column), (r.end_line, r.end_column)
        if not (ordered[-1] if ordered else first) <= first <= last:
            return False
        ordered += (first, last)
    offsets = _exact_offsets(doc, ordered, encoding)
    if offsets is None:
        return False
    text = doc.text
    pieces: list[str] = []
    at = 0
    for k, change in enumerate(reversed(changes)):
        start, end = offsets[2 * k], offsets[2 * k + 1]
        if k and start == at and text[at - 1 : at] == "\r":
            return False  # (nothing is applied before the text is joined)
        pieces += (text[at:start], change.text)
        at = end
    pieces.append(text[at:])
    doc.text = "".join(pieces)
    doc._line_starts = None
    doc.edited_at = offsets[0] + len(changes[-1].text)  # the first in the text: nothing moved it
    return True


class _Lines:
    """A document's text as a list of lines while many edits of one ``didChange`` apply.

    An edit re-splits only the lines it touches (and the line before, whose
    ``\\r`` may join a ``\\n`` it inserts), then moves the list's pointers:
    thousands of edits on a 100,000-line document cost milliseconds, not a
    copy of the text and its line starts per edit. Positions clamp and order
    exactly as ``Document.offset_at`` and ``Document.replace`` do.
    """

    def __init__(self, text: str) -> None:
        self.lines = _split_lines(text)

    @classmethod
    def apply(cls, doc: Document, changes: Iterable[TextChange], encoding: str) -> None:
        """Apply ``changes`` to ``doc`` in order, joining the text once at the end."""
        lines = cls(doc.text)
        edited_at = doc.edited_at  # an offset: valid until an edit applies
        typed_at: tuple[int, int] | None = None  # (line, index) after the last edit
        for change in changes:
            if change.range is None:
                lines, edited_at, typed_at = cls(change.text), None, None
                continue
            r = change.range
            start = lines.position(r.start_line, r.start_column, encoding)
            end = lines.position(r.end_line, r.end_column, encoding)
            typed_at = lines.replace(min(start, end), max(start, end), change.text)
        doc.text = "".join(lines.lines)
        doc._line_starts = [0, *accumulate(len(line) for line in lines.lines[:-1])]
        if typed_at is not None:
            edited_at = doc._line_starts[typed_at[0]] + typed_at[1]
        doc.edited_at = edited_at

    def position(self, line: int, column: int, encoding: str) -> tuple[int, int]:
        """``(line, index in it)`` of an LSP position, clamped as ``Document.offset_at``."""
        if line < 0:
            return 0, 0
        if line >= len(self.lines):
            return len(self.lines) - 1, len(self.lines[-1])
        return line, column_to_index(_without_break(self.lines[line]), column, encoding)

    def replace(
        self, start: tuple[int, int], end: tuple[int, int], new_text: str
    ) -> tuple[int, int]:
        """Replace the text from ``start`` to ``end``; the position just after ``new_text``."""
        first = max(start[0] - 1, 0)
        last = end[0]
        old = self.lines[first : last + 1]
        before = sum(len(line) for line in old[: start[0] - first]) + start[1]
        after = sum(len(line) for line in old[: last - first]) + end[1]
        region = "".join(old)
        pieces = _split_lines(region[:before] + new_text + region[after:])
        if last + 1 < len(self.lines):
            pieces.pop()  # the region ends with line ``last``'s break: an empty last piece
        self.lines[first : last + 1] = pieces
        offset = before + len(new_text)
        for i, piece in enumerate(pieces):
            if offset < len(piece) or i == len(pieces) - 1:
                return first + i, offset
            offset -= len(piece)
        return first, 0  # unreachable: ``pieces`` is never empty


@dataclass(frozen=True)
class Range:
    """An LSP range: ``(line, column)`` pairs in the store's encoding."""

    start_line: int
    start_column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class TextChange:
    """One content change of ``didChange``: ``range=None`` replaces the whole text."""

    text: str
    range: Range | None = None


class UnknownDocument(KeyError):
    """An edit or request named a document that is not open."""


class DocumentStore:
    """The open documents, keyed by URI."""

    def __init__(self, encoding: str = UTF16) -> None:
        self.encoding = encoding if encoding in ENCODINGS else UTF16
        self._docs: dict[str, Document] = {}
        self._revisions = itertools.count(1)

    def __contains__(self, uri: object) -> bool:
        return uri in self._docs

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(list(self._docs.values()))

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def open(self, uri: str, language: str, version: int, text: str) -> Document:
        """Open (or reopen, replacing) a document."""
        doc = Document(uri, language or "", version, text, revision=next(self._revisions))
        self._docs[uri] = doc
        return doc

    def change(self, uri: str, version: int, changes: Iterable[TextChange]) -> Document:
        """Apply ``changes`` in order. Raises ``UnknownDocument`` for a URI not open.

        A few edits replace the text one by one; more (Replace All, many
        cursors: thousands in one ``didChange``) are applied in one pass over
        the text when each ends before the one before it starts, as editors
        send them (``_apply_at_once``), else go through ``_Lines``, so that
        each costs the lines it touches instead of a copy of the whole text.
        """
        doc = self._docs.get(uri)
        if doc is None:
            raise UnknownDocument(uri)
        changes = list(changes)
        if len(changes) > _EDITS_ONE_BY_ONE:
            if not _apply_at_once(doc, changes, self.encoding):
                _Lines.apply(doc, changes, self.encoding)
            doc.version, doc.revision = version, next(self._revisions)
            return doc
        for change in changes:
            if change.range is None:
                doc.text = change.text
                doc._line_starts = None
                doc.edited_at = None
                continue
            r = change.range
            start = doc.offset_at(r.start_line, r.start_column, self.encoding)
            end = doc.offset_at(r.end_line, r.end_column, self.encoding)
            doc.replace(start, end, change.text)
        doc.version, doc.revision = version, next(self._revisions)
        return doc

    def splice(self, uri: str, version: int, start: int, end: int, new_text: str) -> Document:
        """Replace ``text[start:end]`` (``Document.replace``); raises ``UnknownDocument``."""
        doc = self._docs.get(uri)
        if doc is None:
            raise UnknownDocument(uri)
        doc.replace(start, end, new_text)
        doc.version, doc.revision = version, next(self._revisions)
        return doc

    def close(self, uri: str) -> bool:
        """Forget a document; ``False`` when it was not open."""
        return self._docs.pop(uri, None) is not None

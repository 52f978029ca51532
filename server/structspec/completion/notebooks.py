"""Notebooks: a cell is completed with the cells around it as its context.

An editor that syncs notebooks (LSP ``notebookDocument/*``) sends one as an
ordered list of cells, each a text document of its own. A cell alone is a few
lines; the model writes far better code when it sees the imports, functions
and data of the cells before it (and the cells after it, as the
fill-in-the-middle suffix), as the user reading the notebook does. So the
cells of one language are joined, in the notebook's order, into one
*notebook text* (``joined_uri``: the notebook's URI with the language as its
fragment), which the service keeps as one of its documents; a completion in
a cell is a completion in that text at the cell's place (``CellPlace``):
requests and cursor reports move down by the lines of the cells before it,
and suggestions move back up.

Cells are joined with one blank line between them (``separator``): a cell of
``n`` lines puts the next one ``n + 1`` lines further. A cell that ends in a
lone ``\\r`` is followed by ``\\r\\n\\n`` instead of ``\\n\\n``: a ``\\r``
followed by ``\\n`` would be one line break, joining two of the cells' lines.

Each cell keeps its own text (a ``Document``: its edits apply and clamp as any
document's). After every event the service joins the notebook's texts again
(``NotebookStore.texts``) and applies to its documents the difference from
what it has (``difference``): one edit where the user typed, so that pre-warm
and the place typed at work as in any file. A notebook is a few thousand
lines at most: joining it again per keystroke costs well under a millisecond.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from structspec.completion.documents import Document, DocumentStore, TextChange
from structspec.completion.types import CompletionRequest, Suggestion

log = logging.getLogger(__name__)

#: A column past the end of any line: ``Document.offset_at`` clamps it to the line's end.
LINE_END = 2**31 - 1


@dataclass(frozen=True)
class CellText:
    """A cell's text document as the editor opened it."""

    uri: str
    language: str
    version: int
    text: str


@dataclass(frozen=True)
class CellEdit:
    """A cell's ``didChange``: its new version and the changes, in order."""

    uri: str
    version: int
    changes: tuple[TextChange, ...]


@dataclass(frozen=True)
class NotebookChange:
    """What one ``notebookDocument/didChange`` says, in the order it applies.

    ``start``/``deleted``/``inserted``: the cell list's splice (``inserted``
    the cells' URIs; ``start`` ``None``: the list is unchanged), then the cell
    documents ``opened`` and ``closed``, then the cells' text ``edits``.
    """

    start: int | None = None
    deleted: int = 0
    inserted: tuple[str, ...] = ()
    opened: tuple[CellText, ...] = ()
    closed: tuple[str, ...] = ()
    edits: tuple[CellEdit, ...] = ()


@dataclass(frozen=True)
class CellPlace:
    """A position in a cell, as a position in its notebook text."""

    uri: str  # of the notebook text
    line: int
    character: int
    #: The cell's first line in the notebook text: a suggestion's line minus it is the cell's.
    first_line: int

    def request(self, cell: CompletionRequest) -> CompletionRequest:
        """``cell`` (a request in the cell) asked in the notebook text."""
        return replace(cell, uri=self.uri, line=self.line, character=self.character)

    def suggestion(self, suggestion: Suggestion, cell: CompletionRequest) -> Suggestion:
        """A suggestion in the notebook text (where this place was when its text was read),
        in the cell of the request ``cell``."""
        return replace(suggestion, uri=cell.uri, line=suggestion.line - self.first_line)


def joined_uri(notebook_uri: str, language: str) -> str:
    """The URI of a notebook's text of ``language`` (its file name is the notebook's)."""
    return f"{notebook_uri}#{language}"


def separator(cell_text: str) -> str:
    """What follows a cell in the notebook text: one blank line (module docstring)."""
    return "\r\n\n" if cell_text.endswith("\r") else "\n\n"


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, found by halving: C compares, no Python loop."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def difference(old: str, new: str) -> tuple[int, int, str]:
    """One edit that turns ``old`` into ``new``: replace ``old[start:end]`` with the text."""
    start = _common_prefix(old, new)
    # The common suffix, within what the prefix left of both.
    room = min(len(old), len(new)) - start
    lo, hi = 0, room
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid : len(old) - lo] == new[len(new) - mid : len(new) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return start, len(old) - lo, new[start : len(new) - lo]


class NotebookStore:
    """The open notebooks: their cells in order and each cell's text.

    Everything here is forgiving in the way ``DocumentStore`` is: a splice
    outside the cell list is clamped, a cell listed without its text is left
    out of the notebook text until its text comes, an edit of an unknown cell
    is logged and dropped.
    """

    def __init__(self, documents: DocumentStore) -> None:
        #: The service's documents: their position encoding is the cells' too.
        self._documents = documents
        self._cells = DocumentStore(documents.encoding)
        self._order: dict[str, list[str]] = {}  # notebook URI -> its cells' URIs
        self._notebook_of: dict[str, str] = {}  # cell URI -> notebook URI

    def open(self, uri: str, cells: Sequence[str], texts: Iterable[CellText]) -> None:
        """Open (or reopen, replacing) notebook ``uri``: its cells' URIs in order, their texts."""
        if uri in self._order:
            self.close(uri)
        self._order[uri] = list(dict.fromkeys(cells))  # a cell listed twice: its first place
        for cell in texts:
            self._open_cell(uri, cell)

    def change(self, uri: str, change: NotebookChange) -> bool:
        """Apply ``change`` to notebook ``uri``; ``False`` when it is not open."""
        order = self._order.get(uri)
        if order is None:
            return False
        if change.start is not None:
            start = max(0, min(change.start, len(order)))
            end = min(len(order), start + max(0, change.deleted))
            kept = set(order[:start] + order[end:])
            order[start:end] = [c for c in dict.fromkeys(change.inserted) if c not in kept]
        for cell_uri in change.closed:  # first: a cell closed and opened again stays open
            if self._notebook_of.get(cell_uri) == uri:  # not another notebook's cell
                self._close_cell(cell_uri)
        for cell in change.opened:
            self._open_cell(uri, cell)
        self._cells.encoding = self._documents.encoding
        for edit in change.edits:
            if self._notebook_of.get(edit.uri) != uri:
                log.warning("an edit of cell %s, which notebook %s does not hold", edit.uri, uri)
                continue
            self._cells.change(edit.uri, edit.version, edit.changes)
        return True

    def close(self, uri: str) -> None:
        """Forget notebook ``uri`` and its cells' texts."""
        self._order.pop(uri, None)
        for cell_uri in [c for c, owner in self._notebook_of.items() if owner == uri]:
            self._close_cell(cell_uri)  # listed or not

    def _open_cell(self, notebook: str, cell: CellText) -> None:
        owner = self._notebook_of.get(cell.uri)
        if owner is not None and owner != notebook:
            # Cell URIs are unique (LSP): another notebook's cell stays its, and that
            # notebook's text stays as it is.
            log.warning(
                "cell %s is already in notebook %s: not taken into %s", cell.uri, owner, notebook
            )
            return
        self._notebook_of[cell.uri] = notebook
        self._cells.open(cell.uri, cell.language, cell.version, cell.text)

    def _close_cell(self, cell_uri: str) -> None:
        self._cells.close(cell_uri)
        self._notebook_of.pop(cell_uri, None)

    def _cells_of(self, uri: str) -> list[Document]:
        """Notebook ``uri``'s cells that have a text, in order."""
        docs = (self._cells.get(c) for c in self._order.get(uri, ()))
        return [d for d in docs if d is not None and self._notebook_of.get(d.uri) == uri]

    def texts(self, uri: str) -> dict[str, tuple[str, str]]:
        """Notebook ``uri``'s texts: notebook text URI -> (language, text), one per language."""
        pieces: dict[str, list[str]] = {}
        for doc in self._cells_of(uri):
            pieces.setdefault(doc.language, []).extend((doc.text, separator(doc.text)))
        # ``parts[:-1]``: no separator after the last cell.
        return {
            joined_uri(uri, language): (language, "".join(parts[:-1]))
            for language, parts in pieces.items()
        }

    def place(self, cell_uri: str, line: int, character: int) -> CellPlace | None:
        """Where ``line``/``character`` of a cell is in its notebook text (``None``: not a cell).

        A position past the cell's last line is its end, as ``Document.offset_at``
        has it, not a line of the next cell. A cell whose text came but which
        the notebook does not list is in no notebook text: ``None``.
        """
        notebook = self._notebook_of.get(cell_uri)
        cell = self._cells.get(cell_uri)
        if notebook is None or cell is None:
            return None
        first = 0
        for doc in self._cells_of(notebook):
            if doc is cell:
                break
            if doc.language == cell.language:
                first += len(doc.line_starts()) + 1  # its lines and the blank one after
        else:
            return None
        lines = len(cell.line_starts())
        if line < 0:
            line, character = 0, 0
        elif line >= lines:
            line, character = lines - 1, LINE_END
        return CellPlace(joined_uri(notebook, cell.language), first + line, character, first)

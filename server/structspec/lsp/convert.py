"""Suggestions to LSP results: inline completion items and completion-list items; LSP
params to the service's values (``cursor_position``, ``selected_item``, ``language_id``,
``text_changes``, the notebook sync's ``cell_text`` and ``notebook_change``).

Inline items replace the rest of the cursor's line when it is not blank
(``insertText`` = suggestion + rest of line): editors then draw the ghost text
between the cursor and the existing text, and accepting it leaves that text in
place. (Neovim draws an item with a range over the line from the range's
start: an empty range mid-line would hide the rest of the line under the
ghost text.) A rest of line longer than ``MAX_REPLACED_SUFFIX`` characters (a
minified file) is not carried: the item inserts at the cursor (an empty
range), so that an answer is the size of the suggestion, not of the line.

An inline request made while the editor's completion menu is open names the
menu's selected item (``context.selectedCompletionInfo``: a range and the text
that replaces it). VS Code then shows an inline item only where it replaces
the same range and its text starts with the item's. The service answers as if
the item were accepted, with a suggestion that starts with the item's text and
replaces its range (``Suggestion.replaces``).

Completion items replace the identifier before the cursor, so that clients
which filter a menu by the typed word keep the item.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from lsprotocol import types

from structspec.completion.documents import Range, TextChange
from structspec.completion.notebooks import CellEdit, CellText, NotebookChange
from structspec.completion.types import ModelCost, SelectedItem, Status, Suggestion

ACCEPT_COMMAND = "structspec.accept"
STATUS_NOTIFICATION = "structspec/status"
#: Client -> server: the cursor moved (``{textDocument: {uri}, position}``), for pre-warm.
CURSOR_NOTIFICATION = "structspec/didMoveCursor"
_LABEL_CHARS = 80
#: The longest rest of the line an inline item replaces (and so carries).
MAX_REPLACED_SUFFIX = 1024
#: The longest selected menu item a request is answered after (longer: answered at the cursor).
MAX_SELECTED_TEXT = 1024


def accept_command(suggestion: Suggestion) -> types.Command:
    return types.Command(
        title="structspec: suggestion accepted",
        command=ACCEPT_COMMAND,
        arguments=[suggestion.id],
    )


def selected_item(
    position: types.Position, info: types.SelectedCompletionInfo | None
) -> SelectedItem | None:
    """The menu item an inline request names, when the service can answer after it.

    That is: a range on the cursor's line around the cursor, and a text of one
    line (at most ``MAX_SELECTED_TEXT`` characters). Otherwise ``None``: the
    request is answered at the cursor (VS Code shows that where it continues
    the item).
    """
    if info is None:
        return None
    start, end, text = info.range.start, info.range.end, info.text
    line, column = position.line, position.character
    if not (start.line == end.line == line and start.character <= column <= end.character):
        return None
    if len(text) > MAX_SELECTED_TEXT or "\n" in text or "\r" in text:
        return None
    return SelectedItem(start.character, end.character, text)


def inline_completion(suggestion: Suggestion) -> types.InlineCompletionList:
    line, start = suggestion.line, suggestion.character
    end = start + suggestion.replaces  # after a selected menu item: the item's range
    insert = suggestion.text
    if suggestion.line_suffix.strip() and len(suggestion.line_suffix) <= MAX_REPLACED_SUFFIX:
        end, insert = suggestion.line_end_character, insert + suggestion.line_suffix
    item = types.InlineCompletionItem(
        insert_text=insert,
        range=types.Range(
            start=types.Position(line=line, character=start),
            end=types.Position(line=line, character=end),
        ),
        command=accept_command(suggestion),
    )
    return types.InlineCompletionList(items=[item])


def completion_list(suggestion: Suggestion | None) -> types.CompletionList:
    """A one-item list (empty without a suggestion); always incomplete, so clients ask again."""
    if suggestion is None:
        return types.CompletionList(is_incomplete=True, items=[])
    word = suggestion.word_prefix
    new_text = word + suggestion.text
    first, _, more = new_text.partition("\n")
    label = first.strip() or new_text.strip()
    if len(label) > _LABEL_CHARS:
        label = label[: _LABEL_CHARS - 1] + "…"
    elif more:
        label += " …"
    edit_range = types.Range(
        start=types.Position(line=suggestion.line, character=suggestion.word_start_character),
        end=types.Position(
            line=suggestion.line, character=suggestion.character + suggestion.replaces
        ),
    )
    item = types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Text,
        detail="structspec",
        documentation=types.MarkupContent(kind=types.MarkupKind.PlainText, value=new_text)
        if more
        else None,
        sort_text="0",
        filter_text=first,
        preselect=True,
        insert_text_format=types.InsertTextFormat.PlainText,
        text_edit=types.TextEdit(range=edit_range, new_text=new_text),
        command=accept_command(suggestion),
    )
    return types.CompletionList(is_incomplete=True, items=[item])


def status_json(status: Status) -> dict[str, Any]:
    """The ``structspec/status`` notification's (and request's) payload."""
    return {
        "state": status.state,
        "model": status.model,
        "tokensPerSecond": None
        if status.tokens_per_second is None
        else round(status.tokens_per_second, 2),
        "acceptance": round(status.acceptance, 4),
        "lastLatencyMs": None
        if status.last_latency_ms is None
        else round(status.last_latency_ms, 1),
        "message": status.message,
        "warming": status.warming,
        "stats": status.counters,
        "cost": None if status.cost is None else cost_json(status.cost),
    }


def cost_json(cost: ModelCost) -> dict[str, Any]:
    """What the model costs here (``Status.cost``), in the status payload's spelling."""
    return {
        "promptTokensPerSecond": round(cost.prompt_tps, 1),
        "decodeTokensPerSecond": round(cost.decode_tps, 1),
        "windowTokens": cost.window_tokens,
        "firstSuggestionMs": round(cost.first_suggestion_s * 1000.0),
    }


def reports_cursor(capabilities: types.ClientCapabilities) -> bool:
    """The client says it sends ``structspec/didMoveCursor``.

    It declares so in its capabilities at ``initialize``:
    ``"experimental": {"structspec": {"didMoveCursor": true}}`` (the VS Code
    client does). The server then does not ask for the highlight requests it
    otherwise reads the cursor's place from (``lsp.server``).
    """
    experimental = capabilities.experimental
    ours = experimental.get("structspec") if isinstance(experimental, dict) else None
    return isinstance(ours, dict) and ours.get("didMoveCursor") is True


def cursor_position(params: Any) -> tuple[str, int, int] | None:
    """``(uri, line, character)`` of a ``structspec/didMoveCursor`` notification, or ``None``."""

    def field(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    doc, pos = field(params, "textDocument"), field(params, "position")
    uri = field(doc, "uri")
    line, character = field(pos, "line"), field(pos, "character")
    numbers = (line, character)
    if not isinstance(uri, str) or not all(type(n) is int and n >= 0 for n in numbers):
        return None
    return uri, line, character


def language_id(value: object) -> str:
    """A document's ``languageId`` as a plain string; ``""`` (unknown) for anything else.

    lsprotocol types it as its ``LanguageKind`` enum or a string, and lets a
    number or ``true`` through as they came: such a document is served as one
    whose language is not known, not refused.
    """
    if isinstance(value, enum.Enum):
        value = value.value
    return value if isinstance(value, str) else ""


def text_changes(
    changes: Sequence[types.TextDocumentContentChangeEvent],
) -> tuple[TextChange, ...]:
    """A ``didChange``'s content changes (a change without a range replaces the whole text)."""
    converted = []
    for change in changes:
        r = getattr(change, "range", None)
        where = None
        if r is not None:
            where = Range(r.start.line, r.start.character, r.end.line, r.end.character)
        converted.append(TextChange(change.text, where))
    return tuple(converted)


#: Notebook sync for every notebook type and every cell (``lsp.server``): each
#: cell's language is served as a document's would be.
NOTEBOOK_SYNC = types.NotebookDocumentSyncOptions(
    notebook_selector=[types.NotebookDocumentFilterWithNotebook(notebook="*")]
)


def cell_text(item: types.TextDocumentItem) -> CellText:
    return CellText(item.uri, language_id(item.language_id), item.version, item.text)


def notebook_change(event: types.NotebookDocumentChangeEvent) -> NotebookChange:
    """A ``notebookDocument/didChange``'s cells (its metadata does not matter here)."""
    cells = event.cells
    if cells is None:
        return NotebookChange()
    edits = tuple(
        CellEdit(c.document.uri, c.document.version, text_changes(c.changes))
        for c in cells.text_content or ()
    )
    structure = cells.structure
    if structure is None:
        return NotebookChange(edits=edits)
    array = structure.array
    return NotebookChange(
        start=array.start,
        deleted=array.delete_count,
        inserted=tuple(cell.document for cell in array.cells or ()),
        opened=tuple(cell_text(item) for item in structure.did_open or ()),
        closed=tuple(item.uri for item in structure.did_close or ()),
        edits=edits,
    )

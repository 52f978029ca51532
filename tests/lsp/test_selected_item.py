"""Inline requests naming the completion menu's selected item
(``context.selectedCompletionInfo``): which items are answered after, and the inline
item's range and text, as VS Code takes them (the item's range, its text first)."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from tests.helpers.lsp import open_doc

from structspec.completion.types import SelectedItem, Suggestion
from structspec.lsp.convert import MAX_SELECTED_TEXT, inline_completion, selected_item


def pos(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def info(start: tuple[int, int], end: tuple[int, int], text: str) -> types.SelectedCompletionInfo:
    return types.SelectedCompletionInfo(
        range=types.Range(start=pos(*start), end=pos(*end)), text=text
    )


def test_an_item_on_the_cursors_line_around_the_cursor_is_answered_after():
    assert selected_item(pos(1, 12), None) is None
    assert selected_item(pos(1, 12), info((1, 10), (1, 12), "path")) == SelectedItem(10, 12, "path")
    assert selected_item(pos(1, 11), info((1, 10), (1, 13), "path(")) == SelectedItem(
        10, 13, "path("
    )
    # Elsewhere than around the cursor, over lines, several lines of text, too long:
    # answered at the cursor.
    for odd in (
        info((1, 13), (1, 14), "x"),
        info((1, 2), (1, 11), "x"),
        info((0, 10), (1, 12), "path"),
        info((1, 10), (2, 0), "path"),
        info((1, 10), (1, 12), "path\n    x"),
        info((1, 10), (1, 12), "a\rb"),
        info((1, 10), (1, 12), "p" * (MAX_SELECTED_TEXT + 1)),
    ):
        assert selected_item(pos(1, 12), odd) is None, odd


def suggestion(text: str, character: int, suffix: str, line_end: int, replaces: int = 0):
    return Suggestion(
        id="s1",
        uri="file:///a.py",
        text=text,
        line=1,
        character=character,
        line_end_character=line_end,
        line_suffix=suffix,
        word_prefix="",
        word_start_character=character,
        mode="line",
        source="model",
        latency_ms=1.0,
        replaces=replaces,
    )


def edit(result: types.InlineCompletionList) -> tuple[str, tuple[int, int], tuple[int, int]]:
    (item,) = result.items
    assert isinstance(item.insert_text, str) and item.range is not None
    start, end = item.range.start, item.range.end
    assert start.line == end.line == 1
    return item.insert_text, (start.line, start.character), (end.line, end.character)


@pytest.mark.parametrize(
    ("item", "line", "want"),
    [
        # "root = os.pa|" with "path" over "pa": the suggestion follows "os.path".
        (SelectedItem(10, 12, "path"), "root = os.pa", ("path.join(", (1, 10), (1, 12))),
        # The rest of the line is carried, through the line's end.
        (SelectedItem(10, 12, "path"), "root = os.pa(x)", ("path.join((x)", (1, 10), (1, 15))),
        # Replace mode: the item also replaces "(" after the cursor.
        (SelectedItem(10, 13, "path"), "root = os.pa(x)", ("path.join(x)", (1, 10), (1, 15))),
        # Columns in UTF-16 code units: the rest of the line holds a surrogate pair.
        (SelectedItem(10, 12, "path"), "root = os.pa # 😀", ("path.join( # 😀", (1, 10), (1, 17))),
    ],
)
def test_the_inline_item_replaces_the_items_range_with_its_text_then_the_suggestion(
    item: SelectedItem, line: str, want: tuple[str, tuple[int, int], tuple[int, int]]
):
    units = len(line.encode("utf-16-le")) // 2
    answer = suggestion(
        item.text + ".join(", item.start, line[item.end :], units, item.end - item.start
    )
    assert edit(inline_completion(answer)) == want
    # Without an item: the suggestion at the cursor, as before.
    plain = inline_completion(suggestion("th", 12, "", 12))
    assert edit(plain) == ("th", (1, 12), (1, 12))


TEXT = "import os\nroot = os.pa\nprint(root)\n"


async def test_a_real_server_answers_after_the_selected_item(client: LanguageClient):
    open_doc(client, TEXT)
    applied = "file:///work/applied.py"
    open_doc(client, TEXT.replace("os.pa", "os.path"), uri=applied)

    async def ask(uri: str, at: types.Position, selected=None) -> types.InlineCompletionList:
        result = await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=at,
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Invoked,
                    selected_completion_info=selected,
                ),
            )
        )
        assert result is not None
        return result

    want = (await ask(applied, pos(1, 14))).items[0].insert_text
    assert isinstance(want, str) and want.strip()
    got = await ask("file:///work/example.py", pos(1, 12), info((1, 10), (1, 12), "path"))
    assert edit(got) == ("path" + want, (1, 10), (1, 12))
    # An item the service does not answer after (two lines): answered at the cursor.
    at_cursor = await ask("file:///work/example.py", pos(1, 12), info((0, 0), (1, 12), "x"))
    _, start, end = edit(at_cursor)
    assert start == end == (1, 12)

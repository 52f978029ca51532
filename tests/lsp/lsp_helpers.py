"""Helpers shared by the language-server tests (imported via the path set in conftest)."""

from __future__ import annotations

from lsprotocol import types
from pytest_lsp import LanguageClient

URI = "file:///work/example.py"
TEXT = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = "


def open_doc(client: LanguageClient, text: str = TEXT, uri: str = URI, lang: str = "python"):
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=lang, version=1, text=text)
        )
    )


def end_of(text: str) -> types.Position:
    lines = text.split("\n")
    return types.Position(line=len(lines) - 1, character=len(lines[-1]))


async def inline(client: LanguageClient, pos: types.Position, uri: str = URI, invoked=True):
    kind = (
        types.InlineCompletionTriggerKind.Invoked
        if invoked
        else types.InlineCompletionTriggerKind.Automatic
    )
    return await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=pos,
            context=types.InlineCompletionContext(trigger_kind=kind),
        )
    )

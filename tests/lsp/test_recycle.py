"""Suggestion recycling through the language server (stand-in model, ``recycle`` alone).

After a keystroke that does not match the suggestion on screen, the typed-through
cache has nothing to serve and the model runs again; the previous suggestion,
re-aligned, drafts what the model then says again, which the per-source
statistics in ``structspec.status`` show.
"""

from __future__ import annotations

from typing import Any

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from tests.helpers.lsp import (
    URI,
    end_session,
    init_params,
    inline,
    open_doc,
    server_command,
    server_env,
)

TEXT = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = "
# On the stand-in of seed 9 the suggestion after "y = " is "bm]9.):wh:spj+n[z]:8,q";
# after typing "x" instead of "b" the model writes "*1" and then rejoins it at ".)".
SEED, TYPED = 9, "x"
OPTIONS = {"debounceMs": 0, "maxTokens": 24, "sources": ["recycle"]}


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=server_command("--stdio", "--model", f"standin:{SEED}"),
        server_env=server_env(),
    )
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(init_params(OPTIONS))
    yield
    await end_session(lsp_client)


async def _sources(client: LanguageClient) -> dict[str, Any]:
    status = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.status", arguments=[])
    )
    return status["stats"]["sources"]


async def test_diverging_keystroke_gets_recycled_drafts(client: LanguageClient):
    open_doc(client, TEXT)
    pos = types.Position(line=5, character=4)
    first = (await inline(client, pos)).items[0].insert_text
    assert await _sources(client) == {}  # no previous suggestion: nothing recycled
    assert first and first[0] != TYPED
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=pos, end=pos), text=TYPED
                )
            ],
        )
    )
    second = (await inline(client, types.Position(line=5, character=5))).items[0].insert_text
    # The model said most of the old suggestion again, and recycling drafted it.
    assert len(second) > 8 and second.endswith(first[-(len(second) - 2) :])
    recycled = (await _sources(client))["recycle"]
    assert recycled["accepted"] > 0 and recycled["drafted"] >= recycled["accepted"]

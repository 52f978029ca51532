"""End-to-end tests of ``structspec-lsp`` over stdio on the deterministic stand-in model."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient
from tests.helpers.lsp import TEXT, URI, end_of, inline, open_doc
from tests.helpers.raw_client import RawClient


async def test_capabilities(client: LanguageClient):
    caps = client.server_capabilities
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert sync.change == types.TextDocumentSyncKind.Incremental
    assert "structspec.accept" in caps.execute_command_provider.commands


async def test_inline_completion_and_accept(client: LanguageClient):
    open_doc(client)
    result = await inline(client, end_of(TEXT))
    assert result is not None and len(result.items) == 1
    item = result.items[0]
    assert item.insert_text.strip() and item.insert_text == item.insert_text.rstrip()
    assert "\n" not in item.insert_text  # mid-line: a single line
    assert item.range.start == end_of(TEXT)
    assert item.command.command == "structspec.accept"
    answer = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.accept", arguments=item.command.arguments)
    )
    assert answer["accepted"] is True and answer["acceptance"] == 1.0
    again = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.accept", arguments=item.command.arguments)
    )
    assert again["accepted"] is False  # counted once


async def test_typing_through_is_served_from_cache(client: LanguageClient):
    open_doc(client)
    pos = end_of(TEXT)
    first = (await inline(client, pos)).items[0].insert_text
    assert len(first) >= 2
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=pos, end=pos), text=first[0]
                )
            ],
        )
    )
    nxt = types.Position(line=pos.line, character=pos.character + 1)
    second = await inline(client, nxt)
    assert second.items[0].insert_text == first[1:]
    status = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.status", arguments=[])
    )
    assert status["stats"]["servedFromCache"] == 1
    assert status["stats"]["shown"] == 1


async def test_completion_fallback(client: LanguageClient):
    open_doc(client)
    result = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=URI), position=end_of(TEXT)
        )
    )
    assert result.is_incomplete is True
    assert len(result.items) == 1
    item = result.items[0]
    assert item.text_edit.new_text.strip()
    assert item.command.command == "structspec.accept"


async def test_status_notification(client: LanguageClient):
    open_doc(client)
    waiter = asyncio.ensure_future(client.wait_for_notification("structspec/status"))
    await inline(client, end_of(TEXT))
    status = await asyncio.wait_for(waiter, 10)
    status = status._asdict()  # pygls hands unknown notifications over as named tuples
    assert status["state"] in ("busy", "idle")
    assert "model" in status and "tokensPerSecond" in status and "acceptance" in status
    assert "lastLatencyMs" in status
    assert status["warming"] in (True, False)


@pytest.mark.parametrize("uri", ["file:///nope.py", "untitled:Untitled-1", "::bad::"])
async def test_unknown_uri_answers_null(client: LanguageClient, uri: str):
    assert await inline(client, types.Position(line=0, character=0), uri=uri) is None
    status = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.status", arguments=[])
    )
    assert status["stats"]["emptyReasons"] == {"not-served": 1}  # with its reason


async def test_tcp_transport(tmp_path):
    """``--tcp HOST:PORT``: the same server over a socket."""
    import json
    import socket
    import sys

    from tests.helpers.lsp import server_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "structspec.lsp",
        "--tcp",
        f"127.0.0.1:{port}",
        "--model",
        "standin",
        "--log-file",
        str(tmp_path / "lsp.log"),
        env=server_env(),
    )
    try:
        for _ in range(600):  # a wait (up to 60 s on a loaded machine) for it to listen
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("the server did not listen")

        async def call(msg_id: int, method: str, params: object) -> dict:
            body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
            writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
            await writer.drain()
            while True:
                length = 0
                while (line := await reader.readline()).strip():
                    if line.lower().startswith(b"content-length"):
                        length = int(line.split(b":")[1])
                message = json.loads(await reader.readexactly(length))
                if message.get("id") == msg_id:
                    return message

        init = await asyncio.wait_for(call(1, "initialize", {"capabilities": {}}), 30)
        assert "inlineCompletionProvider" in init["result"]["capabilities"]
        assert (await asyncio.wait_for(call(2, "shutdown", None), 30))["result"] is None
        writer.close()
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    assert (tmp_path / "lsp.log").is_file()


async def _prewarmed(client: LanguageClient, at_least: int) -> int:
    for _ in range(400):  # wait (not a timing assertion) for the pause and the pre-warm
        status = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="structspec.status", arguments=[])
        )
        if status["stats"]["prewarmed"] >= at_least:
            break
        await asyncio.sleep(0.05)
    return status["stats"]["prewarmed"]


async def test_cursor_notification_pre_warms_and_bad_params_are_ignored(client: LanguageClient):
    open_doc(client)
    assert await _prewarmed(client, 1) == 1  # the document as opened
    for params in (None, {}, {"textDocument": {"uri": URI}, "position": {"line": -1}}, [1, 2]):
        client.protocol.notify("structspec/didMoveCursor", params)
    client.protocol.notify(
        "structspec/didMoveCursor",
        {"textDocument": {"uri": URI}, "position": {"line": 1, "character": 4}},
    )
    # then the cursor's place (and a document that fits its window, from its start again)
    assert await _prewarmed(client, 2) >= 2
    assert (await inline(client, end_of(TEXT))).items  # still serving


async def test_highlight_request_names_the_cursor_of_a_client_without_the_report(
    client: LanguageClient,
):
    """Emacs, Sublime Text and Neovim ask for highlights where the cursor rests: warm there."""
    assert client.server_capabilities.document_highlight_provider  # no cursor report declared
    open_doc(client)
    assert await _prewarmed(client, 1) == 1  # the document as opened
    where = types.DocumentHighlightParams(
        text_document=types.TextDocumentIdentifier(uri=URI),
        position=types.Position(line=1, character=4),
    )
    assert await client.text_document_document_highlight_async(where) is None  # no highlights
    assert await _prewarmed(client, 2) >= 2  # the place named
    assert (await inline(client, end_of(TEXT))).items  # still serving


def test_a_client_that_reports_the_cursor_is_not_asked_for_highlights():
    reported = {"structspec": {"didMoveCursor": True}}
    with RawClient() as raw:
        capabilities = raw.initialize(experimental=reported)["result"]["capabilities"]
        assert "documentHighlightProvider" not in capabilities
        position = {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 0}}
        answer = raw.call("textDocument/documentHighlight", position)
        assert answer["error"]["code"] == -32601  # method not found
        assert raw.shutdown_and_exit() == 0

"""What an editor (or a broken client) may send: the server stays up and answers everything.

Every request gets a result, ``null`` or an error response; after each
scenario the server still completes normally.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import Future
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from tests.helpers.lsp import TEXT, URI, end_of, inline, open_doc


def rss_kib(client: LanguageClient) -> int:
    """Resident memory of the server process, from /proc."""
    pid = client._server.pid  # type: ignore[union-attr]
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def still_works(client: LanguageClient) -> None:
    uri = "file:///work/health.py"
    open_doc(client, TEXT, uri)
    result = await inline(client, end_of(TEXT), uri=uri)
    assert result is not None and result.items[0].insert_text.strip()


@pytest.mark.parametrize(
    "pos",
    [
        types.Position(line=5, character=10_000),  # past the end of the line
        types.Position(line=9_999, character=0),  # past the end of the document
        types.Position(line=9_999, character=9_999),
        types.Position(line=0, character=0),  # start of the document
    ],
)
async def test_positions_out_of_range(client: LanguageClient, pos: types.Position):
    open_doc(client)
    result = await inline(client, pos)
    assert result is None or isinstance(result.items[0].insert_text, str)
    await still_works(client)


async def test_edits_out_of_range_and_to_unknown_documents(client: LanguageClient):
    open_doc(client)
    far = types.Position(line=10_000, character=10_000)
    for uri in (URI, "file:///never-opened.py"):
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=7),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=far, end=types.Position(line=0, character=3)),
                        text="# edited\n",
                    )
                ],
            )
        )
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri="file:///never-opened.py")
        )
    )
    await still_works(client)


async def test_one_megabyte_document(client: LanguageClient):
    line = "value_{i} = compute(value_{j}, 'x' * {i})  # filler\n"
    text = "".join(line.format(i=i, j=i // 2) for i in range(20_000))
    text = text[:1_000_000] + "\nresult = "
    assert len(text) > 1_000_000
    big = "file:///work/big.py"
    open_doc(client, text, big)
    result = await inline(client, end_of(text), uri=big)
    assert result is None or result.items[0].insert_text.strip()
    # Typing at the end of a 1 MB buffer still works.
    pos = end_of(text)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=big, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=pos, end=pos), text="v"
                )
            ],
        )
    )
    pos2 = types.Position(line=pos.line, character=pos.character + 1)
    await inline(client, pos2, uri=big)
    await still_works(client)


@pytest.mark.parametrize(
    "text",
    [
        "abc\x00def\x00\n\x00",
        "".join(chr(i) for i in range(1, 32)) + "\n\x7f\x80\x81",
        "emoji 😀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 in a line\nx = '😀'",
        "\ufeff\ufffe\uffff\r\n\r\r\n",
        "bytes: \udcff\udc80 lone surrogates",
    ],
)
async def test_binary_and_odd_content(client: LanguageClient, text: str):
    open_doc(client, text, "file:///work/odd.bin", lang="plaintext")
    for pos in (end_of(text), types.Position(line=0, character=3)):
        result = await inline(client, pos, uri="file:///work/odd.bin")
        assert result is None or isinstance(result.items[0].insert_text, str)
    await still_works(client)


async def test_unknown_language_id(client: LanguageClient):
    open_doc(client, TEXT, "file:///work/thing.zzz", lang="no-such-language-id")
    result = await inline(client, end_of(TEXT), uri="file:///work/thing.zzz")
    assert result is None or result.items[0].insert_text.strip()


async def test_wrong_typed_configuration_is_reported_and_defaulted(client: LanguageClient):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={
                "structspec": {
                    "maxTokens": "many",
                    "maxLatencyMs": [1, 2],
                    "debounceMs": -5,
                    "languages": 42,
                    "sources": ["lookup", "telepathy"],
                    "speculative": "perhaps",
                    "noSuchSetting": True,
                }
            }
        )
    )
    for _ in range(600):  # a wait (up to 60 s on a loaded machine), not a timing assertion
        if len(client.messages) >= 6:
            break
        await asyncio.sleep(0.1)
    texts = [m.message for m in client.messages]
    for key in ("maxTokens", "maxLatencyMs", "debounceMs", "languages", "telepathy", "speculative"):
        assert any(key in t for t in texts), (key, texts)
    await still_works(client)
    # A settings object that is not an object at all.
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=[1, 2]))
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"structspec": "fast please"})
    )
    await still_works(client)


async def test_languages_setting_filters(client: LanguageClient):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"structspec": {"languages": ["rust"]}})
    )
    await asyncio.sleep(0.2)
    open_doc(client)
    assert await inline(client, end_of(TEXT)) is None
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"structspec": {"languages": []}})
    )
    await asyncio.sleep(0.2)
    assert await inline(client, end_of(TEXT)) is not None


def raw_request(client: LanguageClient, msg_id: str, method: str, params: object):
    """Send a request as raw JSON (bypassing the client's typing); return its response future."""
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future
    client.protocol.writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    return future


@pytest.mark.parametrize("language", [1, True, None])
async def test_a_language_id_that_is_not_a_string_is_an_unknown_language(
    client: LanguageClient, language: object
):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "textDocument/didOpen",
            "params": {
                "textDocument": {"uri": URI, "languageId": language, "version": 1, "text": TEXT}
            },
        }
    )
    client.protocol.writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    result = await inline(client, end_of(TEXT))  # the document was stored: it is served
    assert result is not None and result.items[0].insert_text.strip()


@pytest.mark.parametrize(
    "params",
    [
        {"textDocument": {"uri": URI}, "position": {"line": "five", "character": None}},
        {"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}, "context": {}},
        {"textDocument": 7},
        None,
        [],
    ],
)
async def test_malformed_params_get_an_error_response(client: LanguageClient, params: object):
    open_doc(client)
    future = raw_request(client, "bad-1", "textDocument/inlineCompletion", params)
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(asyncio.wrap_future(future), 10)
    await still_works(client)


async def test_flood_of_requests_with_cancellations(client: LanguageClient):
    """500 requests while typing, every third cancelled: all answered, memory bounded."""
    text = TEXT * 20
    open_doc(client, text)
    await inline(client, end_of(text))  # warm
    before = rss_kib(client)
    pos = end_of(text)
    futures = []
    typed = "result_value = compute(x, y)  # " * 4
    for i in range(500):
        ch = typed[i % len(typed)]
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=i + 2),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(start=pos, end=pos), text=ch
                    )
                ],
            )
        )
        pos = types.Position(line=pos.line, character=pos.character + 1)
        fut = client.protocol.send_request(
            "textDocument/inlineCompletion",
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=URI),
                position=pos,
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Automatic
                ),
            ),
        )
        futures.append(fut)
        if i % 3 == 0:
            client.protocol.notify("$/cancelRequest", types.CancelParams(id=fut_id(client, fut)))
        if i % 50 == 0:
            await asyncio.sleep(0)  # let responses flow
    outcomes = {"result": 0, "null": 0, "cancelled": 0}
    for fut in futures:
        try:
            value = await asyncio.wait_for(asyncio.wrap_future(fut), 60)
        except JsonRpcException as exc:
            assert exc.code == types.LSPErrorCodes.RequestCancelled, exc
            outcomes["cancelled"] += 1
        else:
            outcomes["result" if value is not None else "null"] += 1
    assert sum(outcomes.values()) == 500
    after = rss_kib(client)
    print(f"flood outcomes {outcomes}; server RSS {before} KiB -> {after} KiB")
    assert after - before < 64 * 1024, (before, after)
    await still_works(client)


def fut_id(client: LanguageClient, fut: object) -> object:
    for msg_id, f in list(client.protocol._request_futures.items()):
        if f is fut:
            return msg_id
    return None


async def test_model_that_cannot_load_and_bad_initialization_options(tmp_path):
    """A model that fails to load: showMessage with the fix, status error, server stays up."""
    from pytest_lsp import ClientServerConfig
    from tests.helpers.lsp import end_session, init_params, server_command, server_env

    bogus = tmp_path / "not-a-model.gguf"
    bogus.write_bytes(b"this is not a GGUF file")
    config = ClientServerConfig(
        server_command=server_command("--stdio", "--model", str(bogus)), server_env=server_env()
    )
    client = await config.start()
    try:
        await client.initialize_session(init_params({"maxTokens": "lots", "debounceMs": 0}))
        for _ in range(600):  # a wait (up to 60 s on a loaded machine)
            if any("cannot load" in m.message for m in client.messages):
                break
            await asyncio.sleep(0.1)
        texts = [m.message for m in client.messages]
        assert any("maxTokens" in t for t in texts), texts
        errors = [m for m in client.messages if m.type == types.MessageType.Error]
        assert errors and "Fix:" in errors[0].message and str(bogus) in errors[0].message
        open_doc(client)
        assert await inline(client, end_of(TEXT)) is None  # answered, no suggestion
        status = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="structspec.status", arguments=[])
        )
        assert status["state"] == "error" and "cannot load" in status["message"]
        # Fixing the setting recovers without a restart... unless the flag pins it:
        # --model given on the command line wins over the client, so it stays broken.
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"structspec": {"model": "standin"}})
        )
        await asyncio.sleep(0.3)
        assert await inline(client, end_of(TEXT)) is None
        await end_session(client)
    finally:
        await client.stop()


async def test_model_fixed_from_the_client_recovers(tmp_path):
    from pytest_lsp import ClientServerConfig
    from tests.helpers.lsp import end_session, init_params, server_command, server_env

    config = ClientServerConfig(server_command=server_command("--stdio"), server_env=server_env())
    client = await config.start()
    try:
        await client.initialize_session(
            init_params({"model": str(tmp_path / "missing.gguf"), "debounceMs": 0})
        )
        for _ in range(600):  # a wait (up to 60 s on a loaded machine)
            if any(m.type == types.MessageType.Error for m in client.messages):
                break
            await asyncio.sleep(0.1)
        assert any("missing.gguf" in m.message for m in client.messages)
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"structspec": {"model": "standin"}})
        )
        await asyncio.sleep(0.3)
        open_doc(client)
        result = await inline(client, end_of(TEXT))
        assert result is not None and result.items[0].insert_text.strip()
        await end_session(client)
    finally:
        await client.stop()

"""``structspec-lsp --backend URL`` completes through a remote engine: here ``structspec serve``.

Both are real subprocesses: the language server speaks LSP over stdio and
OpenAI-compatible HTTP to ``structspec serve --model standin``; it loads no
local model of its own (``--model`` points at a file that does not exist, so
loading one would fail).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from lsprotocol import types
from pytest_lsp import make_test_lsp_client
from tests.helpers.http_server import ServeProcess
from tests.helpers.lsp import (
    end_of,
    end_session,
    init_params,
    inline,
    open_doc,
    server_command,
    server_env,
)

TEXT = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = "


async def test_language_server_completes_through_structspec_serve(tmp_path: Path) -> None:
    with ServeProcess(tmp_path, "--model", "standin") as serve:
        client = make_test_lsp_client()
        missing = str(tmp_path / "no-such-model.gguf")
        cmd = server_command("--stdio", "--backend", serve.url, "--model", missing)
        await client.start_io(*cmd, env=server_env())
        try:
            await client.initialize_session(init_params({"debounceMs": 0, "maxTokens": 16}))
            open_doc(client, TEXT)
            result = await inline(client, end_of(TEXT))
            assert result is not None and result.items
            assert isinstance(result.items[0].insert_text, str) and result.items[0].insert_text
            # The suggestion came over HTTP from the server, as its metrics count.
            async with asyncio.timeout(10):
                while not any(
                    "OpenAI-compatible /v1/completions" in str(m.message) for m in client.messages
                ):
                    await asyncio.sleep(0.05)
            errors = [m.message for m in client.messages if m.type == types.MessageType.Error]
            assert errors == []
        finally:
            await end_session(client)

"""End-to-end on the real default model (gemma-3-270m GGUF): smoke test and responsiveness."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from tests.helpers.lsp import (
    end_of,
    end_session,
    init_params,
    inline,
    open_doc,
    server_command,
    server_env,
)

pytestmark = pytest.mark.model

CODE = '''import math


def circle_area(radius):
    """Area of a circle."""
    return math.pi * radius ** 2


def square_area(side):
    """Area of a square."""
    return side ** 2


def rectangle_area(width, height):
    """Area of a rectangle."""
    return '''


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=server_command("--stdio"), server_env=server_env())
)
async def real(lsp_client: LanguageClient):
    result = await lsp_client.initialize_session(
        init_params(
            {"debounceMs": 0, "maxTokens": 32, "maxLatencyMs": 60_000, "maxGenerationMs": 60_000}
        )
    )
    lsp_client.server_capabilities = result.capabilities  # type: ignore[attr-defined]
    yield
    await end_session(lsp_client)


async def status(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="structspec.status", arguments=[])
    )


async def test_default_model_suggests_code(real: LanguageClient):
    open_doc(real, CODE, "file:///work/areas.py")
    result = await asyncio.wait_for(inline(real, end_of(CODE), uri="file:///work/areas.py"), 600)
    assert result is not None, real.messages
    text = result.items[0].insert_text
    assert text.strip() and "\n" not in text
    st = await status(real)
    assert st["model"].endswith(".gguf"), st
    assert st["state"] == "idle" and st["stats"]["shown"] == 1


async def test_server_answers_while_generating(real: LanguageClient):
    """Edits, other requests and shutdown are answered while a generation runs.

    The document is long enough that evaluating its prompt takes the model far
    longer than answering a status request (the status request is sent right
    behind the completion request), so the order of events does not hang on
    how fast this machine is.
    """
    uri = "file:///work/long.py"
    body = "".join(
        f"def area_{i}(width, height):\n    return width * height * {i}\n\n\n" for i in range(120)
    )
    code = CODE + "width * height\n\n\n" + body + "def describe(shapes):\n"
    open_doc(real, code, uri)
    real.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"structspec": {"maxTokens": 400}})
    )
    pending = asyncio.ensure_future(inline(real, end_of(code), uri=uri))
    # The status request may be handled before the completion's job has started (both
    # arrive together): ask again until the job shows, which it must while it runs.
    st = await asyncio.wait_for(status(real), 30)
    deadline = time.monotonic() + 10
    while st["state"] != "busy" and not pending.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        st = await asyncio.wait_for(status(real), 30)
    assert st["state"] == "busy" and not pending.done()  # answered while the prompt is evaluated
    real.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=end_of(code), end=end_of(code)), text="    "
                )
            ],
        )
    )
    st = await asyncio.wait_for(status(real), 30)
    assert st["state"] in ("busy", "idle")  # the edit stops the generation between passes
    await asyncio.wait_for(real.shutdown_async(None), 30)
    with contextlib.suppress(Exception):  # cancelled by shutdown: an error is a valid answer
        await asyncio.wait_for(pending, 30)
    real.exit(None)
    real.capabilities = None  # the session is over; skip the fixture's shutdown


async def test_alternating_documents_keep_their_caches():
    """Going back and forth between two documents re-evaluates neither prompt."""
    from structspec.completion.service import CompletionRequest, CompletionService
    from structspec.config import Settings

    # No latency budget here (it holds during prefill too): this test is about the caches.
    svc = CompletionService(
        Settings(
            model="",
            threads=2,
            debounce_ms=0,
            max_tokens=4,
            max_latency_ms=600_000,
            max_generation_ms=600_000,
        )
    )
    a = CODE
    b = "".join(f"const value{i} = compute({i});\n" for i in range(40)) + "const total = "
    svc.open_document("file:///a.py", "python", 1, a)
    svc.open_document("file:///b.js", "javascript", 1, b)
    reused: list[tuple[int, str, int, int]] = []
    try:
        for round_ in range(2):
            for uri, text in (("file:///a.py", a), ("file:///b.js", b)):
                svc._sessions.pop(uri, None)  # no typing-through: ask the model each time
                end = end_of(text)
                s = await asyncio.wait_for(
                    svc.complete(CompletionRequest(uri, end.line, end.character)), 600
                )
                if s is not None and s.stats is not None:
                    reused.append((round_, uri, s.stats.reused_tokens, s.stats.prompt_tokens))
    finally:
        svc.close()
        svc.join()
    second_round = [r for r in reused if r[0] == 1]
    assert len(second_round) == 2, reused  # both documents got a suggestion
    for _round, _uri, got, prompt in second_round:
        assert got >= prompt - 2, reused  # everything but the pending token was cached

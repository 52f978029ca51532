"""Helpers shared by the language-server tests: the server subprocess, its settings, requests."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import LanguageClient

ROOT = Path(__file__).resolve().parents[2]
SERVER_DIR = ROOT / "server"

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


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SERVER_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    # No user config file or environment settings leak into the tests.
    env["STRUCTSPEC_CONFIG"] = str(ROOT / "tests" / "lsp" / "no-such-config.toml")
    for key in [k for k in env if k.startswith("STRUCTSPEC_") and k != "STRUCTSPEC_CONFIG"]:
        del env[key]
    env.update(extra)
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "structspec.lsp", *args]


#: Test settings: no debounce, so each request is answered as soon as it can be; no
#: latency budget to speak of, so that a loaded machine (a prompt evaluated slowly)
#: cannot turn a suggestion a test expects into none.
STANDIN_OPTIONS: dict[str, Any] = {"debounceMs": 0, "maxTokens": 24, "maxLatencyMs": 600_000}


def init_params(options: Any = None, *, inline: bool = True) -> types.InitializeParams:
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities() if inline else None,
            completion=types.CompletionClientCapabilities(),
        ),
        workspace=types.WorkspaceClientCapabilities(configuration=True),
    )
    return types.InitializeParams(
        capabilities=caps,
        root_uri=ROOT.as_uri(),
        initialization_options=STANDIN_OPTIONS if options is None else options,
    )


async def end_session(client: LanguageClient, timeout: float = 60.0) -> None:
    """shutdown + exit, then make sure the server process is gone (kill it if it hangs).

    pytest-lsp waits for the server to exit without a time limit; a server that
    hangs must fail its test, not hang the whole run.
    """
    import asyncio
    import contextlib

    proc = client._server  # type: ignore[attr-defined]
    try:
        await asyncio.wait_for(client.shutdown_session(), timeout)
        if proc is not None:
            await asyncio.wait_for(proc.wait(), timeout)
    finally:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise AssertionError("the server did not exit after shutdown + exit")

"""Fixtures for the language-server tests: a real ``structspec-lsp`` subprocess over stdio.

The server runs as ``python -m structspec.lsp`` with the package from this
checkout first on ``PYTHONPATH``, so the tests exercise the tree under test even
when an older copy is installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

ROOT = Path(__file__).resolve().parents[2]
# pytest runs with --import-mode=importlib: make lsp_helpers importable for the tests here.
sys.path.insert(0, str(Path(__file__).resolve().parent))
SERVER_DIR = ROOT / "server"


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


#: Test settings: no debounce, so each request is answered as soon as it can be.
STANDIN_OPTIONS: dict[str, Any] = {"debounceMs": 0, "maxTokens": 24}


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


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=server_command("--stdio", "--model", "standin"), server_env=server_env()
    )
)
async def client(lsp_client: LanguageClient):
    result = await lsp_client.initialize_session(init_params())
    lsp_client.server_capabilities = result.capabilities  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


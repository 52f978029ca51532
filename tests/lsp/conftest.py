"""Fixtures for the language-server tests: a real ``structspec-lsp`` subprocess over stdio.

The server runs as ``python -m structspec.lsp`` with the package from this
checkout first on ``PYTHONPATH``, so the tests exercise the tree under test even
when an older copy is installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient

# pytest runs with --import-mode=importlib: make lsp_helpers importable for the tests here.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lsp_helpers import end_session, init_params, server_command, server_env  # noqa: E402


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=server_command("--stdio", "--model", "standin"), server_env=server_env()
    )
)
async def client(lsp_client: LanguageClient):
    result = await lsp_client.initialize_session(init_params())
    lsp_client.server_capabilities = result.capabilities  # type: ignore[attr-defined]
    yield
    await end_session(lsp_client)

"""Fixtures for the language-server tests: a real ``structspec-lsp`` subprocess over stdio.

The server runs as ``python -m structspec.lsp`` with the package from this
checkout first on ``PYTHONPATH``, so the tests exercise the tree under test even
when an older copy is installed.
"""

from __future__ import annotations

import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from tests.helpers.lsp import end_session, init_params, server_command, server_env


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

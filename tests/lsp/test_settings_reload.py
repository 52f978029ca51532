"""``sources`` and ``rulesFile`` changed over ``workspace/didChangeConfiguration`` apply at once.

No restart: the next completion runs on an engine rebuilt for the new settings.
What shows it from outside: a ``rulesFile`` that cannot be used is reported
(once per engine that builds the ``rules`` source) and completions go on.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types
from pytest_lsp import LanguageClient
from tests.helpers.lsp import TEXT, end_of, inline, open_doc


def _rules_warnings(client: LanguageClient) -> list[str]:
    return [m.message for m in client.messages if "rulesFile" in m.message]


async def _change(client: LanguageClient, **values: object) -> None:
    """Send the whole ``structspec`` section (a client sends all of it on every change)."""
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"structspec": values})
    )
    await asyncio.sleep(0.1)


async def _complete(client: LanguageClient) -> None:
    result = await inline(client, end_of(TEXT))
    assert result is not None and result.items[0].insert_text.strip()


async def _wait_for_warnings(client: LanguageClient, n: int) -> list[str]:
    for _ in range(1200):  # a wait (up to 60 s on a loaded machine), not a timing assertion
        if len(_rules_warnings(client)) >= n:
            break
        await asyncio.sleep(0.05)
    return _rules_warnings(client)


async def test_sources_and_rules_file_changes_take_effect(client: LanguageClient, tmp_path):
    open_doc(client)
    await _change(client, sources=["lookup"], rulesFile=str(tmp_path / "first.json.gz"))
    await _complete(client)
    assert _rules_warnings(client) == []  # no rules source: its file is not read

    first = str(tmp_path / "first.json.gz")
    await _change(client, sources=["lookup", "rules"], rulesFile=first)  # rules built now
    await _complete(client)
    warnings = await _wait_for_warnings(client, 1)
    assert len(warnings) == 1 and "first.json.gz" in warnings[0]

    second = str(tmp_path / "second.json.gz")
    await _change(client, sources=["lookup", "rules"], rulesFile=second)  # the file alone
    await _complete(client)
    warnings = await _wait_for_warnings(client, 2)
    assert len(warnings) == 2 and "second.json.gz" in warnings[1]

    await _change(client, sources=["lookup"], rulesFile=str(tmp_path / "third.json.gz"))
    await _complete(client)
    await asyncio.sleep(0.2)
    assert len(_rules_warnings(client)) == 2  # rules off again: nothing reads the file


async def test_unknown_source_name_is_reported_and_the_known_ones_apply(
    client: LanguageClient, tmp_path
):
    """A name this server lacks (an editor's setting may name any): a warning, the rest apply."""
    open_doc(client)
    rules = str(tmp_path / "rules.json.gz")
    await _change(client, sources=["lookup", "telepathy"], rulesFile=rules)
    await _complete(client)
    await asyncio.sleep(0.2)
    assert _rules_warnings(client) == []  # `lookup` alone, not the default `all`
    unknown = [m for m in client.messages if "telepathy" in m.message]
    assert len(unknown) == 1 and unknown[0].type == types.MessageType.Warning
    assert "unknown draft source(s) telepathy" in unknown[0].message

    await _change(client, sources=["rules", "telepathy"], rulesFile=rules)
    await _complete(client)
    warnings = await _wait_for_warnings(client, 1)
    assert len(warnings) == 1 and "rules.json.gz" in warnings[0]  # `rules` was built

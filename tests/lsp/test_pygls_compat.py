"""The private pygls names the server relies on are all in the installed pygls.

``structspec.lsp.pygls_compat.RELIED_ON`` lists them; a pygls release that
drops or renames one fails here with its name, not somewhere in a handler.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCProtocol

from structspec.lsp import pygls_compat
from structspec.lsp.pygls_compat import RELIED_ON, Relied, missing

LSP_DIR = Path(pygls_compat.__file__).parent


@pytest.mark.parametrize("item", RELIED_ON, ids=[item.label for item in RELIED_ON])
def test_each_relied_on_name_is_there(item: Relied):
    assert missing((item,)) == []


def test_a_missing_name_is_reported_by_name():
    planted = (
        Relied(JsonRPCProtocol, "_request_futures"),
        Relied(JsonRPCProtocol, "_planted_futures"),
        Relied(JsonRPCProtocol, "_run_generator", ("future", "planted_future")),
        Relied(LanguageServerProtocol, "lsp_exit", method="planted/exit"),
        Relied(JsonRPCProtocol, "structure_message", text="planted words"),
    )
    assert missing(planted) == [
        "JsonRPCProtocol._planted_futures is missing",
        "JsonRPCProtocol._run_generator has no parameter planted_future",
        "LanguageServerProtocol.lsp_exit no longer serves planted/exit",
        "JsonRPCProtocol.structure_message no longer says 'planted words'",
    ]


def test_no_other_lsp_module_names_a_relied_on_private():
    """The compatibility module is the only place a pygls private name is written."""
    private = {item.name for item in RELIED_ON if item.name.startswith("_")} | {"fm"}
    names = "|".join(map(re.escape, sorted(private)))
    pattern = re.compile(rf"\.({names})\b")
    offenders = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(LSP_DIR.glob("*.py"))
        if path.name != "pygls_compat.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []

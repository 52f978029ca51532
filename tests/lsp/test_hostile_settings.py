"""Settings a hostile or careless workspace may send, through a real ``structspec-lsp``.

A file setting may name a FIFO, ``/dev/zero``, a gzip bomb or a huge file; a
number may be ``1e400`` (valid JSON, read as infinity). Each is one message to
the user, the value it replaced is kept, and completions go on.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import pytest
from tests.helpers.lsp import STANDIN_OPTIONS, TEXT
from tests.helpers.raw_client import RawClient, no_traceback

URI = "file:///work/hostile.py"


def _completes(client: RawClient) -> None:
    """The next completion is a real suggestion."""
    client.open(URI, TEXT)
    lines = TEXT.split("\n")
    answer = client.response(client.inline(URI, len(lines) - 1, len(lines[-1])))
    items = (answer.get("result") or {}).get("items") or []
    assert items and items[0]["insertText"].strip(), answer


def _gzip_bomb(path: Path, size: int) -> None:
    """A small gzip file of ``size`` zero bytes, written without holding them in memory."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    with path.open("wb") as fh:
        for _ in range(size >> 20):
            fh.write(deflate.compress(block))
        fh.write(deflate.flush())


def _rules_path(kind: str, tmp_path: Path) -> str:
    if kind == "fifo":
        path = tmp_path / "rules.fifo"
        os.mkfifo(path)  # no writer: opening it blocking would wait forever
        return str(path)
    if kind == "device":
        return "/dev/zero"
    if kind == "gzip-bomb":
        path = tmp_path / "bomb.rules.json.gz"
        _gzip_bomb(path, 80 << 20)  # 80 MiB of zeros in about 80 KB
        assert path.stat().st_size < 1 << 20
        return str(path)
    path = tmp_path / "huge.rules.json"
    with path.open("wb") as fh:
        fh.truncate(65 << 20)  # sparse: 65 MiB on no disk
    return str(path)


@pytest.mark.parametrize("kind", ["fifo", "device", "gzip-bomb", "huge"])
def test_a_rules_file_that_is_no_file_or_too_large_is_one_message(kind: str, tmp_path: Path):
    """Not read past the limit, never blocking: one message, completions go on."""
    rules = _rules_path(kind, tmp_path)
    with RawClient() as client:
        client.initialize({**STANDIN_OPTIONS, "sources": ["lookup", "rules"], "rulesFile": rules})
        shown = client.wait_for(
            lambda m: "rulesFile" in str(m.get("params", {}).get("message", "")), timeout=20
        )
        message = shown["params"]["message"]
        expected = {
            "fifo": "a FIFO",
            "device": "a device",
            "gzip-bomb": "larger than 64 MiB decompressed",
            "huge": "larger than 64 MiB",
        }[kind]
        assert expected in message and "packaged rules" in message, message
        _completes(client)
        assert len([m for m in client.messages_shown() if "rulesFile" in m]) == 1
        assert client.shutdown_and_exit() == 0
        assert no_traceback(client.stderr), client.stderr


def test_gzip_bomb_helper_is_what_it_claims(tmp_path: Path):
    path = tmp_path / "b.gz"
    _gzip_bomb(path, 2 << 20)
    assert gzip.decompress(path.read_bytes()) == bytes(2 << 20)

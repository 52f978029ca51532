"""Server memory stays flat over a long editing day: 20,000 document notifications.

pygls kept a future per notification handled by a generator handler, forever
(this test measured +33 MB before the fix, +0.1 MB after); it drives a real
server process and reads its RSS.
"""

from __future__ import annotations

from tests.helpers.raw_client import RawClient, message

EDITS = 20_000
LIMIT_KIB = 8 * 1024


def edits(start: int, count: int) -> bytes:
    """``count`` notifications cycling didOpen / didChange / didClose over a few URIs."""
    out = []
    for i in range(start, start + count):
        uri = f"file:///work/doc{i % 7}.py"
        step = i % 3
        if step == 0:
            method = "textDocument/didOpen"
            doc = {"uri": uri, "languageId": "python", "version": 1, "text": f"x{i} = 1\n"}
            params: dict = {"textDocument": doc}
        elif step == 1:
            method = "textDocument/didChange"
            at = {"line": 0, "character": 1}
            params = {
                "textDocument": {"uri": uri, "version": 2},
                "contentChanges": [{"range": {"start": at, "end": at}, "text": "y"}],
            }
        else:
            method = "textDocument/didClose"
            params = {"textDocument": {"uri": uri}}
        out.append(message({"jsonrpc": "2.0", "method": method, "params": params}))
    return b"".join(out)


def settle(client: RawClient) -> None:
    """Wait until the server has handled everything sent so far."""
    assert client.status()["state"] in ("idle", "busy")


def test_rss_is_flat_over_20000_edits():
    with RawClient() as client:
        client.initialize()
        # The model loads on the worker after ``initialized``: a reading taken
        # while it loads counts the load as growth (that made this test flaky).
        client.wait_loaded()
        # Warm up: allocator arenas, caches and the first document store entries.
        client.send_raw(edits(0, 3_000))
        settle(client)
        client.wait_loaded()  # and the pre-warms the opened documents queued
        before = client.rss_kib()
        for start in range(3_000, 3_000 + EDITS, 2_000):
            client.send_raw(edits(start, 2_000))
            settle(client)
        after = client.rss_kib()
        print(f"RSS over {EDITS} edits: {before} KiB -> {after} KiB ({after - before:+d} KiB)")
        assert after - before < LIMIT_KIB, (before, after)
        assert client.shutdown_and_exit() == 0

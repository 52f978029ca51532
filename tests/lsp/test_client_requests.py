"""Requests the server sends to the client (``workspace/configuration``) are bounded.

A client that never answers them used to cost a request, a future and a result
type per ``didChangeConfiguration`` without settings, forever (100k
notifications grew the server from 77 to 623 MB). Now at most one
configuration pull is outstanding (changes that arrive meanwhile are folded
into one more pull when it ends), and every request to the client times out.
Both are checked on real ``structspec-lsp`` processes.
"""

from __future__ import annotations

import sys

from tests.helpers.lsp import server_env
from tests.helpers.raw_client import RawClient, message

CHANGES = 2_000

#: ``null`` settings: the server pulls the ``structspec`` section instead.
NO_SETTINGS = message(
    {"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": None}}
)

#: The server with a short timeout for its requests to the client.
SHORT_TIMEOUT = """
import structspec.lsp.protocol
structspec.lsp.protocol.CLIENT_REQUEST_TIMEOUT_S = 3.0
from structspec.lsp.__main__ import main
raise SystemExit(main(["--stdio", "--model", "standin"]))
"""


def _pulls(client: RawClient) -> int:
    return len(client.server_requests("workspace/configuration"))


def _settle(client: RawClient) -> None:
    """Every notification sent so far has been handled and its handler has started.

    The first round trip is answered as soon as it is read; handlers of the
    notifications before it start when the server next waits for input, which
    the second round trip makes it do; they write before its answer.
    """
    client.status()
    client.status()


def test_a_client_that_never_answers_gets_one_configuration_pull_at_a_time():
    with RawClient() as client:
        client.answer_requests = False
        client.initialize()
        client.wait_for(lambda m: m.get("method") == "workspace/configuration")
        client.send_raw(NO_SETTINGS * CHANGES)
        _settle(client)
        assert _pulls(client) == 1  # was 1 + CHANGES, each kept until the end of the session
        assert client.shutdown_and_exit() == 0


def test_an_unanswered_request_times_out_and_changes_meanwhile_are_pulled_once_more():
    argv = [sys.executable, "-c", SHORT_TIMEOUT]
    with RawClient(argv=argv, env=server_env()) as client:
        client.answer_requests = False
        client.initialize()
        client.wait_for(lambda m: m.get("method") == "workspace/configuration")
        client.send_raw(NO_SETTINGS * 50)
        # The first pull is never answered: without a timeout it would hold back
        # the pull these changes are folded into forever.
        client.wait_for(lambda m: _pulls(client) >= 2)
        second = client.server_requests("workspace/configuration")[1]
        client.send({"jsonrpc": "2.0", "id": second["id"], "result": [{"maxTokens": "many"}]})
        client.wait_for(lambda m: "maxTokens" in str(m.get("params", {}).get("message", "")))
        assert client.shutdown_and_exit() == 0


def test_an_answer_that_does_not_fit_ends_its_pull_at_once():
    """A ``workspace/configuration`` answer of the wrong shape (``null``, a number)
    fails the pull it answers: the next change is pulled then, not after the timeout."""
    with RawClient() as client:
        client.answer_requests = False
        client.initialize()
        client.wait_for(lambda m: m.get("method") == "workspace/configuration")
        first = client.server_requests("workspace/configuration")[0]
        client.send({"jsonrpc": "2.0", "id": first["id"], "result": None})
        client.send_raw(NO_SETTINGS)
        client.wait_for(lambda m: _pulls(client) >= 2, timeout=10)  # the timeout is 30 s
        second = client.server_requests("workspace/configuration")[1]
        client.send({"jsonrpc": "2.0", "id": second["id"], "result": [{"maxTokens": "many"}]})
        client.wait_for(lambda m: "maxTokens" in str(m.get("params", {}).get("message", "")))
        assert client.shutdown_and_exit() == 0

"""JSON-RPC and LSP lifecycle rules, checked on a real ``structspec-lsp --stdio`` process.

Parse errors, invalid messages, requests out of the lifecycle, exit codes,
error responses without internals, string fields that are not strings,
settings pulled with ``workspace/configuration``, SIGINT, and model paths that
would block a read.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from tests.helpers.lsp import server_env
from tests.helpers.raw_client import RawClient, frame, no_traceback

URI = "file:///work/example.py"
TEXT = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = "
END = (5, 4)


def error_of(answer: dict) -> tuple[int, str]:
    assert "error" in answer, answer
    return answer["error"]["code"], answer["error"]["message"]


def test_invalid_json_gets_a_parse_error():
    with RawClient() as client:
        client.initialize()
        client.send_raw(frame(b'{"jsonrpc": "2.0", "id": 9, "method": '))
        client.send_raw(frame(b"\xff\xfe not utf-8"))
        client.send_raw(frame(b"[" * 100_000))  # deeper than any JSON parser recurses
        client.send_raw(frame(b""))
        deadline = time.monotonic() + 30
        while len(errors := [m for m in client.responses() if "error" in m]) < 4:
            assert time.monotonic() < deadline, client.received
            time.sleep(0.05)
        for answer in errors:
            assert answer["id"] is None and error_of(answer)[0] == -32700
        assert client.shutdown_and_exit() == 0
        assert no_traceback(client.stderr), client.stderr


NOT_JSON_RPC = [
    ([1, 2], None),  # a batch: LSP has none
    ("hello", None),
    ({"jsonrpc": "1.0", "id": 3, "method": "shutdown"}, 3),
    ({"id": 4, "method": "shutdown"}, 4),
    ({"jsonrpc": "2.0", "id": 5, "method": 42}, 5),
    ({"jsonrpc": "2.0", "id": [6], "method": "shutdown"}, None),
    ({"jsonrpc": "2.0", "id": 7, "method": "shutdown", "params": "x"}, 7),
    ({"jsonrpc": "2.0", "nothing": True}, None),
]


def test_messages_that_are_not_json_rpc_get_invalid_request():
    with RawClient() as client:
        client.initialize()
        for obj, answer_id in NOT_JSON_RPC:
            seen = len(client.responses())
            client.send(obj)
            answer = client.wait_for(lambda m, seen=seen: m in client.responses()[seen:])
            assert answer["id"] == answer_id and error_of(answer)[0] == -32600, (obj, answer)
        assert client.shutdown_and_exit() == 0  # none of them shut anything down


def test_requests_before_initialize_are_refused_and_notifications_dropped():
    with RawClient() as client:
        client.open(URI, TEXT)  # dropped: not initialized
        code, _ = error_of(client.call("shutdown"))
        assert code == -32002
        assert error_of(client.response(client.inline(URI, *END)))[0] == -32002
        client.initialize()
        assert client.response(client.inline(URI, *END))["result"] is None  # never opened
        assert error_of(client.call("initialize", {"capabilities": {}}))[0] == -32600
        assert client.shutdown_and_exit() == 0


def test_requests_after_shutdown_get_invalid_request():
    with RawClient() as client:
        client.initialize()
        assert client.call("shutdown")["result"] is None
        assert error_of(client.response(client.inline(URI, *END)))[0] == -32600
        client.notify("exit")
        assert client.wait_exit() == 0


def test_exit_without_shutdown_exits_with_1():
    with RawClient() as client:
        client.initialize()
        client.notify("exit")
        assert client.wait_exit() == 1


def test_exit_before_initialize_exits_with_1():
    with RawClient() as client:
        client.notify("exit")
        assert client.wait_exit() == 1


def test_end_of_input_without_shutdown_exits_with_1():
    with RawClient() as client:
        client.initialize()
        assert client.proc is not None and client.proc.stdin is not None
        client.proc.stdin.close()
        assert client.wait_exit() == 1


def test_did_open_with_text_that_is_not_a_string_is_rejected():
    with RawClient() as client:
        client.initialize()
        for i, text in enumerate([None, 5, ["a"], {"x": 1}]):
            uri = f"file:///work/bad{i}.py"
            client.open(uri, text)
            # Not opened (a document reading 'None' would get a suggestion at its end).
            assert client.response(client.inline(uri, 0, 4))["result"] is None, text
        client.open(URI, TEXT)
        assert client.response(client.inline(URI, *END))["result"] is not None
        assert client.shutdown_and_exit() == 0


def test_requests_with_a_non_string_uri_get_invalid_params():
    with RawClient() as client:
        client.initialize()
        for uri in (None, 5):
            params = {
                "textDocument": {"uri": uri},
                "position": {"line": 0, "character": 0},
                "context": {"triggerKind": 1},
            }
            answer = client.call("textDocument/inlineCompletion", params)
            assert error_of(answer)[0] == -32602
        assert client.shutdown_and_exit() == 0


def test_internal_errors_reach_the_client_without_traceback_or_paths():
    """An exception in a handler: the response says "internal error", the log has the rest."""
    from pygls.exceptions import JsonRpcInternalError

    from structspec.config import Settings
    from structspec.lsp.server import build_server

    server = build_server(Settings(model="standin"))
    sent: list[bytes] = []

    class Writer:
        def write(self, data: bytes) -> None:
            sent.append(data)

        def close(self) -> None:
            pass

    server.protocol.set_writer(Writer())
    try:
        open("/no/such/dir/secret.txt")  # noqa: SIM115
    except OSError:
        error = JsonRpcInternalError.of(sys.exc_info())
    assert "traceback" in (error.data or {})
    server.protocol.send_response(1, error=error.to_response_error())
    out = b"".join(sent).decode()
    assert "-32603" in out
    assert "Traceback" not in out and "traceback" not in out and "/no/such" not in out
    assert "secret" not in out and ".py" not in out
    server.service.close()


def test_pulled_configuration_is_honoured_and_bad_values_reported():
    with RawClient() as client:
        client.pull_settings = {"languages": ["rust"], "maxTokens": "many"}
        client.initialize()
        client.wait_for(lambda m: "maxTokens" in str(m.get("params", {}).get("message", "")))
        client.open(URI, TEXT)
        # languages=["rust"] from the pull: no suggestion for Python.
        assert client.response(client.inline(URI, *END))["result"] is None
        assert client.shutdown_and_exit() == 0


def test_pulled_configuration_that_is_not_an_object_is_reported():
    with RawClient() as client:
        client.pull_settings = "fast please"
        client.initialize()
        client.wait_for(lambda m: "workspace/configuration" in str(m.get("params", "")))
        client.open(URI, TEXT)
        assert client.response(client.inline(URI, *END))["result"] is not None
        assert client.shutdown_and_exit() == 0


def test_sigint_ends_the_stdio_server_cleanly():
    with RawClient() as client:
        client.initialize()
        client.open(URI, TEXT)
        assert client.response(client.inline(URI, *END))["result"] is not None
        client.interrupt()
        assert client.wait_exit(15) == 130
        assert no_traceback(client.stderr), client.stderr


def test_sigint_before_initialize_ends_the_server():
    with RawClient() as client:
        assert error_of(client.call("shutdown"))[0] == -32002  # up, not initialized
        client.interrupt()
        assert client.wait_exit(15) == 130
        assert no_traceback(client.stderr), client.stderr


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_model_path_that_is_not_a_regular_file_is_refused(tmp_path, kind: str):
    if kind == "fifo":
        path = tmp_path / "model.gguf"
        os.mkfifo(path)
    elif kind == "device":
        path = "/dev/zero"
    else:
        path = tmp_path
    with RawClient(model=str(path)) as client:
        client.initialize()
        error = client.wait_for(
            lambda m: m.get("method") == "window/showMessage" and m["params"]["type"] == 1
        )
        assert str(path) in error["params"]["message"]
        client.open(URI, TEXT)
        assert client.response(client.inline(URI, *END))["result"] is None
        assert client.shutdown_and_exit() == 0


STUCK_LOADER = """
import sys, threading
import structspec.runtime
def open_model(*args, **kwargs):
    print("loading forever", file=sys.stderr, flush=True)
    threading.Event().wait()
structspec.runtime.open_model = open_model
from structspec.lsp.__main__ import main
raise SystemExit(main(["--stdio"]))
"""


def test_shutdown_and_exit_end_the_process_while_the_model_loads():
    """A load that never returns (an NFS file that hangs) must not keep the process alive."""
    argv = [sys.executable, "-c", STUCK_LOADER]
    with RawClient(argv=argv, env=server_env()) as client:
        client.initialize()
        deadline = time.monotonic() + 30
        while "loading forever" not in client.stderr:
            assert time.monotonic() < deadline, client.stderr
            time.sleep(0.05)
        assert client.shutdown_and_exit() == 0


def test_a_client_mistake_is_refused_not_reported_as_a_server_fault():
    with RawClient() as client:
        client.initialize()
        assert error_of(client.call("foo/bar", {}))[0] == -32601
        command = {"command": "nope", "arguments": []}
        assert error_of(client.call("workspace/executeCommand", command))[0] == -32602
        client.notify("workspace/didChangeConfiguration", {"settings": {"structspec": 5}})
        client.wait_for(lambda m: "must be an object" in str(m.get("params", {})))
        assert [m for m in client.messages_shown() if "internal error" in m] == []
        (said,) = [m for m in client.messages_shown() if "must be an object" in m]
        assert "settings.structspec" in said and said.endswith("not int")
        assert client.shutdown_and_exit() == 0
    assert "ERROR" not in client.stderr


@pytest.mark.parametrize(
    "roots",
    [
        {"rootUri": "file://[x"},
        {"rootUri": None, "workspaceFolders": [{"uri": "file://[x", "name": "w"}]},
    ],
)
def test_a_workspace_root_that_is_no_url_is_left_out(roots: dict):
    from tests.helpers.raw_client import STANDIN_OPTIONS

    with RawClient() as client:
        params = {"processId": None, "capabilities": {}, "initializationOptions": STANDIN_OPTIONS}
        assert "result" in client.call("initialize", {**params, **roots})
        client.notify("initialized", {})
        client.open(URI, TEXT)
        answer = client.response(client.inline(URI, *END))
        assert answer["result"]["items"][0]["insertText"].strip()
        assert client.shutdown_and_exit() == 0

"""LSP framing: every malformed header is dropped or answered, and the server keeps answering.

The first half drives ``FrameReader`` directly (exact, fast); the second sends
the same frames to a real ``structspec-lsp --stdio`` process.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.helpers.raw_client import RawClient, frame, no_traceback

from structspec.lsp.framing import FrameReader

PING = {"jsonrpc": "2.0", "id": "ping", "method": "workspace/executeCommand"}
PING["params"] = {"command": "structspec.status", "arguments": []}


def read_all(data: bytes, *, chunk: int = 7, max_message: int = 1 << 20) -> tuple[list, int]:
    """Bodies ``FrameReader`` finds in ``data`` fed ``chunk`` bytes at a time, and its errors."""
    pos = 0

    async def read(n: int) -> bytes:
        nonlocal pos
        piece = data[pos : pos + min(n, chunk)]
        pos += len(piece)
        return piece

    async def run() -> tuple[list, int]:
        reader = FrameReader(read, max_message=max_message)
        bodies = []
        while (body := await reader.next_body()) is not None:
            bodies.append(body)
        return bodies, reader.errors

    return asyncio.run(run())


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_valid_frames_in_any_chunking(chunk: int):
    data = frame("{}") + frame('{"a": 1}') + b"Content-Type: x\r\n" + frame("[]")
    assert read_all(data, chunk=chunk) == ([b"{}", b'{"a": 1}', b"[]"], 0)


def test_header_names_any_case_and_lf_line_ends():
    data = b"content-length: 2\r\n\r\n{}" + b"CONTENT-LENGTH:3\n\n[1]" + b"Content-Length: 1\n\r\n7"
    assert read_all(data) == ([b"{}", b"[1]", b"7"], 0)


def test_content_type_header_is_accepted():
    data = b"Content-Length: 2\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}"
    assert read_all(data) == ([b"{}"], 0)


@pytest.mark.parametrize(
    "header",
    [
        b"Content-Length: 1000000000000",  # over the limit: never allocated
        b"Content-Length: 99999999999999999999",  # 20 digits
        b"Content-Length: abc",
        b"Content-Length: -5",
        b"Content-Length: +5",
        b"Content-Length: 5 5",
        b"Content-Length: ",
        b"Content-Length: \xff\xfe",
        b"Content-Length: 0x10",
        b"Content-Length: " + b"9" * 10_000,  # a header line over the limit
        b"Content-Length: 2\r\nContent-Length: 2",  # repeated
        b"Content-Length: 2\r\nno colon here",
        b"Content-Type: only",  # no length at all (dropped while seeking the next header)
    ],
)
def test_bad_header_is_skipped_and_the_next_frame_read(header: bytes):
    data = header + b"\r\n\r\n{}" + frame('{"next": 1}')
    bodies, errors = read_all(data)
    assert bodies[-1] == b'{"next": 1}'
    assert b'{"next": 1}' not in bodies[:-1]


@pytest.mark.parametrize("end", [b"\r\r", b"\r", b" "])
def test_a_header_block_that_runs_into_the_next_costs_only_itself(end: bytes):
    # A header block whose line ends are not ones: its line runs into the next
    # message's header, which is still read.
    data = b"Content-Length: 2" + end + b"{}" + frame('{"next": 1}') + frame('{"then": 2}')
    bodies, errors = read_all(data)
    assert bodies == [b'{"next": 1}', b'{"then": 2}'] and errors == 1


def test_endless_header_lines_are_a_framing_error():
    lines = b"".join(b"X-%d: y\r\n" % i for i in range(10_000))
    data = b"Content-Length: 2\r\n" + lines + b"\r\n{}" + frame('{"next": 1}')
    bodies, errors = read_all(data, chunk=4096)
    assert bodies == [b'{"next": 1}'] and errors == 1


def test_wrong_lengths_cost_one_frame_then_resynchronise():
    too_short = b"Content-Length: 4\r\n\r\n" + b'{"a": 1}'
    too_long = b"Content-Length: 12\r\n\r\n" + b'{"b": 2}'
    data = too_short + frame('{"c": 3}') + too_long + frame('{"lost": 4}') + frame('{"d": 5}')
    bodies, _ = read_all(data)
    # The short one yields its first 4 bytes (not JSON: the server answers -32700);
    # the long one swallows the next frame's start; the stream then recovers.
    assert bodies[0] == b'{"a"'
    assert b'{"c": 3}' in bodies and bodies[-1] == b'{"d": 5}'


def test_garbage_between_frames_and_at_the_end():
    data = b"\r\n\r\nhello garbage" + frame("{}") + b"x" * 100_000 + frame("[]") + b"tail"
    assert read_all(data, chunk=4096)[0] == [b"{}", b"[]"]


def test_over_limit_body_is_not_buffered():
    data = frame(b'{"x": "' + b"y" * 5000 + b'"}') + frame("{}")
    bodies, errors = read_all(data, max_message=1000)
    assert bodies == [b"{}"] and errors == 1


def test_stream_ending_inside_a_body():
    assert read_all(b"Content-Length: 10\r\n\r\n{}") == ([], 0)


# -- through a real server process (one for this module) ----------------------


def ping(msg_id: str) -> bytes:
    return json.dumps(dict(PING, id=msg_id)).encode()


def answered(client: RawClient, msg_id: str) -> None:
    answer = client.response(msg_id)
    assert answer["result"]["state"] in ("idle", "busy"), answer


def parse_errors(client: RawClient) -> int:
    return sum(m.get("error", {}).get("code") == -32700 for m in client.responses())


@pytest.fixture(scope="module")
def server():
    with RawClient() as client:
        client.initialize()
        yield client
        assert client.alive(), client.stderr
        assert client.shutdown_and_exit() == 0
        assert no_traceback(client.stderr), client.stderr


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("huge", b"Content-Length: 1000000000000"),
        ("20-digits", b"Content-Length: 99999999999999999999"),
        ("non-numeric", b"Content-Length: abc"),
        ("negative", b"Content-Length: -5"),
        ("too-short", b"Content-Length: 5"),
        ("garbage", b"\x00\xff garbage without any header"),
    ],
)
def test_bad_frames_are_dropped_and_the_server_answers(server: RawClient, name: str, header: bytes):
    server.send_raw(header + b"\r\n\r\n" + ping(f"bad-{name}"))
    server.send_raw(frame(ping(f"after-{name}")))
    answered(server, f"after-{name}")
    assert not [m for m in server.responses() if m.get("id") == f"bad-{name}"]


def test_too_long_length_swallows_one_message_then_recovers(server: RawClient):
    before = parse_errors(server)
    body = ping("long")
    server.send_raw(b"Content-Length: %d\r\n\r\n" % (len(body) + 10) + body)
    server.send_raw(frame(ping("swallowed")))
    server.send_raw(frame(ping("after-long")))
    answered(server, "after-long")
    assert parse_errors(server) == before + 1  # answered with "id": null


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("lowercase", b"content-length: %d\r\n\r\n"),
        ("lf-only", b"Content-Length: %d\n\n"),
        ("no-space", b"Content-Length:%d\r\n\r\n"),
        ("content-type", b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc\r\n\r\n"),
    ],
)
def test_lenient_headers_are_answered(server: RawClient, name: str, header: bytes):
    body = ping(f"ok-{name}")
    server.send_raw(header % len(body) + body)
    answered(server, f"ok-{name}")


def test_many_frames_in_one_write(server: RawClient):
    server.send_raw(b"".join(frame(ping(f"p{i}")) for i in range(50)))
    for i in range(50):
        answered(server, f"p{i}")

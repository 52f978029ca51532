"""The remote backend client against answers no well-behaved server sends.

A backend's answer is untrusted input: whatever it streams, the client ends
when told, inserts no control characters, decodes no bomb, waits no longer
than its bounds for metadata, honours ``Retry-After`` and says plainly what
was wrong. The server (``tests.helpers.raw_backend``) writes scripted bytes.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator

import pytest
from tests.helpers.raw_backend import RawBackend, http_answer

from structspec.backends.client import (
    BackendError,
    BackendUnreachable,
    RemoteBackend,
    RemoteRequest,
    _retry_after,
)

REQUEST = RemoteRequest("x = ", "\n", 16, ("\n",), "file:///a.py")
NOT_HERE = http_answer("404 Not Found", b"")


def event(content: str, stop: bool = False) -> bytes:
    return b"data: " + json.dumps({"content": content, "stop": stop}).encode() + b"\n\n"


def sse(*chunks: bytes) -> Iterator[bytes]:
    yield b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    yield from chunks


def infill(answer: bytes | Iterator[bytes]):  # type: ignore[no-untyped-def]
    """A llama-server whose /infill answers ``answer`` and whose metadata is not there."""

    def respond(method: str, path: str) -> bytes | Iterator[bytes]:
        return answer if method == "POST" and path == "/infill" else NOT_HERE

    return respond


def test_a_server_writing_faster_than_the_poll_is_stopped_when_asked() -> None:
    endless = sse(*(event(f"w{i} ") for i in range(100_000)))
    with RawBackend(infill(endless)) as server:
        backend = RemoteBackend(server.url + "/infill")
        pieces: list[str] = []
        for piece in backend.stream(REQUEST, stop=lambda: len(pieces) >= 5):
            pieces.append(piece)
        assert len(pieces) == 5  # it went on to the end of what was written


def test_control_characters_never_reach_the_document() -> None:
    text = "a\x00b\x1b[31mc\r\u202ed\ud800e\ufeff"
    with RawBackend(infill(b"".join(sse(event(text, stop=True))))) as server:
        got = "".join(RemoteBackend(server.url + "/infill").stream(REQUEST))
    assert got == "ab[31mcde"


def test_a_bom_and_empty_data_lines_lose_nothing() -> None:
    answer = sse(b"\xef\xbb\xbf" + event("add"), b"data:\n\n", event("(3)", stop=True))
    with RawBackend(infill(b"".join(answer))) as server:
        assert "".join(RemoteBackend(server.url + "/infill").stream(REQUEST)) == "add(3)"


def test_stacked_content_codings_are_refused_not_inflated() -> None:
    bomb = gzip.compress(gzip.compress(b"0" * (64 << 20)))  # 64 MiB in a few hundred bytes
    answer = http_answer(
        "200 OK", bomb, b"Content-Type: text/event-stream", b"Content-Encoding: gzip, gzip"
    )
    with (
        RawBackend(infill(answer)) as server,
        pytest.raises(BackendError, match="stacked content codings"),
    ):
        "".join(RemoteBackend(server.url + "/infill").stream(REQUEST))


def test_a_web_page_answering_200_is_named_not_taken_for_an_empty_completion() -> None:
    page = b"<html><head><title>Sign in</title></head><body>portal</body></html>"
    answer = http_answer("200 OK", page, b"Content-Type: text/html")
    with (
        RawBackend(infill(answer)) as server,
        pytest.raises(BackendError, match="answered 200 but not as llama-server"),
    ):
        "".join(RemoteBackend(server.url + "/infill").stream(REQUEST))


def test_an_error_page_is_told_in_one_line_by_its_title() -> None:
    page = b"<html>\r\n<head><title>502 Bad\nGateway</title></head>\x1b[2J<body>nginx</body>"
    with (
        RawBackend(infill(http_answer("500 Internal Server Error", page))) as server,
        pytest.raises(BackendError) as caught,
    ):
        "".join(RemoteBackend(server.url + "/infill").stream(REQUEST))
    message = str(caught.value)
    assert "502 Bad Gateway" in message
    assert "\n" not in message and "\x1b" not in message and "<" not in message


def test_retry_after_is_honoured_and_the_server_not_asked_meanwhile() -> None:
    busy = http_answer("429 Too Many Requests", b'{"error": "slow down"}', b"Retry-After: 120")
    with RawBackend(infill(busy)) as server:
        backend = RemoteBackend(server.url + "/infill")
        with pytest.raises(BackendError, match="429"):
            "".join(backend.stream(REQUEST))
        with pytest.raises(BackendUnreachable, match="answered 429; retrying in 30 s"):
            "".join(backend.stream(REQUEST))  # Retry-After, within the back-off's 30 s
        assert server.hits["POST /infill"] == 1


def test_a_stalled_metadata_request_costs_one_bounded_wait_once() -> None:
    """``/props`` accepted and never answered: every completion waited on it for ever."""
    stalled = threading.Event()

    def respond(method: str, path: str) -> bytes | Iterator[bytes]:
        if path == "/props":
            stalled.wait(30)
            return NOT_HERE
        return b"".join(sse(event("add(3)", stop=True)))

    with RawBackend(respond) as server:
        backend = RemoteBackend(server.url + "/infill")
        done: list[str] = []

        def ask() -> None:
            done.extend("".join(backend.stream(REQUEST)) for _ in range(3))

        thread = threading.Thread(target=ask, daemon=True)
        thread.start()
        thread.join(15)
        stalled.set()
        assert done == ["add(3)"] * 3
        assert server.hits["GET /props"] == 1  # not asked again at every completion


def test_a_null_error_and_a_stop_string_are_read_as_what_they_say() -> None:
    """``"error": null`` is no error, and ``"stop": "false"`` (a string) ends nothing:
    only a JSON ``true`` does."""

    def raw(fields: dict[str, object]) -> bytes:
        return b"data: " + json.dumps(fields).encode() + b"\n\n"

    answer = sse(
        raw({"content": "ad", "error": None}),
        raw({"content": "d", "error": False}),
        raw({"content": "(3", "stop": "false"}),
        raw({"content": ")", "stop": True}),
        raw({"content": " never", "stop": False}),
    )
    with RawBackend(infill(b"".join(answer))) as server:
        assert "".join(RemoteBackend(server.url + "/infill").stream(REQUEST)) == "add(3)"


def test_an_empty_finish_reason_ends_nothing() -> None:
    """OpenAI-style servers that send ``"finish_reason": ""`` until the end were cut after
    their first chunk."""

    def chunk(text: str, reason: object) -> bytes:
        return (
            b"data: "
            + json.dumps({"choices": [{"text": text, "finish_reason": reason}]}).encode()
            + b"\n\n"
        )

    answer = b"".join(
        sse(chunk("add", ""), chunk("(3)", "stop"), chunk(" never", None), b"data: [DONE]\n\n")
    )

    def respond(method: str, path: str) -> bytes:
        return answer if method == "POST" and path == "/v1/completions" else NOT_HERE

    with RawBackend(respond) as server:
        assert "".join(RemoteBackend(server.url + "/v1").stream(REQUEST)) == "add(3)"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("20", 20.0),
        ("20, 20", 20.0),  # the header sent twice, joined
        ("Thu, 01 Jan 1970 00:00:25 GMT", 25.0),  # an HTTP date, 25 s after "now"
        ("Thu, 01 Jan 1970 00:59:00 GMT", 30.0),  # within the back-off's bound
        ("soon", 1.0),
        (None, 1.0),
    ],
)
def test_retry_after_in_every_form_http_allows(value: str | None, seconds: float) -> None:
    assert _retry_after(value, now=0.0) == seconds


def test_a_redirect_says_where_it_leads() -> None:
    moved = http_answer("307 Temporary Redirect", b"", b"Location: http://gpu-box:8080/infill")
    leads = "redirect to 'http://gpu-box:8080/infill'"
    with RawBackend(infill(moved)) as server, pytest.raises(BackendError, match=leads):
        "".join(RemoteBackend(server.url + "/infill").stream(REQUEST))


def test_an_openai_server_that_answers_in_chat_chunks_is_read() -> None:
    """``choices[0].delta.content`` on ``/v1/completions`` gave an empty suggestion, no error."""

    def chunk(text: str, reason: object = None) -> bytes:
        choice = {"delta": {"content": text}, "finish_reason": reason}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    answer = b"".join(sse(chunk("add"), chunk("(3)", "stop"), b"data: [DONE]\n\n"))

    def respond(method: str, path: str) -> bytes:
        return answer if method == "POST" and path == "/v1/completions" else NOT_HERE

    with RawBackend(respond) as server:
        assert "".join(RemoteBackend(server.url + "/v1").stream(REQUEST)) == "add(3)"

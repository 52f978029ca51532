"""``serve --backend`` in front of a backend that misbehaves.

A real ``structspec serve --backend`` subprocess relays to a small HTTP server
in this process that answers what a broken or hostile backend might: an answer
larger than the proxy relays, data lines nested 100,000 levels, negative and
infinite token counts, endless lines, CORS grants, a gzipped stream. The proxy
must answer every client with the backend's bytes or a JSON error, always end
its streams properly, and keep its memory and its metrics.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from tests.helpers.http_server import ServeProcess, ServerThread, metric

from structspec.http.proxy import MAX_ANSWER_BYTES, create_proxy_app

#: Streamed data lines the proxy cannot count; each must be relayed as it is.
ODD_LINES = {
    "deep": b"data: " + b"[" * 100_000 + b"]" * 100_000,
    "negative": b'data: {"choices": [], "usage": {"completion_tokens": -5}}',
    "infinite": b'data: {"choices": [], "usage": {"completion_tokens": 1e400}}',
    "huge-int": b'data: {"choices": [], "usage": {"completion_tokens": ' + b"9" * 5000 + b"}}",
    "boolean": b'data: {"choices": [], "usage": {"completion_tokens": true}}',
    "not-a-list": b'data: {"choices": {"text": "x"}, "usage": []}',
    "overlong": b'data: {"choices": [{"text": "' + b"x" * (3 * 1024 * 1024) + b'"}]}',
}
#: Content events around the odd line: the proxy counts these 3.
EVENT = b'data: {"choices": [{"index": 0, "text": "tok"}]}'


def sse(odd: bytes) -> bytes:
    lines = [EVENT, EVENT, odd, EVENT, b"data: [DONE]"]
    return b"".join(line + b"\n\n" for line in lines)


class Backend(BaseHTTPRequestHandler):
    """Answers by path; see the tests for what each path sends."""

    protocol_version = "HTTP/1.1"

    def _head(self, ctype: str, *extra: tuple[str, str], chunked: bool = True) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        for name, value in extra:
            self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        self.request_body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        try:
            if path == "/v1/huge":
                # Chunked JSON that goes on past the cap (and would go on three times as long).
                self._head("application/json")
                self._chunk(b'{"data": "')
                block = b"x" * (1024 * 1024)
                for _ in range(3 * MAX_ANSWER_BYTES // len(block)):
                    self._chunk(block)
                self._chunk(b'"}')
                self._end()
            elif path == "/v1/trickle":
                # Headers, then a byte every 0.1 s: a body that never ends (30 s at most).
                self._head("application/json")
                for _ in range(300):
                    self._chunk(b" ")
                    time.sleep(0.1)
            elif path.startswith("/v1/odd/") and path.endswith("/completions"):
                self._head("text/event-stream")
                for line in sse(ODD_LINES[path.split("/")[3]]).split(b"\n\n")[:-1]:
                    self._chunk(line + b"\n\n")
                self._end()
            elif path == "/v1/usage/completions":
                body = json.loads(self.request_body)["answer"].encode()
                self._head("application/json", ("Content-Length", str(len(body))), chunked=False)
                self.wfile.write(body)
            elif path in ("/v1/models", "/v1/cors/completions"):
                cors = [
                    ("Access-Control-Allow-Origin", "*"),
                    ("Access-Control-Allow-Credentials", "true"),
                    ("Access-Control-Expose-Headers", "*"),
                ]
                if path == "/v1/models":
                    self._head("application/json", *cors)
                    self._chunk(b'{"object": "list", "data": [{"id": "m"}]}')
                else:
                    self._head("text/event-stream", *cors)
                    self._chunk(sse(EVENT))
                self._end()
            elif path == "/v1/gzip/completions":
                # Compressed in spite of "accept-encoding: identity", flushed per event.
                self._head("text/event-stream", ("Content-Encoding", "gzip"))
                gz = zlib.compressobj(wbits=31)
                for event in sse(EVENT).split(b"\n\n")[:-1]:
                    self._chunk(gz.compress(event + b"\n\n") + gz.flush(zlib.Z_SYNC_FLUSH))
                self._chunk(gz.flush())
                self._end()
            elif path == "/v1/utf8-header/completions":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self._headers_buffer.append(b"X-Note: caf\xc3\xa9 \xe2\x82\xac\r\n")  # UTF-8
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._chunk(sse(EVENT))
                self._end()
            elif path == "/v1/gzip2/completions":
                self._head("text/event-stream", ("Content-Encoding", "gzip, gzip"))
                self._chunk(gzip.compress(gzip.compress(b"0" * (16 << 20))))
                self._end()
            elif path == "/v1/broken/completions":
                # One event, then the connection closes inside a chunk.
                self._head("text/event-stream")
                self._chunk(EVENT + b"\n\n")
                self.wfile.write(b"40\r\ndata: {")
                self.wfile.flush()
                self.close_connection = True
            elif path == "/v1/brotli/models":
                self._head("application/json", ("Content-Encoding", "br"))
                self._chunk(b"\x8b\x03\x80not json")
                self._end()
            else:
                self.send_error(404)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy hung up: what it should do with an answer it will not relay

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def backend() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def proxy(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with ServeProcess(tmp_path_factory.mktemp("proxy"), "--backend", backend) as server:
        yield server
    assert "Traceback" not in server.stderr, server.stderr


def test_an_answer_past_the_cap_is_a_502_not_a_buffer(proxy: ServeProcess) -> None:
    r = httpx.get(proxy.url + "/v1/huge", timeout=120)
    assert r.status_code == 502, r.headers
    err = r.json()["error"]
    assert err["code"] == "backend_answer_too_large"
    assert f"more than {MAX_ANSWER_BYTES} bytes" in err["message"]
    assert metric(proxy.url, 'structspec_backend_errors_total{kind="too_large"}') == 1
    assert httpx.get(proxy.url + "/health").status_code == 200


def test_an_answer_that_never_ends_times_out(backend: str) -> None:
    app = create_proxy_app(backend, answer_timeout=1.0)
    with ServerThread(app) as proxy:
        r = httpx.get(proxy.url + "/v1/trickle", timeout=60)
        assert r.status_code == 504
        assert r.json()["error"]["code"] == "backend_timeout"
        assert "did not finish its answer within 1 s" in r.json()["error"]["message"]


@pytest.mark.parametrize("odd", sorted(ODD_LINES))
def test_odd_stream_lines_are_relayed_and_the_stream_ends(proxy: ServeProcess, odd: str) -> None:
    before = metric(proxy.url, "structspec_tokens_total")
    body = {"model": "m", "prompt": "x", "stream": True}
    with httpx.stream("POST", proxy.url + f"/v1/odd/{odd}/completions", json=body) as r:
        relayed = r.read()  # raises if the chunked answer is cut off
    assert relayed == sse(ODD_LINES[odd])
    assert metric(proxy.url, "structspec_tokens_total") - before == 3  # the content events


@pytest.mark.parametrize(
    ("answer", "counted"),
    [
        pytest.param('{"usage": {"completion_tokens": 1e400, "prompt_tokens": 3}}', 0, id="inf"),
        pytest.param('{"usage": {"completion_tokens": -5, "prompt_tokens": 2}}', 0, id="negative"),
        pytest.param('{"usage": {"completion_tokens": true, "prompt_tokens": 2}}', 0, id="bool"),
        pytest.param(
            '{"usage": {"completion_tokens": 4, "prompt_tokens": 1e400}}', 4, id="inf-prompt"
        ),
        pytest.param(
            '{"usage": {"completion_tokens": 4, "prompt_tokens": 1' + "0" * 5000 + "}}",
            0,
            id="huge-int",
        ),
        pytest.param('{"usage": ' + "[" * 50_000 + "]" * 50_000 + "}", 0, id="deep"),
    ],
)
def test_odd_usage_is_relayed_and_not_counted(
    proxy: ServeProcess, answer: str, counted: int
) -> None:
    before = metric(proxy.url, "structspec_tokens_total")
    body = {"model": "m", "prompt": "x", "answer": answer}
    r = httpx.post(proxy.url + "/v1/usage/completions", json=body)
    assert r.status_code == 200 and r.content == answer.encode()
    assert metric(proxy.url, "structspec_tokens_total") - before == counted


def test_a_number_past_the_digit_limit_is_a_400(proxy: ServeProcess) -> None:
    body = b'{"model": "m", "prompt": [1, ' + b"7" * 5000 + b"]}"
    r = httpx.post(
        proxy.url + "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert "more than 4300 digits" in r.json()["error"]["message"]


def test_backend_cors_grants_are_not_relayed(proxy: ServeProcess) -> None:
    origin = {"origin": "https://evil.example"}
    r = httpx.get(proxy.url + "/v1/models", headers=origin)
    assert r.status_code == 200 and r.json()["data"] == [{"id": "m"}]
    assert not [h for h in r.headers if h.lower().startswith("access-control-")]
    body = {"model": "m", "prompt": "x", "stream": True}
    with httpx.stream(
        "POST", proxy.url + "/v1/cors/completions", json=body, headers=origin
    ) as streamed:
        assert streamed.read() == sse(EVENT)
        assert not [h for h in streamed.headers if h.lower().startswith("access-control-")]


def test_a_gzipped_stream_is_relayed_decoded(proxy: ServeProcess) -> None:
    before = metric(proxy.url, "structspec_tokens_total")
    body = {"model": "m", "prompt": "x", "stream": True}
    # Raw bytes, not httpx's decoding: they must be the plain SSE with no Content-Encoding.
    with httpx.stream("POST", proxy.url + "/v1/gzip/completions", json=body) as r:
        raw = b"".join(r.iter_raw())
        assert "content-encoding" not in r.headers
    assert raw == sse(EVENT)
    assert metric(proxy.url, "structspec_tokens_total") - before == 4


def test_an_unknown_content_coding_is_a_502(proxy: ServeProcess) -> None:
    r = httpx.get(proxy.url + "/v1/brotli/models")
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "backend_encoding"
    assert "'br'" in r.json()["error"]["message"]


def test_a_header_of_utf8_bytes_is_relayed_as_it_came(proxy: ServeProcess) -> None:
    """httpx decodes it as UTF-8, which Starlette cannot encode: every answer was a 500
    and its upstream connection was never closed (100 of them exhausted the pool)."""
    body = {"model": "m", "prompt": "x", "stream": True}
    with httpx.stream("POST", proxy.url + "/v1/utf8-header/completions", json=body) as r:
        raw = b"".join(r.iter_raw())
        assert r.status_code == 200
        assert dict(r.headers.raw)[b"x-note"] == b"caf\xc3\xa9 \xe2\x82\xac"
    assert raw == sse(EVENT)


def test_stacked_content_codings_are_a_502_not_a_bomb(proxy: ServeProcess) -> None:
    body = {"model": "m", "prompt": "x", "stream": True}
    r = httpx.post(proxy.url + "/v1/gzip2/completions", json=body)
    assert r.status_code == 502 and r.json()["error"]["code"] == "backend_encoding"


def test_a_stream_that_breaks_off_ends_with_an_error_event(proxy: ServeProcess) -> None:
    body = {"model": "m", "prompt": "x", "stream": True}
    with httpx.stream("POST", proxy.url + "/v1/broken/completions", json=body) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert events[0] == EVENT.decode()
    error = json.loads(events[-1][len("data: ") :])["error"]
    assert error["code"] == "backend_error" and "broke off" in error["message"]

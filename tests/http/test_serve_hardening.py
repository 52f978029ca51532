"""`structspec serve` against hostile and flaky clients, through real subprocesses.

Each test starts the command as a user does (stand-in model; ``tests.helpers.slow_serve``
where a generation must last), talks to it over 127.0.0.1 only, with raw
sockets where an HTTP client would tidy the request up, and bounds every wait.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers.http_server import ServeProcess, metric, raw_request, serve_env, status_of

JSON = {"content-type": "application/json"}


def _get(path: str, port: int, headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}\r\n".encode()


def _post(path: str, port: int, body: bytes, headers: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def _until(check: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


# -- the proxy: path traversal and forwarded headers ----------------------------------


class Recorder(BaseHTTPRequestHandler):
    """A backend that answers every request with JSON and records what it got."""

    seen: list[tuple[str, str, dict[str, str]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "session=backend")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def backend() -> Iterator[tuple[str, list[tuple[str, str, dict[str, str]]]]]:
    seen: list[tuple[str, str, dict[str, str]]] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/base", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


TRAVERSALS = [
    ("GET", "/v1/../../admin"),
    ("GET", "/v1/..%2f..%2fadmin"),
    ("GET", "/v1/..%2F..%2Fadmin"),
    ("DELETE", "/v1/%2e%2e/%2e%2e/api/delete"),
    ("GET", "/v1/%2E%2E/slots"),
    ("GET", "/v1/models/../../../admin"),
    ("GET", "/v1/models/..%2f..%2f..%2fadmin"),
    ("GET", "/v1/%252e%252e/%252e%252e/admin"),  # double-encoded
    ("GET", "/v1/%25252e%25252e/admin"),  # triple-encoded
    ("GET", "/v1/..%252f..%252fadmin"),
    ("GET", "/v1/..\\..\\admin"),  # backslashes (Windows-style servers)
    ("GET", "/v1/..%5c..%5cadmin"),
    ("GET", "/v1/%2e%2e%5c%2e%2e%5cadmin"),
    ("GET", "/v1/%EF%BC%8E%EF%BC%8E/admin"),  # full-width dots (NFKC-normalising servers)
    ("GET", "/v1/..;/admin"),  # path parameters (Tomcat-style)
    ("GET", "/v1/.%2e/admin"),
    ("GET", "/v1//admin"),
    ("GET", "/v1/%00/admin"),
    ("GET", "/v1/%ff/admin"),
    ("GET", "/v1/./models"),
]


def test_proxy_never_leaves_the_base_path(
    tmp_path: Path, backend: tuple[str, list[tuple[str, str, dict[str, str]]]]
) -> None:
    url, seen = backend
    with ServeProcess(tmp_path, "--backend", url) as proxy:
        for method, path in TRAVERSALS:
            answer = raw_request(
                proxy.port, f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
            )
            assert status_of(answer) == 400, (path, answer[:300])
        assert seen == []  # nothing reached the backend at all
        # Plain paths are relayed under the configured base path, encoding kept.
        for path in ("/v1/models", "/v1/models/org%2Fname", "/v1/models/a.b-c_d"):
            assert status_of(raw_request(proxy.port, _get(path, proxy.port))) == 200
        body = b'{"model": "m", "prompt": "x"}'
        assert status_of(raw_request(proxy.port, _post("/v1/completions", proxy.port, body))) == 200
    paths = [p for _, p, _ in seen]
    assert paths == [
        "/base/v1/models",
        "/base/v1/models/org%2Fname",
        "/base/v1/models/a.b-c_d",
        "/base/v1/completions",
    ]


def test_proxy_forwards_only_the_documented_headers(
    tmp_path: Path, backend: tuple[str, list[tuple[str, str, dict[str, str]]]]
) -> None:
    url, seen = backend
    extra = (
        "Authorization: Bearer client-key\r\nCookie: c=1\r\nX-Forwarded-For: 10.0.0.1\r\n"
        "X-Secret: s\r\nUser-Agent: tester\r\nAccept: application/json\r\n"
    )
    with ServeProcess(tmp_path, "--backend", url) as proxy:
        answer = raw_request(proxy.port, _get("/v1/models", proxy.port, extra))
        assert status_of(answer) == 200 and b"set-cookie" not in answer.lower()
        # A value that is not ASCII is relayed as its bytes, not refused with a 500.
        accented = _get("/v1/models", proxy.port, extra).replace(b"tester", b"caf\xe9")
        assert status_of(raw_request(proxy.port, accented)) == 200
    assert seen[-1][2]["user-agent"] == "caf\xe9"  # the byte 0xE9, read as Latin-1
    headers = seen[-2][2]
    assert headers["authorization"] == "Bearer client-key"  # no key of its own: relayed
    assert headers["user-agent"] == "tester" and headers["accept"] == "application/json"
    for name in ("cookie", "x-forwarded-for", "x-secret"):
        assert name not in headers
    assert headers["host"] != "127.0.0.1"  # the backend's own host, not the client's
    # With serve's own key the client's Authorization stays here; --backend-api-key is sent.
    env = serve_env(tmp_path, STRUCTSPEC_API_KEY="serve-key", STRUCTSPEC_BACKEND_API_KEY="bk")
    with ServeProcess(tmp_path, "--backend", url, env=env) as proxy:
        answer = raw_request(
            proxy.port, _get("/v1/models", proxy.port, "Authorization: Bearer serve-key\r\n")
        )
        assert status_of(answer) == 200
    assert seen[-1][2]["authorization"] == "Bearer bk"


# -- API key, Host, Content-Type ------------------------------------------------------------


def test_api_key_host_and_content_type(tmp_path: Path) -> None:
    env = serve_env(tmp_path, STRUCTSPEC_API_KEY="s3cret-key")
    with ServeProcess(tmp_path, "--model", "standin", env=env) as server:
        url, port = server.url, server.port
        assert httpx.get(url + "/health").status_code == 200  # open without the key
        r = httpx.get(url + "/v1/models")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "invalid_api_key"
        for bad in ("Bearer wrong", "Bearer s3cret-ke", "Basic s3cret-key", "s3cret-key", ""):
            assert httpx.get(url + "/v1/models", headers={"authorization": bad}).status_code == 401
        assert httpx.get(url + "/metrics").status_code == 401
        key = {"authorization": "Bearer s3cret-key"}
        assert httpx.get(url + "/v1/models", headers=key).status_code == 200
        body = b'{"prompt": "x = ", "max_tokens": 3}'
        # A CORS "simple request" (text/plain, forms, none) cannot start a generation.
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            r = httpx.post(
                url + "/v1/completions", content=body, headers={**key, "content-type": ctype}
            )
            assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
        r = httpx.post(url + "/v1/completions", content=body, headers=key)
        assert r.status_code == 415
        ok = {**key, "content-type": "application/json; charset=utf-8"}
        assert httpx.post(url + "/v1/completions", content=body, headers=ok).status_code == 200
        # DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends its own Host.
        auth = "Authorization: Bearer s3cret-key\r\n"
        rebound = ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "0.0.0.0")
        for host in (*rebound, "[::1]evil.example", "[::1]:x"):
            answer = raw_request(
                port, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode()
            )
            assert status_of(answer) == 403, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            answer = raw_request(
                port, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n{auth}\r\n".encode()
            )
            assert status_of(answer) == 200, host
        assert metric(url, 'structspec_generations_total{reason="length"}', key) == 1
        status = [sys.executable, "-m", "structspec", "status", "--url", url, "--once", "--json"]
        p = subprocess.run(status, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and json.loads(p.stdout)["model"] == "standin"
        del env["STRUCTSPEC_API_KEY"]
        p = subprocess.run(status, env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "STRUCTSPEC_API_KEY" in p.stderr


def test_remote_bind_needs_a_key_or_an_explicit_flag(tmp_path: Path) -> None:
    env = serve_env(tmp_path)
    cmd = [sys.executable, "-m", "structspec", "serve", "--model", "standin", "--port", "1"]
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        p = subprocess.run(
            [*cmd, "--host", host], env=env, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 2 and "--allow-unauthenticated" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    p = subprocess.run(
        [*cmd, "--api-key", " "], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and "empty" in p.stderr


def test_a_key_no_client_could_send_is_refused_at_start(tmp_path: Path) -> None:
    # Header values travel as ASCII or Latin-1 bytes: a non-ASCII key could never match.
    cmd = [sys.executable, "-m", "structspec", "serve", "--backend", "http://127.0.0.1:9"]
    for args, env in (
        (["--api-key", "clé-secrète"], serve_env(tmp_path)),
        ([], serve_env(tmp_path, STRUCTSPEC_API_KEY="ключ")),
        (["--backend-api-key", "clé"], serve_env(tmp_path)),
    ):
        p = subprocess.run(
            [*cmd, *args, "--port", "1"], env=env, capture_output=True, text=True, timeout=60
        )
        assert p.returncode == 2, p.stderr
        assert "printable ASCII" in p.stderr and "Traceback" not in p.stderr, p.stderr


# -- disconnects: non-streamed and streamed ------------------------------------------------


def test_disconnect_stops_generation_streamed_or_not(tmp_path: Path) -> None:
    with ServeProcess(tmp_path, "--model", "standin", slow=0.01) as server:
        url, port = server.url, server.port
        cancelled = 'structspec_generations_total{reason="cancelled"}'
        tokens = "structspec_tokens_total"
        for n, stream in enumerate((False, True), start=1):
            body = json.dumps({"prompt": "def f(x):\n", "max_tokens": 3000, "stream": stream})
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(_post("/v1/completions", port, body.encode()))
                assert _until(lambda: metric(url, "structspec_active_generations") == 1)
                time.sleep(0.3)  # generating: steps arrive far faster than any poll
            # The generation ends as cancelled, while no other request is waiting for it.
            assert _until(lambda n=n: metric(url, cancelled) == n), f"stream={stream}"
            assert metric(url, "structspec_active_generations") == 0
        assert metric(url, tokens) < 2 * 3000 * 0.5  # both stopped long before max_tokens


def test_a_client_leaving_mid_stream_is_not_written_to_again(tmp_path: Path) -> None:
    """Steps queued faster than the stream writes them went on to the dead socket: a
    warning line per write in the server's log (6 a disconnect, 57,000 a day)."""
    with ServeProcess(tmp_path, "--model", "standin") as server:
        body = json.dumps({"prompt": "def f(x):\n", "max_tokens": 3000, "stream": True})
        for _ in range(10):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(_post("/v1/completions", server.port, body.encode()))
                seen = b""
                while b"data: " not in seen:  # streaming: leave now
                    seen += s.recv(4096)
        assert httpx.get(server.url + "/health").status_code == 200
    assert "socket.send() raised exception" not in server.stderr, server.stderr


def test_mid_upload_disconnect_logs_one_line(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, "--model", "standin")
    with server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            head = _post("/v1/completions", server.port, b"").replace(
                b"Content-Length: 0", b"Content-Length: 1000"
            )
            s.sendall(head + b'{"prompt": "')
            time.sleep(0.3)
        assert httpx.get(server.url + "/health").status_code == 200
        time.sleep(0.3)
    assert "Traceback" not in server.stderr
    lines = [ln for ln in server.stderr.splitlines() if "request body" in ln]
    assert len(lines) == 1 and "went away while sending its request body" in lines[0]


# -- slow and idle clients --------------------------------------------------------------


def _closed_within(s: socket.socket, seconds: float, trickle: bytes = b"") -> bool:
    """Whether the server closes ``s`` within ``seconds`` (sending ``trickle`` bytes meanwhile)."""
    deadline = time.monotonic() + seconds
    s.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if trickle:
                s.sendall(trickle)
            if s.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:  # reset or broken pipe: closed too
            return True
    return False


def test_slow_and_idle_clients_are_closed(tmp_path: Path) -> None:
    args = ("--model", "standin", "--header-timeout", "1", "--body-timeout", "1")
    with ServeProcess(tmp_path, *args, "--max-connections", "16") as server:
        port = server.port
        # Headers trickling in one byte at a time (slow-loris): closed after ~1 s.
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            assert _closed_within(s, 6, trickle=b"a")
        # A connection that never sends anything: closed too.
        with socket.create_connection(("127.0.0.1", port)) as s:
            assert _closed_within(s, 6)
        # A body the server answered without reading (404, 413, 415: the rest is never
        # read), trickling in: closed after ~1 s too, not held open by the trickle.
        for head in (
            _post("/v1/nope", port, b"").replace(b"Length: 0", b"Length: 1000000"),
            _get("/health", port, "Content-Length: 1000000\r\n"),
        ):
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(head)
                assert _closed_within(s, 6, trickle=b"x")
        # A body that stops arriving: 408 in JSON.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(
                _post("/v1/completions", port, b"").replace(b"Length: 0", b"Length: 100") + b"{"
            )
            answer = b""
            while chunk := s.recv(65536):  # the server closes after its answer
                answer += chunk
        assert status_of(answer) == 408 and b"did not arrive within 1 s" in answer
        # Three times as many idle connections as allowed: the server keeps answering,
        # and its open files stay bounded.
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(48)]
        try:
            for _ in range(5):
                assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            assert server.proc is not None
            fds = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
            assert fds < 16 + 40, fds
        finally:
            for s in idle:
                s.close()
        r = httpx.post(
            server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=10
        )
        assert r.status_code == 200


# -- shutdown with generations running ---------------------------------------------------


def test_shutdown_ends_requests_with_json_errors(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, "--model", "standin", slow=0.01)
    answers: dict[str, Any] = {}
    with server:
        url = server.url

        def stream() -> None:
            events = []
            body = {"prompt": "a", "max_tokens": 3000, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
            answers["stream"] = events

        def waiting() -> None:
            body = {"prompt": "b", "max_tokens": 5}
            answers["waiting"] = httpx.post(url + "/v1/completions", json=body, timeout=30)

        threads = [threading.Thread(target=stream)]
        threads[0].start()
        assert _until(lambda: metric(url, "structspec_active_generations") == 1)
        threads.append(threading.Thread(target=waiting))
        threads[1].start()
        assert _until(lambda: metric(url, "structspec_queue_depth") == 1)
        server.stop(signal.SIGINT)
        for t in threads:
            t.join(20)
    events = answers["stream"]
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["error"]["code"] == "shutting_down"
    waiting_answer = answers["waiting"]
    assert waiting_answer.status_code == 503
    assert waiting_answer.json()["error"]["code"] == "shutting_down"
    assert "Traceback" not in server.stderr

    # A non-streamed request running when shutdown begins: a 503 in JSON, not a 500.
    server = ServeProcess(tmp_path, "--model", "standin", slow=0.01)
    with server:
        url = server.url
        result: dict[str, httpx.Response] = {}
        t = threading.Thread(
            target=lambda: result.setdefault(
                "r",
                httpx.post(
                    url + "/v1/completions", json={"prompt": "a", "max_tokens": 3000}, timeout=30
                ),
            )
        )
        t.start()
        assert _until(lambda: metric(url, "structspec_active_generations") == 1)
        server.stop(signal.SIGTERM)
        t.join(20)
    r = result["r"]
    assert r.status_code == 503 and r.headers["content-type"] == "application/json"
    assert r.json()["error"]["code"] == "shutting_down"
    assert "Traceback" not in server.stderr


def test_a_host_header_names_a_host_only_in_its_own_forms() -> None:
    from structspec.http.security import host_header_name

    assert host_header_name("[::1]:8080") == "::1" and host_header_name("[::1]") == "::1"
    assert host_header_name("localhost:8080") == "localhost"
    for odd in ("[::1]evil.example", "[::1]:x", "[::1"):
        assert host_header_name(odd) == odd  # no host the allow-list holds

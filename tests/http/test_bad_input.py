"""Bad input, overload and disconnects: clear errors, the server stays up, nothing leaks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.helpers.http_server import ServerThread, SlowModel, standin_engine

from structspec.http.app import create_app
from structspec.http.worker import EngineWorker, Job
from structspec.metrics import Metrics, snapshot

ROOT = Path(__file__).resolve().parents[2]


def post(url: str, body: bytes | str, path: str = "/v1/completions", **kw: Any) -> httpx.Response:
    data = body.encode() if isinstance(body, str) else body
    return httpx.post(
        url + path, content=data, headers={"content-type": "application/json"}, timeout=30, **kw
    )


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ("{", 400, "malformed JSON"),
        ("", 400, "empty"),
        ("\xff", 400, "not UTF-8 JSON"),
        ("[1, 2]", 400, "must be a JSON object"),
        ('"hi"', 400, "must be a JSON object"),
        ('{"prompt": 3}', 400, "'prompt'"),
        ('{"prompt": ["a", "b"]}', 400, "one prompt per request"),
        ('{"max_tokens": 5}', 400, "'prompt' is required"),
        ('{"prompt": "x", "max_tokens": "5"}', 400, "'max_tokens' must be an integer"),
        ('{"prompt": "x", "max_tokens": 0}', 400, "between 1"),
        ('{"prompt": "x", "max_tokens": true}', 400, "'max_tokens' must be an integer"),
        ('{"prompt": "x", "stream": "yes"}', 400, "'stream' must be true or false"),
        ('{"prompt": "x", "stop": 5}', 400, "'stop' must be"),
        ('{"prompt": "x", "stop": ["a", 1]}', 400, "'stop' must be"),
        ('{"prompt": "x", "temperature": "hot"}', 400, "'temperature' must be a number"),
        ('{"prompt": "x", "temperature": 3}', 400, "'temperature' must be between 0 and 2"),
        ('{"prompt": "x", "temperature": 1, "top_p": 1.5}', 400, "'top_p' must be between"),
        ('{"prompt": "x", "model": 7}', 400, "'model' must be a string"),
        ('{"prompt": "x", "model": "llama-70b"}', 404, "does not exist"),
        ('{"prompt": "x", "stream_options": 1}', 400, "'stream_options'"),
        ('{"prompt": "x", "logprobs": 3}', 400, "logprobs"),
        ('{"prompt": [1, 99999999]}', 400, "outside the vocabulary"),
        ('{"prompt": "x", "temperature": NaN}', 400, "'temperature' must be between"),
        ('{"prompt": "x", "max_tokens": 1e400}', 400, "'max_tokens' must be an integer"),
        pytest.param(
            '{"prompt": "x", "temperature": 1' + "0" * 400 + "}",
            400,
            "'temperature' is too large",
            id="400-digit-temperature",
        ),
        ('{"prompt": [3, 4], "suffix": "x"}', 400, "'suffix' goes with a text prompt"),
        ("[" * 100_000 + "]" * 100_000, 400, "nested too deeply"),
        pytest.param("[" * 101 + "]" * 101, 400, "more than 100 levels", id="101-levels"),
        pytest.param(
            '{"prompt": [1, ' + "9" * 5000 + "]}",
            400,
            "a number with more than 4300 digits",
            id="5000-digit-integer",
        ),
    ],
)
def test_completions_rejects(
    standin_server: ServerThread, body: str, status: int, needle: str
) -> None:
    r = post(standin_server.url, body.encode("latin-1"))
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert needle in err["message"]
    assert err["type"]


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('{"messages": "hi"}', "'messages' must be a non-empty array"),
        ('{"messages": []}', "'messages' must be a non-empty array"),
        ('{"messages": [3]}', "'messages[0]' must be an object"),
        ('{"messages": [{"role": "wizard", "content": "x"}]}', "'messages[0].role'"),
        ('{"messages": [{"role": "user", "content": 5}]}', "'messages[0].content'"),
        ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "only text"),
        ('{"messages": [{"role": "user", "content": "x"}], "tools": [{}]}', "tools"),
        ('{"messages": [{"role": "user", "content": ""}], "max_completion_tokens": -1}', "between"),
    ],
)
def test_chat_rejects(standin_server: ServerThread, body: str, needle: str) -> None:
    r = post(standin_server.url, body, "/v1/chat/completions")
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_oversize_body(standin_server: ServerThread) -> None:
    big = json.dumps({"prompt": "x" * (5 * 1024 * 1024)})
    r = post(standin_server.url, big)
    assert r.status_code == 413
    assert "larger than the limit" in r.json()["error"]["message"]

    def chunks() -> Any:  # no Content-Length: the limit is enforced while reading
        for _ in range(6):
            yield b"x" * (1024 * 1024)

    r = httpx.post(standin_server.url + "/v1/completions", content=chunks(), timeout=30)
    assert r.status_code == 413
    assert post(standin_server.url, '{"prompt": "x", "max_tokens": 2}').status_code == 200


def test_unknown_routes(standin_server: ServerThread) -> None:
    r = httpx.get(standin_server.url + "/v2/whatever")
    assert r.status_code == 404 and "no route" in r.json()["error"]["message"]
    r = httpx.get(standin_server.url + "/v1/completions")
    assert r.status_code == 405 and "not allowed" in r.json()["error"]["message"]
    r = httpx.get(standin_server.url + "/v1/models/nope")
    assert r.status_code == 404


def _metrics(url: str) -> Any:
    return snapshot(httpx.get(url + "/metrics").text)


def _generations(url: str, reason: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f'structspec_generations_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_disconnect_mid_stream_frees_the_model() -> None:
    model = SlowModel(0.01, seed=0, n_ctx=4096, eos_bias=-50.0)  # never stops on its own
    app = create_app(standin_engine(model), model_id="standin")
    with ServerThread(app) as server:
        body = {"prompt": "def f(x):\n", "max_tokens": 1500, "stream": True}
        with (
            httpx.Client(timeout=30) as c,
            c.stream("POST", server.url + "/v1/completions", json=body) as r,
        ):
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(10)]
            assert all(g.startswith("data: ") or g == "" for g in got)
        # The connection is closed: the engine must stop within a few passes.
        deadline = time.monotonic() + 10
        while _generations(server.url, "cancelled") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _generations(server.url, "cancelled") == 1
        calls = model.verify_calls
        time.sleep(0.3)
        assert model.verify_calls == calls  # nothing runs any more
        assert calls < 300  # far fewer than the 1500 tokens asked for
        r2 = post(server.url, '{"prompt": "x = ", "max_tokens": 3}')
        assert r2.status_code == 200


def test_queue_overflow_and_waiting_disconnect() -> None:
    model = SlowModel(0.0, seed=0, n_ctx=4096, eos_bias=-50.0)
    app = create_app(standin_engine(model), model_id="standin", max_queue=1)
    with ServerThread(app) as server:
        model.gate.clear()  # the first generation blocks inside the model
        results: dict[str, int] = {}

        def send(name: str) -> None:
            r = post(server.url, '{"prompt": "a", "max_tokens": 5}')
            results[name] = r.status_code

        first = threading.Thread(target=send, args=("first",))
        first.start()
        deadline = time.monotonic() + 10
        while _metrics(server.url).active < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        # A client that queues and then goes away must never reach the model.
        raw = socket.create_connection(("127.0.0.1", server.port))
        body = b'{"prompt": "gone", "max_tokens": 5}'
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        raw.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        while _metrics(server.url).queue_depth < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        r = post(server.url, '{"prompt": "b", "max_tokens": 5}')
        assert r.status_code == 503
        assert int(r.headers["Retry-After"]) >= 1
        assert "busy" in r.json()["error"]["message"]
        raw.close()
        time.sleep(0.6)  # the handler notices the disconnect at its next poll
        waiting = threading.Thread(target=send, args=("second",))
        waiting.start()
        while _metrics(server.url).queue_depth < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        model.gate.set()
        first.join(10)
        waiting.join(10)
        assert results == {"first": 200, "second": 200}
        snap = _metrics(server.url)
        assert snap.queue_depth == 0 and snap.active == 0
        assert _generations(server.url, "length") == 2  # the departed client never ran
        assert snap.rejected.get("queue_full") == 1


def test_fair_order_round_robin() -> None:
    order: list[str] = []
    gate = threading.Event()
    done = threading.Event()

    def job(name: str, key: str) -> Job:
        def work(_engine: Any, _job: Job) -> None:
            if name == "blocker":
                gate.wait(10)
            order.append(name)
            if name == "b1" or len(order) == 5:
                done.set()

        return Job(key, work)

    worker = EngineWorker(None, Metrics(), max_queue=8)  # type: ignore[arg-type]
    worker.submit(job("blocker", "x"))
    time.sleep(0.1)
    for name in ("a1", "a2", "a3"):
        worker.submit(job(name, "A"))
    worker.submit(job("b1", "B"))
    gate.set()
    deadline = time.monotonic() + 10
    while len(order) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.close()
    assert order == ["blocker", "a1", "b1", "a2", "a3"]


# -- leaks over 200 requests ----------------------------------------------------


def _proc_usage(pid: int) -> dict[str, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_kb": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def _mixed_requests(url: str, n: int) -> dict[str, int]:
    """``n`` requests of every kind, good and bad; returns counts by status."""
    counts: dict[str, int] = {}
    good = json.dumps({"prompt": "def add(a, b):\n", "max_tokens": 24})
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16})
    stream = {"prompt": "class A:\n", "max_tokens": 400, "stream": True}
    with httpx.Client(timeout=30, headers={"content-type": "application/json"}) as c:
        for i in range(n):
            kind = i % 10
            if kind in (0, 1):
                r = c.post(url + "/v1/completions", content=good)
            elif kind == 2:
                r = c.post(url + "/v1/chat/completions", content=chat)
            elif kind in (3, 4):
                short = dict(stream, max_tokens=20)
                with c.stream("POST", url + "/v1/completions", json=short) as s:
                    s.read()
                    r = s
            elif kind == 5:  # disconnect mid-stream
                with (
                    httpx.Client(timeout=30) as once,
                    once.stream("POST", url + "/v1/completions", json=stream) as s,
                ):
                    next(s.iter_lines())
                    r = s
            elif kind == 6:
                r = c.post(url + "/v1/completions", content=b"{not json")
            elif kind == 7:
                r = c.post(url + "/v1/completions", content=b'{"prompt": "x", "stop": 5}')
            elif kind == 8:
                r = c.post(url + "/v1/completions", content=b'{"prompt": "x", "model": "other"}')
            else:
                r = c.post(url + "/v1/completions", content=b"x" * (1024 * 1024 + 10))
            key = str(r.status_code)
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_no_leaks_over_200_requests(tmp_path: Path) -> None:
    port_sock = socket.socket()
    port_sock.bind(("127.0.0.1", 0))
    port = port_sock.getsockname()[1]
    port_sock.close()
    env = dict(
        os.environ, PYTHONPATH=str(ROOT / "server"), STRUCTSPEC_CONFIG=str(tmp_path / "none.toml")
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "structspec",
            "serve",
            "--model",
            "standin",
            "--sources",
            "lookup",
            "--port",
            str(port),
            "--max-body-bytes",
            str(1024 * 1024),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        _mixed_requests(url, 20)  # warm up: imports, caches, connection pools
        time.sleep(0.5)
        before = _proc_usage(proc.pid)
        counts = _mixed_requests(url, 200)
        time.sleep(1.0)
        after = _proc_usage(proc.pid)
        snap = snapshot(httpx.get(url + "/metrics").text)
        print(f"\nleak check over 200 requests {counts}: before {before}, after {after}")
        assert proc.poll() is None  # still up
        assert counts == {"200": 120, "400": 40, "404": 20, "413": 20}
        assert snap.queue_depth == 0 and snap.active == 0
        assert after["threads"] <= before["threads"] + 1
        assert after["fds"] <= before["fds"] + 4
        assert after["rss_kb"] - before["rss_kb"] < 40 * 1024
    finally:
        proc.terminate()
        proc.wait(10)

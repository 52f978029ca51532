"""A small real HTTP server speaking the remote backends' protocols, for the backend tests.

It answers as llama-server (``/infill``, ``/completion``, ``/props``), Ollama
(``/api/generate``, ``/api/tags``) and an OpenAI-compatible server
(``/v1/completions``, ``/v1/models``) do: the same request fields, the same
streaming formats (SSE ``data:`` lines with ``{"content", "stop"}`` for
llama-server, ``choices[0].text`` and ``data: [DONE]`` for OpenAI, NDJSON
``{"response", "done"}`` for Ollama) and the same error bodies. ``endpoints``
says which of them this server has; the others answer 404 like the real
server would. It records each request (``Seen``: its body, how many chunks of
its stream were written, whether the client closed it before its end) and
whether any stream was closed early (``closed``). With ``log`` set, its
llama-server streams write the lines llama-server's own log has for them: a
task started, cancelled on a closed connection, or its timings at the end.
"""

from __future__ import annotations

import json
import select
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ALL = ("infill", "completion", "ollama", "openai")
LLAMA = ("infill", "completion")


@dataclass
class Behaviour:
    """How the fake server answers (tests change it between requests)."""

    answer: str = "add(3, 4)\n"
    endpoints: tuple[str, ...] = ALL
    fim: bool = True  # llama-server's model has FIM tokens (else /infill answers 501)
    api_key: str = ""
    model: str = "qwen2.5-coder-1.5b"
    slots: int = 2
    chunk_delay: float = 0.0
    endless: bool = False  # stream chunks until the client goes away
    stall: bool = False  # send the headers, then nothing until the client goes away
    malformed: bool = False
    nested: bool = False  # a chunk of JSON nested deeper than a parser recurses
    oversized: bool = False
    ignore_stream: bool = False  # answer one JSON body although "stream": true
    gate: threading.Event | None = None  # streams wait for it after their first chunk


@dataclass
class Seen:
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    closed: bool = False  # the client closed its stream before the end
    chunks: int = 0  # chunks of its stream written so far


class FakeBackend:
    """The server on 127.0.0.1 in a thread; ``url`` is its base URL."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.requests: list[Seen] = []
        self.closed = threading.Event()
        self.finished = threading.Event()  # a stream was written to its end
        self.log: Path | None = None  # llama-server's log lines of its streams go here
        self._tasks = 0
        self._log_lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def task_started(self) -> int:
        """A new task's id, logged as llama-server logs a slot taking it."""
        with self._log_lock:
            task, self._tasks = self._tasks, self._tasks + 1
        self.log_line(f"slot launch_slot_: id  0 | task {task} | processing task, is_child = 0")
        return task

    def log_line(self, line: str) -> None:
        if self.log is not None:
            with self._log_lock, self.log.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def posts(self, path: str) -> list[Seen]:
        return [r for r in self.requests if r.path == path]

    def __enter__(self) -> FakeBackend:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(fake: FakeBackend) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # -- plumbing ---------------------------------------------------------
        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any) -> None:
            self._send(status, json.dumps(data).encode())

        def _not_found(self) -> None:
            b = fake.behaviour
            if "ollama" in b.endpoints:  # Ollama's router (gin)
                self._send(404, b"404 page not found", "text/plain")
            elif "infill" in b.endpoints or "completion" in b.endpoints:
                err = {"code": 404, "message": "File Not Found", "type": "not_found_error"}
                self._json(404, {"error": err})
            else:  # vLLM (FastAPI)
                self._json(404, {"detail": "Not Found"})

        seen: Seen | None = None  # the request being answered

        def _stream(self, kind: str, pieces: Iterator[bytes], *, task: bool = False) -> None:
            """Write ``pieces`` chunked; ``task``: log it as a llama-server task."""
            n = fake.task_started() if task else None
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for piece in pieces:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    if self.seen is not None:
                        self.seen.chunks += 1
                    gate = fake.behaviour.gate
                    if gate is not None:
                        gate.wait(timeout=60)
                    if fake.behaviour.chunk_delay:
                        time.sleep(fake.behaviour.chunk_delay)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                fake.finished.set()
                if n is not None:
                    fake.log_line(
                        f"slot print_timing: id  0 | task {n} |        eval time =      10.00 ms / "
                        "    4 tokens (    2.50 ms per token,   400.00 tokens per second)"
                    )
            except (BrokenPipeError, ConnectionResetError):
                if self.seen is not None:
                    self.seen.closed = True
                fake.closed.set()
                if n is not None:
                    fake.log_line(f"srv          stop: cancel task, id_task = {n}")

        def _wait_for_close(self) -> Iterator[bytes]:
            """Yield nothing until the client closes the connection (a stalled server)."""
            while True:
                readable, _, _ = select.select([self.connection], [], [], 0.05)
                if readable and not self.connection.recv(1, 0x40):  # MSG_DONTWAIT
                    fake.closed.set()
                    raise ConnectionResetError
                yield from ()

        def _pieces(self) -> Iterator[str]:
            b = fake.behaviour
            if b.endless:  # distinct words: not a loop the client would cut
                n = 0
                while True:
                    yield f"t{n} "
                    n += 1
            words = b.answer.split(" ")
            for i, word in enumerate(words):
                yield word + (" " if i < len(words) - 1 else "")

        # -- routes -------------------------------------------------------------
        def do_GET(self) -> None:  # noqa: N802
            b = fake.behaviour
            if self.path == "/props" and "infill" in b.endpoints:
                self._json(200, {"total_slots": b.slots, "model_path": f"/models/{b.model}.gguf"})
            elif self.path == "/v1/models" and "openai" in b.endpoints:
                self._json(200, {"object": "list", "data": [{"id": b.model, "object": "model"}]})
            elif self.path == "/api/tags" and "ollama" in b.endpoints:
                self._json(200, {"models": [{"name": f"{b.model}:base", "model": b.model}]})
            else:
                self._not_found()

        def do_POST(self) -> None:  # noqa: N802
            b = fake.behaviour
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            self.seen = Seen(self.path, body, dict(self.headers))
            fake.requests.append(self.seen)
            route = {
                "/infill": "infill",
                "/completion": "completion",
                "/api/generate": "ollama",
                "/v1/completions": "openai",
            }.get(self.path)
            if route is None or route not in b.endpoints:
                return self._not_found()
            if b.api_key and self.headers.get("Authorization") != f"Bearer {b.api_key}":
                if route == "ollama":
                    return self._json(401, {"error": "unauthorized"})
                err = {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
                return self._json(401, {"error": err})
            if route == "infill" and not b.fim:
                err = {
                    "code": 501,
                    "message": "Infill is not supported by this model: prefix token is missing. "
                    "suffix token is missing. middle token is missing. ",
                    "type": "not_supported_error",
                }
                return self._json(501, {"error": err})
            if route == "ollama" and not body.get("model", "").startswith(b.model):
                msg = f'model "{body.get("model")}" not found, try pulling it first'
                return self._json(404, {"error": msg})
            if b.ignore_stream:
                return self._json(200, {"content": b.answer, "stop": True})
            if route == "ollama":
                return self._stream("application/x-ndjson", self._ollama())
            if route == "openai":
                return self._stream("text/event-stream", self._openai())
            return self._stream("text/event-stream", self._llama(), task=True)

        # -- streams ----------------------------------------------------------------
        def _bad(self) -> Iterator[bytes]:
            b = fake.behaviour
            if b.stall:
                yield from self._wait_for_close()
            if b.malformed:
                yield b'data: {"content": "add(", "stop": fal\n\n'
            if b.nested:
                yield b"data: " + b"[" * 20_000 + b"]" * 20_000 + b"\n\n"
            if b.oversized:
                while True:
                    yield b"x" * 65536

        def _llama(self) -> Iterator[bytes]:
            yield from self._bad()
            for n, piece in enumerate(self._pieces()):
                yield (
                    b"data: "
                    + json.dumps(
                        {"index": 0, "content": piece, "tokens": [n], "stop": False, "id_slot": 0}
                    ).encode()
                    + b"\n\n"
                )
            timings = {"predicted_n": 4, "predicted_ms": 10.0, "prompt_n": 12, "prompt_ms": 5.0}
            last = {"content": "", "stop": True, "stop_type": "eos", "timings": timings}
            yield b"data: " + json.dumps(last).encode() + b"\n\n"

        def _openai(self) -> Iterator[bytes]:
            yield from self._bad()
            b = fake.behaviour

            def event(text: str, finish: str | None) -> bytes:
                choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}
                data = {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "created": 0,
                    "model": b.model,
                    "choices": [choice],
                }
                return b"data: " + json.dumps(data).encode() + b"\n\n"

            for piece in self._pieces():
                yield event(piece, None)
            yield event("", "stop")
            yield b"data: [DONE]\n\n"

        def _ollama(self) -> Iterator[bytes]:
            yield from self._bad()
            b = fake.behaviour
            for piece in self._pieces():
                data = {"model": b.model, "created_at": "now", "response": piece, "done": False}
                yield json.dumps(data).encode() + b"\n"
            last = {"model": b.model, "response": "", "done": True, "done_reason": "stop"}
            yield json.dumps({**last, "eval_count": 4, "eval_duration": 1000}).encode() + b"\n"

    return Handler

"""A raw JSON-RPC client for ``structspec-lsp`` subprocesses: bytes in, parsed frames out.

Unlike pytest-lsp's typed client it can send anything (bad frames, wrong
types, requests before ``initialize``) and sees every byte the server writes,
so the tests here can check what a hostile or broken client gets back. It is
synchronous (a reader thread collects the server's messages), which suits
hypothesis' stateful tests as well as plain ones.

It answers the server's own requests: ``workspace/configuration`` with
``pull_settings``, anything else with ``null``; with ``answer_requests`` false
it answers none (a client that never replies).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.lsp import ROOT, STANDIN_OPTIONS, server_command, server_env

TIMEOUT = 30.0


def frame(body: bytes | str) -> bytes:
    data = body.encode() if isinstance(body, str) else body
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def message(obj: Any) -> bytes:
    return frame(json.dumps(obj))


class RawClient:
    """One server process (``--stdio`` by default) or one TCP connection to a server."""

    def __init__(
        self,
        *args: str,
        model: str = "standin",
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock = sock
        if sock is None:
            command = argv or server_command("--stdio", "--model", model, *args)
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env or server_env(),
            )
        self.received: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self.pull_settings: Any = None
        self.answer_requests = True
        self.eof = False
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._threads = [threading.Thread(target=self._read_frames, daemon=True)]
        if self.proc is not None:
            self._threads.append(threading.Thread(target=self._read_stderr, daemon=True))
        for thread in self._threads:
            thread.start()

    # -- plumbing -----------------------------------------------------------
    def _read(self, n: int) -> bytes:
        if self.sock is not None:
            try:
                return self.sock.recv(n)
            except OSError:
                return b""
        assert self.proc is not None and self.proc.stdout is not None
        return self.proc.stdout.read1(n)  # type: ignore[attr-defined]

    def _more(self, buf: bytes) -> bytes | None:
        """``buf`` and the next chunk; ``None`` (and ``eof`` set) at the end of the stream."""
        chunk = self._read(65536)
        if not chunk:
            with self._cond:
                self.eof = True
                self._cond.notify_all()
            return None
        return buf + chunk

    def _read_frames(self) -> None:
        buf: bytes | None = b""
        while buf is not None:
            while b"\r\n\r\n" not in buf:
                if (buf := self._more(buf)) is None:
                    return
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = None
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            assert length is not None, head  # the server must frame correctly
            while len(buf) < length:
                if (buf := self._more(buf)) is None:
                    return
            body, buf = buf[:length], buf[length:]
            msg = json.loads(body)
            if "method" in msg and "id" in msg and self.answer_requests:  # from the server
                result = None
                if msg["method"] == "workspace/configuration":
                    result = [self.pull_settings for _ in msg["params"]["items"]]
                with contextlib.suppress(OSError, ValueError):
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            with self._cond:
                self.received.append(msg)
                self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace"))

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    # -- sending --------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        if self.sock is not None:
            self.sock.sendall(data)
            return
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj: Any) -> None:
        self.send_raw(message(obj))

    def request(self, method: str, params: Any = None, msg_id: Any = None) -> Any:
        msg_id = next(self._ids) if msg_id is None else msg_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # -- waiting --------------------------------------------------------------
    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT):
        """The first received message that matches ``predicate`` (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for msg in self.received:
                    if predicate(msg):
                        return msg
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise AssertionError(f"no matching message; got {self.received[-5:]}")
                self._cond.wait(left)

    def response(self, msg_id: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m, timeout)

    def call(self, method: str, params: Any = None, timeout: float = TIMEOUT) -> dict[str, Any]:
        return self.response(self.request(method, params), timeout)

    def responses(self) -> list[dict[str, Any]]:
        with self._cond:
            return [m for m in self.received if "method" not in m]

    def server_requests(self, method: str) -> list[dict[str, Any]]:
        """The requests named ``method`` that the server sent so far."""
        with self._cond:
            return [m for m in self.received if m.get("method") == method and "id" in m]

    def messages_shown(self) -> list[str]:
        with self._cond:
            return [
                m["params"]["message"]
                for m in self.received
                if m.get("method") in ("window/showMessage", "window/logMessage")
            ]

    # -- sessions -------------------------------------------------------------
    def initialize(
        self,
        options: Any = None,
        *,
        configuration: bool = True,
        experimental: Any = None,
        notebooks: bool = False,
    ) -> dict[str, Any]:
        caps: dict[str, Any] = {
            "textDocument": {"inlineCompletion": {}, "completion": {}},
            "workspace": {"configuration": configuration},
        }
        if notebooks:
            caps["notebookDocument"] = {"synchronization": {}}
        if experimental is not None:
            caps["experimental"] = experimental
        answer = self.call(
            "initialize",
            {
                "processId": None,
                "rootUri": ROOT.as_uri(),
                "capabilities": caps,
                "initializationOptions": STANDIN_OPTIONS if options is None else options,
            },
        )
        assert "result" in answer, answer
        self.notify("initialized", {})
        return answer

    def open(self, uri: str, text: Any, version: int = 1, language: str = "python") -> None:
        self.notify(
            "textDocument/didOpen",
            {
                "textDocument": {
                    "uri": uri,
                    "languageId": language,
                    "version": version,
                    "text": text,
                }
            },
        )

    def inline(self, uri: str, line: int, character: int) -> Any:
        return self.request(
            "textDocument/inlineCompletion",
            {
                "textDocument": {"uri": uri},
                "position": {"line": line, "character": character},
                "context": {"triggerKind": 1},
            },
        )

    def status(self) -> dict[str, Any]:
        answer = self.call(
            "workspace/executeCommand", {"command": "structspec.status", "arguments": []}
        )
        return answer["result"]

    def wait_loaded(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        """Poll the status until the model is loaded and the worker idle; that status."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status["state"] == "idle" and status["model"] != "not loaded":
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"the model did not load: {status}")
            time.sleep(0.05)

    def shutdown_and_exit(self, timeout: float = TIMEOUT) -> int:
        answer = self.call("shutdown", None, timeout)
        assert answer.get("result", "missing") is None, answer
        self.notify("exit")
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server did not exit; stderr:\n{self.stderr}") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def interrupt(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
            self.sock.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.close()  # type: ignore[union-attr]
        for thread in self._threads:
            thread.join(5)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connect(port: int, timeout: float = TIMEOUT) -> socket.socket:
    """A connection to a server that is starting up (retried until it listens)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            sock.settimeout(None)  # the reader thread blocks until close()
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def no_traceback(text: str) -> bool:
    return "Traceback" not in text and "MemoryError" not in text and "OverflowError" not in text

"""Helpers for the HTTP server tests: real uvicorn servers on ephemeral ports.

Servers run in a background thread of the test process (``ServerThread``) on a
socket bound before start, so there is no port race. The engine is the
deterministic stand-in model unless a test is marked ``model``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from structspec.config import Settings
from structspec.engine.decode import Engine
from structspec.model.base import Rows
from structspec.model.standin import StandInModel
from structspec.runtime import load_engine

#: Draft sources used with the stand-in model (its alphabet is characters, so
#: the code-aware sources have little to say; lookup exercises drafting).
STANDIN_SOURCES = ("lookup",)


class ServerThread:
    """Run an ASGI app under uvicorn in a thread; ``url`` is its base URL."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, timeout_graceful_shutdown=2
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


class SlowModel(StandInModel):
    """The stand-in, with a delay per verification pass (to test queueing and cancel)."""

    def __init__(self, delay: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()

    def verify(self, tokens: Sequence[int]) -> Rows:
        self.gate.wait(30)
        time.sleep(self.delay)
        return super().verify(tokens)


def standin_engine(model: StandInModel | None = None) -> Engine:
    settings = Settings(model="standin", sources=STANDIN_SOURCES)
    model = model or StandInModel(seed=0, n_ctx=4096, eos_bias=-3.0)
    return load_engine(settings, model=model, announce=lambda _m: None)


@pytest.fixture(scope="module")
def standin_server() -> Iterator[ServerThread]:
    """``structspec serve``'s app on the stand-in model, in a thread (import it into a conftest)."""
    from structspec.http.app import create_app

    app = create_app(standin_engine(), model_id="standin")
    with ServerThread(app) as server:
        yield server


# -- `structspec serve` as a subprocess ------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
#: Runs `structspec serve` with the stand-in made slow (see ``tests.helpers.slow_serve``).
SLOW_SERVE = "tests.helpers.slow_serve"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a server subprocess: this tree, no user config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSPEC_")}
    env.update(PYTHONPATH=str(ROOT / "server"), STRUCTSPEC_CONFIG=str(tmp_path / "none.toml"))
    env.update(extra)
    return env


class ServeProcess:
    """``structspec serve ARGS --port P`` in a subprocess; ``url`` once /health answers.

    ``slow`` > 0 runs it through ``tests.helpers.slow_serve``: the stand-in model with that
    delay per verification pass, never stopping on its own (for disconnects and
    shutdown). stderr is collected in ``stderr`` when the process has ended.
    """

    def __init__(
        self, tmp_path: Path, *args: str, slow: float = 0.0, env: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        head = [sys.executable, "-m", *([SLOW_SERVE, str(slow)] if slow else [])]
        self.cmd = [*head, "structspec", "serve", *args, "--port", str(self.port)]
        self.env = dict(env or serve_env(tmp_path))
        if slow:  # ``-m tests.helpers.slow_serve`` needs the repository root on the path
            paths = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
            self.env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
        self.proc: subprocess.Popen[str] | None = None
        self.stderr = ""

    def __enter__(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.cmd, env=self.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"structspec serve did not start: {self.stderr}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server, wait for it (10 s at most) and collect stderr."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
        self.stderr += err or ""
        return int(self.proc.returncode)

    def __exit__(self, *exc: object) -> None:
        self.stop()


def raw_request(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection and read the whole answer (until close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and _complete(b"".join(chunks)):
                break
        return b"".join(chunks)


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def metric(url: str, name: str, headers: dict[str, str] | None = None) -> float:
    """The value of one exact metric line (``name`` with its labels), 0 if absent."""
    for line in httpx.get(url + "/metrics", headers=headers).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0

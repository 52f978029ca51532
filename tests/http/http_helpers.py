"""Helpers for the HTTP server tests: real uvicorn servers on ephemeral ports.

Servers run in a background thread of the test process (``ServerThread``) on a
socket bound before start, so there is no port race. The engine is the
deterministic stand-in model unless a test is marked ``model``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

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

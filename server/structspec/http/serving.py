"""Running an app under uvicorn with the limits a server open to clients needs.

uvicorn's own settings cover part of it and are used as they are:

- ``timeout_keep_alive``: an idle keep-alive connection is closed after 5 s;
- ``h11_max_incomplete_event_size``: request line + headers at most 16 KiB;
- ``limit_concurrency``: past it, uvicorn answers 503 (a backstop here).

What uvicorn does not have, ``LimitedH11Protocol`` adds on its h11 protocol:

- **header timeout**: from the moment a connection waits for a request (it
  opened, or its previous response was sent) the request line and headers
  must be complete within ``header_timeout`` seconds, however slowly the bytes
  trickle in, or the connection is closed (slow-loris); so must the rest of a
  body that a response was sent without reading (a 404, 413, 415);
- **connection limit**: at most ``max_connections`` open at once. One more
  connection closes the connection that has waited longest for its request
  headers (an idle or slow one); only when every connection is busy with a
  request is the new one refused. So idle connections can never lock out a
  client that sends a request, and file descriptors stay bounded.

The body timeout is the app's (``read_body``: a 408 in JSON).

``Server`` is uvicorn's server that also tells the app when shutdown starts
(``on_exit``), so running generations are stopped with a proper error at once
instead of being cut off after the graceful-shutdown wait.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from structspec.http.common import log

#: Seconds a client has to send a request line and headers.
DEFAULT_HEADER_TIMEOUT_S = 10.0
#: Connections open at once.
DEFAULT_MAX_CONNECTIONS = 256
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_S = 5
#: File descriptors kept free for the model, logs and the backend client.
SPARE_FDS = 64


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout and a connection limit."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    _last_warning = 0.0

    def connection_made(self, transport: Any) -> None:
        self._header_deadline: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._make_room()
        if not transport.is_closing():
            self._watch_headers()

    def _make_room(self) -> None:
        waiting = [
            c
            for c in self.connections
            if isinstance(c, LimitedH11Protocol) and c is not self and c._header_deadline
        ]
        victim = min(waiting, key=lambda c: c._waiting_since) if waiting else self
        victim._close()
        now = time.monotonic()
        if now - LimitedH11Protocol._last_warning > 10:
            LimitedH11Protocol._last_warning = now
            what = "the longest-waiting idle one" if waiting else "the new one (all are busy)"
            log(f"{self.max_connections} connections are open; closed {what}")

    def _watch_headers(self) -> None:
        """Start the header deadline while the client owes the request, stop it once one is in.

        The client owes it while no request is in, and after an answer given
        without reading the body (a 4xx): the rest of that body is owed then,
        and the connection serves nothing until it is in, however slowly it
        trickles.
        """
        state = self.conn.their_state
        answered = self.conn.our_state in (h11.DONE, h11.MUST_CLOSE)
        awaiting = state is h11.IDLE or (state is h11.SEND_BODY and answered)
        if awaiting and self._header_deadline is None and not self.transport.is_closing():
            loop = asyncio.get_running_loop()
            self._waiting_since = loop.time()
            self._header_deadline = loop.call_later(self.header_timeout, self._close)
        elif not awaiting and self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _close(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if not self.transport.is_closing():
            self._watch_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None
        super().connection_lost(exc)


def protocol_class(header_timeout: float, max_connections: int) -> type[LimitedH11Protocol]:
    """A ``LimitedH11Protocol`` with these limits (uvicorn takes a class)."""
    return type(
        "LimitedH11Protocol",
        (LimitedH11Protocol,),
        {"header_timeout": header_timeout, "max_connections": max_connections},
    )


def fit_fd_limit(max_connections: int) -> int:
    """Raise the soft open-files limit towards ``max_connections`` + spares if it can.

    Returns the number of connections the limit allows (``max_connections`` or less).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = max_connections + SPARE_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - SPARE_FDS))


class Server(uvicorn.Server):
    """uvicorn's server, calling ``on_exit`` on the event loop when shutdown begins."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.on_exit is not None and self._loop is not None:
            callback, self.on_exit = self.on_exit, None
            self._loop.call_soon_threadsafe(callback)
        super().handle_exit(sig, frame)


def config(
    app: Any,
    *,
    host: str,
    port: int,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> uvicorn.Config:
    """uvicorn's config for ``serve``: the limits of the module docstring."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(header_timeout, max_connections),
        ws="none",
        lifespan="on",
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # X-Forwarded-For is a client's word, not the peer address
        timeout_keep_alive=KEEP_ALIVE_S,
        limit_concurrency=max_connections + 16,  # a backstop: eviction keeps it unreached
        timeout_graceful_shutdown=5,
    )

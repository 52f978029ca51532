"""Transports of the language server: stdio, and TCP for one client at a time.

Both run on ``structspec.lsp.framing`` (validated ``Content-Length``) and hand
each body to ``StructspecProtocol.receive``; pygls' own transports are not used
because they trust the framing, end the server on any TCP connect-and-close,
let a second TCP client take over the first one's replies, and block exit on a
thread stuck reading stdin.

- stdio: stdin is read by a daemon thread (a read blocked on an idle pipe
  never holds up exit); SIGINT and SIGTERM end the server cleanly.
- TCP: one session at a time. A connection that arrives while a client that
  initialized is connected is closed at once, without a byte read or written,
  so it can neither read nor disturb the session. A connection that closes (or
  stays silent for ``HANDSHAKE_TIMEOUT_S``) before ``initialize`` is a probe:
  the server keeps listening, and connections that arrived meanwhile wait
  their turn (at most ``MAX_WAITING``; unread until then). The first session
  that initialized ends the server when it ends, as on stdio.

The exit code: the one ``exit`` chose (0 after ``shutdown``, else 1), 128+N
after signal N, 1 when the client vanished without ``shutdown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, BinaryIO

from structspec.lsp.framing import CHUNK, FrameReader

if TYPE_CHECKING:
    from structspec.lsp.server import StructspecServer

log = logging.getLogger(__name__)

#: Seconds a TCP connection may take to send ``initialize`` before it is dropped
#: (a silent connection must not hold the only session slot).
HANDSHAKE_TIMEOUT_S = 30.0
#: TCP connections that may wait while a connection that has not initialized
#: yet holds the session; more are refused.
MAX_WAITING = 8


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]).partition("%")[0] for info in infos}
    try:
        return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    except ValueError:
        return False


class _StdinSource:
    """stdin chunks, read by a daemon thread, at most ``_AHEAD`` chunks ahead."""

    _AHEAD = 4

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._queue: asyncio.Queue[bytes] = asyncio.Queue()
        self._slots = threading.Semaphore(self._AHEAD)
        threading.Thread(target=self._pump, name="structspec-stdin", daemon=True).start()

    def _pump(self) -> None:
        while True:
            self._slots.acquire()
            try:
                chunk = os.read(self._fd, CHUNK)
            except OSError:
                chunk = b""
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
            except RuntimeError:  # the loop is closed: the server has ended
                return
            if not chunk:
                return

    async def read(self, n: int) -> bytes:
        chunk = await self._queue.get()
        self._slots.release()
        return chunk


class _StreamWriter:
    """stdout for pygls: a write that fails (client gone) stops the server, never raises."""

    def __init__(self, stream: BinaryIO, server: StructspecServer) -> None:
        self._stream = stream
        self._server = server

    def write(self, data: bytes) -> None:
        if self._server.stopped.is_set():
            return
        try:
            self._stream.write(data)
            self._stream.flush()
        except (OSError, ValueError):
            log.warning("the client closed the output: stopping")
            self._server.stop(1)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


class _SocketWriter:
    """A TCP connection for pygls (asyncio buffers the writes)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    def close(self) -> None:
        self._writer.close()


async def _pump(server: StructspecServer, frames: FrameReader) -> None:
    while (body := await frames.next_body()) is not None:
        server.protocol.receive(body)
        if server.stopped.is_set():
            return


async def _session(
    server: StructspecServer, frames: FrameReader, handshake_timeout: float | None = None
) -> None:
    """Hand bodies to the protocol until the stream ends or the server stops.

    With ``handshake_timeout``, a peer that has not sent ``initialize`` by then
    is dropped.
    """
    pump = asyncio.ensure_future(_pump(server, frames))
    stopped = asyncio.ensure_future(server.stopped.wait())
    try:
        if handshake_timeout is not None:
            await asyncio.wait(
                {pump, stopped}, timeout=handshake_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not (pump.done() or stopped.done() or server.protocol.handshake_done):
                log.warning("no initialize within %.0f s: closing", handshake_timeout)
                return
        await asyncio.wait({pump, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if pump.done():
            pump.result()  # an error reading the transport
    finally:
        for task in (pump, stopped):
            task.cancel()


def _exit_code(server: StructspecServer) -> int:
    if server.exit_code is not None:
        return server.exit_code
    return 0 if server.protocol.shutdown_received else 1


def _on_signals(server: StructspecServer) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, _signalled, server, sig)


def _signalled(server: StructspecServer, sig: signal.Signals) -> None:
    log.info("%s: stopping", sig.name)
    server.stop(128 + int(sig))


def serve_stdio(
    server: StructspecServer, stdin_fd: int | None = None, stdout: BinaryIO | None = None
) -> int:
    """Serve one client on stdin/stdout; returns the exit code."""

    async def main() -> int:
        _on_signals(server)
        fd = sys.stdin.fileno() if stdin_fd is None else stdin_fd
        source = _StdinSource(asyncio.get_running_loop(), fd)
        server.protocol.set_writer(_StreamWriter(stdout or sys.stdout.buffer, server))
        await _session(server, FrameReader(source.read))
        return _exit_code(server)

    return asyncio.run(main())


def serve_tcp(server: StructspecServer, host: str, port: int) -> int:
    """Listen on ``host:port`` and serve one client at a time; returns the exit code.

    Raises ``OSError`` when the address cannot be bound.
    """

    async def main() -> int:
        _on_signals(server)
        slot = asyncio.Lock()  # one session at a time; FIFO for those that wait
        waiting = 0
        connections: set[asyncio.Task[None]] = set()

        def settled() -> bool:
            """A client initialized (the session is taken until the server ends)."""
            return server.protocol.handshake_done or server.stopped.is_set()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal waiting
            task = asyncio.current_task()
            if task is not None:
                connections.add(task)
            peer = writer.get_extra_info("peername")
            try:
                if settled() or waiting >= MAX_WAITING:
                    log.warning("refused a connection from %s: a client is connected", peer)
                    return
                # Until the session in progress initializes, it may be a port probe:
                # wait for it rather than refuse (an editor probes, then connects).
                waiting += 1
                try:
                    await slot.acquire()
                finally:
                    waiting -= 1
                try:
                    if settled():
                        log.warning("refused a connection from %s: a client is connected", peer)
                        return
                    await _serve_connection(server, reader, writer, peer)
                finally:
                    slot.release()
            finally:
                writer.close()
                if task is not None:
                    connections.discard(task)

        listener = await asyncio.start_server(on_connect, host, port)
        names = ", ".join(str(s.getsockname()) for s in listener.sockets)
        log.info("listening on %s", names)
        try:
            await server.stopped.wait()
        finally:
            listener.close()
            # Let every connection handler finish (each watches ``stopped``).
            if connections:
                await asyncio.wait(set(connections), timeout=5.0)
        return _exit_code(server)

    return asyncio.run(main())


async def _serve_connection(
    server: StructspecServer,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    peer: object,
) -> None:
    """One TCP session; a client that initialized ends the server when it leaves."""
    log.info("client connected from %s", peer)
    try:
        server.protocol.set_writer(_SocketWriter(writer))
        await _session(server, FrameReader(reader.read), HANDSHAKE_TIMEOUT_S)
    except OSError as exc:
        log.warning("connection from %s failed: %s", peer, exc)
    finally:
        server.protocol.writer = None
    if server.protocol.handshake_done or server.stopped.is_set():
        server.stop(_exit_code(server))
    else:
        log.info("%s left before initialize: still listening", peer)

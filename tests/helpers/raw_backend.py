"""An HTTP server that answers with whatever bytes a test scripts, framing included.

``RawBackend(respond)`` calls ``respond(method, path)`` for each request and
writes the bytes (or each chunk of the iterable) it returns as they are, then
closes the connection (``keep_alive``: reads the next request on it):
status lines, headers and bodies no well-behaved server would send. ``hits``
counts the requests by ``"METHOD path"``, ``connections`` the connections.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from types import TracebackType

Respond = Callable[[str, str], bytes | Iterable[bytes]]


def http_answer(status: str, body: bytes, *headers: bytes) -> bytes:
    """A whole HTTP/1.1 answer: ``status`` (``b"200 OK"``), ``headers`` (raw lines), ``body``."""
    head = [b"HTTP/1.1 " + status.encode(), *headers, b"Content-Length: %d" % len(body)]
    return b"\r\n".join([*head, b"Connection: close", b"", body])


class RawBackend:
    """The server on 127.0.0.1 in a thread; ``url`` is its base URL."""

    def __init__(self, respond: Respond, *, keep_alive: bool = False) -> None:
        self.respond = respond
        self.keep_alive = keep_alive
        self.hits: Counter[str] = Counter()
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> RawBackend:
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                head, _, data = data.partition(b"\r\n\r\n")
                method, path = head.split(b" ")[:2]
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                data = data[length:]  # what is left: the start of the next request
                key = f"{method.decode()} {path.decode()}"
                self.hits[key] += 1
                answer = self.respond(method.decode(), path.decode())
                try:
                    for chunk in [answer] if isinstance(answer, bytes) else answer:
                        if self._stop.is_set():
                            return
                        conn.sendall(chunk)
                except OSError:
                    return  # the client hung up
                if not self.keep_alive:
                    return

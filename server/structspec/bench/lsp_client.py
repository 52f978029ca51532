"""A minimal LSP client over a subprocess' stdio, for the benchmarks that drive a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any


class StdioClient:
    """A minimal LSP client over a subprocess' stdio (JSON-RPC with Content-Length framing)."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self._ids = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.messages: list[str] = []

    async def start(self, cmd: Sequence[str], env: dict[str, str], stderr: Any) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
            limit=1 << 24,
        )
        self._reader = asyncio.create_task(self._read())

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(message).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        stream = self.proc.stdout
        try:
            while True:
                length = 0
                while True:
                    header = await stream.readline()
                    if not header:
                        raise EOFError
                    if not header.strip():
                        break
                    if header.lower().startswith(b"content-length:"):
                        length = int(header.split(b":", 1)[1])
                message = json.loads(await stream.readexactly(length))
                self._dispatch(message)
        except (EOFError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RuntimeError("the language server exited"))

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message and ("result" in message or "error" in message):
            fut = self._pending.pop(message["id"], None)
            if fut is not None and not fut.done():
                if "error" in message:
                    fut.set_exception(RuntimeError(str(message["error"])))
                else:
                    fut.set_result(message.get("result"))
        elif "id" in message:  # a request from the server: configuration and the like
            result: Any = [None] * len(message.get("params", {}).get("items", [])) or None
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        elif message.get("method") in ("window/showMessage", "window/logMessage"):
            self.messages.append(str((message.get("params") or {}).get("message", "")))

    async def request(self, method: str, params: Any) -> Any:
        return await self.start_request(method, params)[1]

    def start_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        """Send a request; its id and the future of its answer (not awaited here)."""
        self._ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._ids] = fut
        self._send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return self._ids, fut

    def cancel(self, request_id: int) -> None:
        """``$/cancelRequest``, as an editor sends when the document changes under a request.

        Its answer (an error or a late result) is dropped unread.
        """
        fut = self._pending.get(request_id)
        if fut is not None:
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.notify("$/cancelRequest", {"id": request_id})

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.request("shutdown", None), 30)
            self.notify("exit", None)
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()

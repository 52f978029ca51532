"""The simulated user of the editor benchmark, against one real language server.

``ReplayedServer`` starts ``structspec-lsp`` over stdio (``bench/lsp_client.py``)
with the default settings (``server_env``), and types at cursor points
(``bench/points.py``) as ``bench/editor.py`` describes: accepting suggestions
and typing a line one key at a time, waiting for each answer, or paced at
``PACE_MS`` without waiting. It collects the timings in a ``ConfigResult``
(``bench/editor_stats.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from structspec.bench.editor_stats import Answer, ConfigResult, PacedPoint, without_model
from structspec.bench.lsp_client import StdioClient
from structspec.bench.points import (
    Point,
    accept_edit,
    enter_text,
    line_continuation,
    offset_at,
    position_at,
    utf16_len,
)
from structspec.completion.trace import TRACE_ENV
from structspec.completion.types import ERROR, IDLE, NOT_LOADED
from structspec.config import Settings
from structspec.files import CACHE_DIR_ENV, default_cache_home

Out = Callable[[str], None]

#: Seconds between a suggestion appearing and its acceptance (reading it and
#: pressing Tab; a quick reader).
READ_S = 0.6
#: Suggestions a user accepts in a row on one line before pressing Enter.
MAX_ACCEPTS = 4
#: Seconds a server is left alone after its turn at a point (longer than its
#: pre-generation of at most ``maxTokens`` tokens on this class of machine).
SETTLE_S = 3.0
#: Seconds more, at most, it is left alone while its status says it is warming
#: (pre-warm of a whole document takes seconds): its background work must not
#: slow the next server's turn.
SETTLE_MAX_S = 20.0
#: Seconds a server may take to pre-warm a document before it is typed in (``wait_idle``).
IDLE_WAIT_MAX_S = 60.0

#: The paced user's keystroke interval (ms): about 80 words a minute, a fast typist's
#: steady pace, faster than most answers the model computes.
PACE_MS = 150.0
#: Seconds the paced user spends at a point before typing (finding the place; the
#: server's pre-warm works meanwhile).
ARRIVE_S = 1.0


def server_env(trace: Path | None, cache_dir: Path | None = None) -> dict[str, str]:
    """This tree's code, the default settings (no config file, no setting's variable), a trace.

    The on-disk prompt-prefix cache is off (``STRUCTSPEC_CACHE_DIR`` empty): an
    earlier run's saved prompts would make every "new place" of this one warm.
    A benchmark of the cache itself names a ``cache_dir`` of its own (a
    temporary folder), never the user's.
    """
    settings = {f"STRUCTSPEC_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    env = {k: v for k, v in os.environ.items() if k not in settings}
    server_dir = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (server_dir, env.get("PYTHONPATH")) if p)
    env["STRUCTSPEC_CONFIG"] = os.devnull  # not a file: the defaults
    env[CACHE_DIR_ENV] = "" if cache_dir is None else str(cache_dir)
    if trace is not None:
        env[TRACE_ENV] = str(trace)
    return env


#: The cache folders of per-model, per-machine measurements (``runtime``): the
#: verification cost table and the prompt and decode rates.
MEASUREMENT_FOLDERS = ("cost", "rates")


def share_measurements(cache_dir: Path) -> None:
    """Let a server whose cache folder is ``cache_dir`` read the measurements the others read.

    Only the prompt-prefix cache is the folder's own (``server_env``): a server
    started there would otherwise measure its cost table and the model's rates
    again (minutes on a loaded machine) and plan drafts and choose its adaptive
    defaults from other figures than the servers beside it, which read the
    platform's folder. Where a link cannot be made, it measures its own.
    """
    for name in MEASUREMENT_FOLDERS:
        link = cache_dir / name
        if link.is_symlink() or link.exists():
            continue
        shared = default_cache_home() / name
        with contextlib.suppress(OSError):
            shared.mkdir(parents=True, exist_ok=True)
            cache_dir.mkdir(parents=True, exist_ok=True)
            link.symlink_to(shared, target_is_directory=True)


class ReplayedServer:
    """One server configuration being replayed (a subprocess and its results)."""

    def __init__(
        self,
        name: str,
        options: dict[str, Any],
        model: str,
        threads: int,
        timeout_s: float,
        trace: Path | None = None,
        log_dir: Path | None = None,
        *,
        paced: bool = False,
    ) -> None:
        self.name = name
        self.paced = paced
        self.options = options
        self.model = model
        self.threads = threads
        self.timeout_s = timeout_s
        self.trace = trace
        # The server's own log (one line per model answer: prefill and decode times).
        slug = "".join(c if c.isalnum() else "-" for c in name)
        self.log_file = log_dir / f"{slug}.log" if log_dir is not None else None
        self.result = ConfigResult(name)
        self.client = StdioClient()
        # The server's stderr, kept for the error message; closed in close().
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        #: The server's prompt-prefix cache folder (``STRUCTSPEC_CACHE_DIR``); ``None``: off.
        self.cache_dir: Path | None = None
        self.opened: dict[str, int] = {}
        self.text = ""
        self.served = 0  # the status' answers without the model so far
        self.stats: dict[str, Any] = {}  # the status' counters after the latest answer

    def failure(self, exc: BaseException) -> RuntimeError:
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", "replace")[-2000:]
        return RuntimeError(f"{self.name}: {exc}\n{tail}\n{self.client.messages[-5:]}")

    async def start(self) -> None:
        """Start the server and wait until its model is loaded (so loads never overlap)."""
        cmd = [sys.executable, "-m", "structspec.lsp", "--stdio", "--threads", str(self.threads)]
        if self.model:
            cmd += ["--model", self.model]
        if self.log_file is not None:
            cmd += ["--log-file", str(self.log_file)]
        if self.cache_dir is not None:
            share_measurements(self.cache_dir)
        await self.client.start(cmd, server_env(self.trace, self.cache_dir), self.stderr)
        await self.client.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": {"textDocument": {"inlineCompletion": {}}},
                "initializationOptions": self.options,
            },
        )
        self.client.notify("initialized", {})
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            # Loaded, and its warm-up (the healing index) done: a status before the
            # server has even started loading says "idle" too, hence the model name.
            status = await self.status()
            if status.get("state") == ERROR:
                raise RuntimeError(f"the server could not load the model: {status}")
            if status.get("state") == IDLE and status.get("model") not in (None, NOT_LOADED):
                return
            await asyncio.sleep(0.1)
        raise TimeoutError("the model did not load in time")

    async def status(self) -> dict[str, Any]:
        result = await self.client.request(
            "workspace/executeCommand", {"command": "structspec.status", "arguments": []}
        )
        return result if isinstance(result, dict) else {}

    async def finish(self) -> None:
        self.result.status = await self.status()

    async def close(self) -> None:
        try:
            await self.client.close()
        finally:
            self.stderr.close()

    def _change(self, uri: str, change: dict[str, Any]) -> None:
        self.opened[uri] += 1
        self.client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": self.opened[uri]},
                "contentChanges": [change],
            },
        )

    def _set_text(self, point: Point) -> None:
        """Open the document with the point's text, or replace its whole text with it."""
        self.text = point.text
        if point.uri in self.opened:
            self._change(point.uri, {"text": point.text})
            return
        self.opened[point.uri] = 1
        self.client.notify(
            "textDocument/didOpen",
            {
                "textDocument": {
                    "uri": point.uri,
                    "languageId": point.language,
                    "version": 1,
                    "text": point.text,
                }
            },
        )

    def _completion_params(self, uri: str, offset: int) -> dict[str, Any]:
        """An automatic inline-completion request at ``offset`` of the current text."""
        return {
            "textDocument": {"uri": uri},
            "position": position_at(self.text, offset),
            "context": {"triggerKind": 2},
        }

    def _type(self, uri: str, offset: int, inserted: str) -> int:
        """Insert ``inserted`` at ``offset`` (a keystroke's ``didChange``); the new cursor."""
        pos = position_at(self.text, offset)
        self._change(uri, {"range": {"start": pos, "end": pos}, "text": inserted})
        self.text = self.text[:offset] + inserted + self.text[offset:]
        return offset + len(inserted)

    async def _ask(self, uri: str, offset: int, t0: float | None = None) -> tuple[Answer, Any]:
        """Ask for a suggestion at ``offset``; timed from ``t0`` (default: now)."""
        t0 = time.perf_counter() if t0 is None else t0
        answer = await asyncio.wait_for(
            self.client.request(
                "textDocument/inlineCompletion", self._completion_params(uri, offset)
            ),
            self.timeout_s,
        )
        ms = (time.perf_counter() - t0) * 1000.0
        self.stats = (await self.status()).get("stats", {})  # not timed
        served = without_model(self.stats)
        cached, self.served = served > self.served, served
        items = answer.get("items") if isinstance(answer, dict) else None
        text = items[0].get("insertText") if items and isinstance(items[0], dict) else None
        chars = len(text) if isinstance(text, str) else 0
        return Answer(ms, cached, bool(items), chars), answer

    async def _edit(self, uri: str, offset: int, inserted: str) -> tuple[Answer, Any]:
        """Insert ``inserted`` at ``offset`` (a keystroke) and ask at its end, timed."""
        t0 = time.perf_counter()
        return await self._ask(uri, self._type(uri, offset, inserted), t0)

    async def accept_at(self, point: Point) -> None:
        """Ask at the cleared line, accept the suggestion, ask after it and on the next line."""
        result = self.result
        self._set_text(point)
        cursor = offset_at(self.text, point.line, utf16_len(point.indent))
        probe, answer = await self._ask(point.uri, cursor)
        if not result.first_ms:  # the run's first request: the whole prompt is evaluated
            result.first_ms = probe.ms
        items = answer.get("items") if isinstance(answer, dict) else None
        if not items:
            result.no_suggestion_points += 1
            return
        item: dict[str, Any] | None = items[0]
        for _ in range(MAX_ACCEPTS):
            if item is None:
                break
            await asyncio.sleep(READ_S)
            after, answer, cursor = await self._accept(point.uri, item, cursor)
            result.after_accept.append(after)
            item = line_continuation(self.text, answer, cursor)
        newline = enter_text(self.text, cursor)
        nxt, _ = await self._edit(point.uri, cursor, newline)
        result.next_line.append(nxt)

    async def _accept(self, uri: str, item: dict[str, Any], cursor: int) -> tuple[Answer, Any, int]:
        """Accept ``item`` at ``cursor``, then ask at the new cursor (timed from the accept)."""
        t0 = time.perf_counter()
        self.text, change, cursor = accept_edit(self.text, item, cursor)
        self._change(uri, change)
        command = item.get("command")
        accepted = None
        if isinstance(command, dict) and command.get("command"):
            accepted = asyncio.ensure_future(
                self.client.request(
                    "workspace/executeCommand",
                    {"command": command["command"], "arguments": command.get("arguments", [])},
                )
            )
        after, answer = await self._ask(uri, cursor, t0)
        if accepted is not None:
            await accepted
        return after, answer, cursor

    async def type_point(self, point: Point) -> None:
        """Restore the point's text and type its line one character at a time."""
        result = self.result
        self._set_text(point)
        offset = offset_at(self.text, point.line, utf16_len(point.indent))
        for ch in point.typed:
            answer, _ = await self._edit(point.uri, offset, ch)
            offset += len(ch)
            result.keys.append(answer)

    async def type_point_paced(self, point: Point) -> None:
        """Arrive at the point, then type its line a key every ``PACE_MS``, never waiting.

        Each keystroke is a ``didChange`` and a request, as an editor sends
        them; a request still unanswered when the next key comes is cancelled
        (``$/cancelRequest``, as VS Code does when the document changes).
        """
        self._set_text(point)
        await asyncio.sleep(ARRIVE_S)
        offset = offset_at(self.text, point.line, utf16_len(point.indent))
        paced = PacedPoint()
        start = time.perf_counter()
        for i, ch in enumerate(point.typed):
            t_key = start + i * PACE_MS / 1000.0
            await asyncio.sleep(max(0.0, t_key - time.perf_counter()))
            offset = self._type(point.uri, offset, ch)
            request_id, answer = self.client.start_request(
                "textDocument/inlineCompletion", self._completion_params(point.uri, offset)
            )
            last = i == len(point.typed) - 1
            wait = self.timeout_s if last else t_key + PACE_MS / 1000.0 - time.perf_counter()
            done, _ = await asyncio.wait({answer}, timeout=max(0.0, wait))
            if not done:
                if last:
                    raise TimeoutError("the last keystroke of a point was not answered")
                self.client.cancel(request_id)
                paced.keys.append(None)
                paced.shown.append(False)
                continue
            now = time.perf_counter()
            result = answer.result()
            items = result.get("items") if isinstance(result, dict) else None
            paced.keys.append((now - t_key) * 1000.0)
            paced.shown.append(bool(items))
            if items and paced.first_shown_ms is None:
                paced.first_shown_ms = (now - start) * 1000.0
        self.result.paced.append(paced)

    async def run_point(self, point: Point) -> None:
        if self.paced:
            await self.type_point_paced(point)
        else:
            await self.accept_at(point)
            await self.type_point(point)
        await self.settle()

    async def settle(self) -> None:
        """Leave the server alone for ``SETTLE_S``, then while it warms (``SETTLE_MAX_S`` at most).

        The user moves on; the server's background work (pre-generation after
        the last answer, pre-warm) ends before the next server types, so one
        server's idle work never slows another's turn.
        """
        await asyncio.sleep(SETTLE_S)
        deadline = time.monotonic() + SETTLE_MAX_S
        while time.monotonic() < deadline and (await self.status()).get("warming"):
            await asyncio.sleep(0.2)

    async def wait_idle(self) -> None:
        """Wait until the server has nothing to do (``IDLE_WAIT_MAX_S`` at most): idle and
        not warming at three status reads in a row, 0.2 s apart.

        So that servers typed in side by side all ask from the same window (a
        document's evaluated top), not from what a pre-warm reached while the
        others ran.
        """
        deadline = time.perf_counter() + IDLE_WAIT_MAX_S
        idle = 0
        while idle < 3 and time.perf_counter() < deadline:
            await asyncio.sleep(0.2)
            status = await self.status()
            idle = idle + 1 if status.get("state") == "idle" and not status.get("warming") else 0


async def start_server(server: ReplayedServer, out: Out) -> None:
    """Start one server and say how long its model took to load (loads never overlap)."""
    t0 = time.perf_counter()
    await server.start()
    out(f"  {server.name}: server ready in {time.perf_counter() - t0:.1f} s")


S = TypeVar("S", bound=ReplayedServer)


class InHand(Generic[S]):
    """Servers run side by side, and the one in hand: the one a failure names."""

    def __init__(self, servers: Sequence[S]) -> None:
        self.servers = list(servers)
        self.current = self.servers[0]

    def each(self) -> Iterator[S]:
        """The servers in turn, each in hand while the caller works with it."""
        for server in self.servers:
            self.current = server
            yield server


async def run_servers(
    servers: Sequence[S], out: Out, run: Callable[[InHand[S]], Awaitable[None]]
) -> None:
    """Start ``servers`` one after the other, ``run`` them, and finish them.

    A failure is raised as the server in hand's (``ReplayedServer.failure``:
    its log's tail); every server is closed, whatever happened.
    """
    hand = InHand(servers)
    try:
        for server in hand.each():
            await start_server(server, out)
        await run(hand)
        for server in hand.each():
            await server.finish()
    except Exception as exc:
        raise hand.current.failure(exc) from exc
    finally:
        for server in hand.servers:
            with contextlib.suppress(Exception):
                await server.close()


class LineMeasurement(Protocol):
    """A measurement over the infill suite's lines (``menu``, ``notebooks``, ``midline``)."""

    def __call__(self, model: str, threads: int, *, limit: int) -> object: ...


def measurement_main(
    argv: Sequence[str] | None,
    module: str,
    description: str,
    run: LineMeasurement,
    limit: int,
    limit_help: str,
) -> int:
    """The command line of such a measurement: ``python -m structspec.bench.MODULE``."""
    import argparse

    p = argparse.ArgumentParser(
        prog=f"python -m structspec.bench.{module}", description=description
    )
    p.add_argument("--model", default="", help="GGUF path (default: the embedded model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=limit, help=limit_help)
    args = p.parse_args(argv)
    run(args.model, args.threads, limit=args.limit)
    return 0

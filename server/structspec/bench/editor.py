"""Editor replay benchmark: type through source files against the real language server.

A user is simulated over stdio against a ``structspec-lsp`` subprocess (the
same program an editor starts): at several cursor points of each file the line
there is cleared back to its indentation and typed again one character at a
time; every keystroke is a ``didChange`` followed by a
``textDocument/inlineCompletion`` request, and the time from sending the
keystroke to receiving the answer is the keystroke-to-suggestion latency.
Requests are sequential (the next key is typed once the answer is in), so each
latency is the server's alone. The first request of a run (a cold prefill of
the whole prompt) is reported separately.

The configurations below run as three servers side by side, typing in turn at
each cursor point, so a busy phase of a shared machine hits all of them alike.

The same replay runs against three server configurations, side by side:

- ``structspec``: speculative decoding with prefix reuse (the defaults);
- ``greedy``: prefix reuse, no speculation;
- ``no prefix reuse``: speculative, but the whole prompt evaluated on every
  request. Re-prefilling is slow, so this one replays only about
  ``reuse_off_keystrokes`` keystrokes (the first few at every point, so
  short and long prompts both count); the speed-up of reuse is the ratio of
  median latencies over the keystrokes both runs answered with the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Out = Callable[[str], None]

#: Settings sent as ``initializationOptions`` in every configuration.
BASE_OPTIONS: dict[str, Any] = {"debounceMs": 0, "maxTokens": 48, "maxLatencyMs": 1500}

CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("structspec", {}),
    ("greedy", {"speculative": False}),
    ("no prefix reuse", {"prefixReuse": False}),
)


def default_files() -> list[str]:
    """A real source file of this package, about 2,000 tokens (the issue's workload)."""
    return [str(Path(__file__).resolve().parents[1] / "completion" / "documents.py")]


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class Point:
    """One cursor point: ``line`` of ``uri`` is cleared to ``indent`` and ``typed`` is typed."""

    uri: str
    text: str  # the document with the line cleared
    line: int
    indent: str
    typed: str


def plan_points(files: Sequence[str], points_per_file: int, max_chars: int) -> list[Point]:
    """Cursor points spread evenly over each file (lines with at least 8 characters of code)."""
    points: list[Point] = []
    for name in files:
        path = Path(name)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {name}: {exc}") from None
        lines = source.splitlines(keepends=True)
        candidates = [
            i
            for i, ln in enumerate(lines)
            if len(ln.strip()) >= 8 and i >= max(3, len(lines) // 10)
        ]
        if not candidates:
            continue
        step = max(1, len(candidates) // max(1, points_per_file))
        chosen = candidates[::step][:points_per_file]
        uri = path.resolve().as_uri()
        for i in chosen:
            body = lines[i].rstrip("\r\n")
            indent = body[: len(body) - len(body.lstrip())]
            ending = lines[i][len(body) :] or "\n"
            text = "".join(lines[:i]) + indent + ending + "".join(lines[i + 1 :])
            points.append(Point(uri, text, i, indent, body[len(indent) :][:max_chars]))
    return points


class StdioClient:
    """A minimal LSP client over a subprocess' stdio (JSON-RPC with Content-Length framing)."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self._ids = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self.statuses: list[dict[str, Any]] = []
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
        elif message.get("method") == "structspec/status":
            self.statuses.append(message.get("params") or {})
        elif message.get("method") in ("window/showMessage", "window/logMessage"):
            self.messages.append(str((message.get("params") or {}).get("message", "")))

    async def request(self, method: str, params: Any) -> Any:
        self._ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[self._ids] = fut
        self._send({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        return await fut

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


@dataclass
class ConfigResult:
    """Measurements of one configuration."""

    name: str
    first_ms: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)  # after the first request
    from_model: list[bool] = field(default_factory=list)  # per latency: the model answered
    keys: list[tuple[int, int]] = field(default_factory=list)  # per latency: (point, char)
    suggestions: int = 0
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def model_latencies_ms(self) -> list[float]:
        return [ms for ms, m in zip(self.latencies_ms, self.from_model, strict=True) if m]

    def summary(self) -> dict[str, Any]:
        lat = self.latencies_ms
        model_lat = self.model_latencies_ms
        stats = self.status.get("stats", {}) if isinstance(self.status, dict) else {}
        return {
            "keystrokes": len(lat) + 1,
            "first_ms": round(self.first_ms, 1),
            "p50_ms": round(_percentile(lat, 50), 1),
            "p95_ms": round(_percentile(lat, 95), 1),
            "mean_ms": round(statistics.fmean(lat), 1) if lat else 0.0,
            "model_p50_ms": round(_percentile(model_lat, 50), 1),
            "model_p95_ms": round(_percentile(model_lat, 95), 1),
            "prefill_p50_ms": round(stats.get("medianPrefillMs") or 0.0, 1),
            "decode_p50_ms": round(stats.get("medianDecodeMs") or 0.0, 1),
            "tokens_per_second": stats.get("tokensPerSecond", 0.0),
            "served_from_cache": stats.get("servedFromCache", 0),
            "model_suggestions": stats.get("shown", 0),
            "suggestions": self.suggestions,
            "model": self.status.get("model", "") if isinstance(self.status, dict) else "",
        }


def _percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    server_dir = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (server_dir, env.get("PYTHONPATH")) if p)
    return env


class _Replay:
    """One server configuration being replayed (a subprocess and its results)."""

    def __init__(
        self,
        name: str,
        options: dict[str, Any],
        model: str,
        threads: int,
        per_point: int | None,
        timeout_s: float,
    ) -> None:
        self.name = name
        self.options = options
        self.model = model
        self.threads = threads
        self.per_point = per_point
        self.timeout_s = timeout_s
        self.result = ConfigResult(name)
        self.client = StdioClient()
        # The server's stderr, kept for the error message; closed in close().
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.opened: dict[str, int] = {}
        self.count = 0

    def failure(self, exc: BaseException) -> RuntimeError:
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", "replace")[-2000:]
        return RuntimeError(f"{self.name}: {exc}\n{tail}\n{self.client.messages[-5:]}")

    async def start(self) -> None:
        """Start the server and wait until its model is loaded (so loads never overlap)."""
        cmd = [sys.executable, "-m", "structspec.lsp", "--stdio", "--threads", str(self.threads)]
        if self.model:
            cmd += ["--model", self.model]
        await self.client.start(cmd, _server_env(), self.stderr)
        await self.client.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": None,
                "capabilities": {"textDocument": {"inlineCompletion": {}}},
                "initializationOptions": {**BASE_OPTIONS, **self.options},
            },
        )
        self.client.notify("initialized", {})
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            status = await self.status()
            if status.get("state") != "busy":
                return
            await asyncio.sleep(0.2)
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

    async def type_point(self, index: int, point: Point) -> None:
        """Type one point's text (only its first ``per_point`` characters when set)."""
        client, result = self.client, self.result
        version = self.opened.get(point.uri, 0) + 1
        if point.uri not in self.opened:
            language = "python" if point.uri.endswith(".py") else Path(point.uri).suffix[1:]
            client.notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": point.uri,
                        "languageId": language,
                        "version": version,
                        "text": point.text,
                    }
                },
            )
        else:
            client.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": point.uri, "version": version},
                    "contentChanges": [{"text": point.text}],
                },
            )
        column = _utf16_len(point.indent)
        typed = point.typed if self.per_point is None else point.typed[: self.per_point]
        for j, ch in enumerate(typed):
            version += 1
            pos = {"line": point.line, "character": column}
            statuses = len(client.statuses)
            t0 = time.perf_counter()
            client.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": point.uri, "version": version},
                    "contentChanges": [{"range": {"start": pos, "end": pos}, "text": ch}],
                },
            )
            column += _utf16_len(ch)
            answer = await asyncio.wait_for(
                client.request(
                    "textDocument/inlineCompletion",
                    {
                        "textDocument": {"uri": point.uri},
                        "position": {"line": point.line, "character": column},
                        "context": {"triggerKind": 2},
                    },
                ),
                self.timeout_s,
            )
            ms = (time.perf_counter() - t0) * 1000.0
            if self.count == 0:
                result.first_ms = ms
            else:
                result.latencies_ms.append(ms)
                # The server reports status around every model request (busy, idle)
                # and sends it before the answer; a typed-through answer sends none.
                result.from_model.append(len(client.statuses) > statuses)
                result.keys.append((index, j))
            if answer and answer.get("items"):
                result.suggestions += 1
            self.count += 1
        self.opened[point.uri] = version


async def start_server(server: _Replay, out: Out) -> None:
    """Start one server and say how long its model took to load (loads never overlap)."""
    t0 = time.perf_counter()
    await server.start()
    out(f"  {server.name}: server ready in {time.perf_counter() - t0:.1f} s")


async def _replay_all(
    points: Sequence[Point],
    model: str,
    threads: int,
    per_point: int,
    timeout_s: float,
    out: Out,
) -> dict[str, ConfigResult]:
    """Replay every configuration, interleaved point by point.

    All servers stay up; at each point they type in turn, so slow phases of a
    shared machine hit every configuration alike.
    """
    replays = [
        _Replay(
            name,
            options,
            model,
            threads,
            per_point if options.get("prefixReuse") is False else None,
            timeout_s,
        )
        for name, options in CONFIGS
    ]
    current = replays[0]
    try:
        for current in replays:
            await start_server(current, out)
        for index, point in enumerate(points):
            for current in replays:
                await current.type_point(index, point)
        for current in replays:
            await current.finish()
    except Exception as exc:
        raise current.failure(exc) from exc
    finally:
        for replay in replays:
            with contextlib.suppress(Exception):
                await replay.close()
    return {r.name: r.result for r in replays}


def run_editor_benchmark(
    files: list[str],
    model: str,
    threads: int,
    out: Out = print,
    *,
    points_per_file: int = 6,
    max_chars: int = 24,
    reuse_off_keystrokes: int = 20,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Replay typing through ``files`` in every configuration; print a table; return the numbers.

    ``model`` is a model spec (a GGUF path, ``""`` for the default model,
    ``standin`` for a smoke run).
    """
    files = list(files) or default_files()
    points = plan_points(files, points_per_file, max_chars)
    if not points:
        raise ValueError("no lines to type in the given files")
    total = sum(len(p.typed) for p in points)
    # Re-prefilling is slow: that baseline types the first few characters at every
    # point, so it sees short and long prompts alike.
    per_point = max(1, reuse_off_keystrokes // len(points))
    out(
        f"editor replay: {len(files)} file(s), {len(points)} cursor points, {total} keystrokes "
        f"(no prefix reuse: the first {per_point} at each point); {threads} thread(s)"
    )
    t0 = time.perf_counter()
    results = asyncio.run(_replay_all(points, model, threads, per_point, timeout_s, out))
    out(f"  replay done in {time.perf_counter() - t0:.1f} s")
    summaries = {name: r.summary() for name, r in results.items()}
    # Prefix reuse against re-prefilling, over the same keystrokes, on the
    # answers the model computed (typed-through answers cost nothing either way).
    off_result, on_result = results["no prefix reuse"], results["structspec"]
    on_by_key = {
        k: ms
        for k, ms, m in zip(
            on_result.keys, on_result.latencies_ms, on_result.from_model, strict=True
        )
        if m
    }
    pairs = [
        (on_by_key[k], ms)
        for k, ms, m in zip(
            off_result.keys, off_result.latencies_ms, off_result.from_model, strict=True
        )
        if m and k in on_by_key
    ]
    on = [p[0] for p in pairs]
    off = [p[1] for p in pairs]
    speedup = (_percentile(off, 50) / _percentile(on, 50)) if pairs else 0.0
    on_prefill = summaries["structspec"]["prefill_p50_ms"]
    off_prefill = summaries["no prefix reuse"]["prefill_p50_ms"]
    model_name = next((s["model"] for s in summaries.values() if s["model"]), model or "default")
    out(f"model: {model_name}")
    out(
        f"{'configuration':<16} {'keys':>5} {'first':>7} {'p50':>7} {'p95':>7} {'mean':>7} "
        f"{'model p50':>9} {'model p95':>9} {'prefill':>8} {'tok/s':>6} {'cached':>6}"
    )
    for name, s in summaries.items():
        out(
            f"{name:<16} {s['keystrokes']:>5} {s['first_ms']:>7.0f} {s['p50_ms']:>7.1f} "
            f"{s['p95_ms']:>7.1f} {s['mean_ms']:>7.1f} {s['model_p50_ms']:>9.1f} "
            f"{s['model_p95_ms']:>9.1f} {s['prefill_p50_ms']:>8.1f} "
            f"{s['tokens_per_second']:>6.1f} {s['served_from_cache']:>6}"
        )
    out(
        "(milliseconds from keystroke to suggestion, after the first request; 'model': "
        "answers the model computed, the rest were typed through; 'prefill': median "
        "prompt evaluation per request)"
    )
    out(
        f"prefix reuse: model-answer p50 {_percentile(on, 50):.1f} ms vs "
        f"{_percentile(off, 50):.1f} ms re-prefilling ({len(pairs)} keystrokes both computed) = "
        f"{speedup:.1f}x; prompt evaluation p50 {on_prefill:.1f} ms vs {off_prefill:.1f} ms"
    )
    g, s_ = summaries["greedy"], summaries["structspec"]
    if g["tokens_per_second"]:
        ratio = s_["tokens_per_second"] / g["tokens_per_second"]
        out(
            f"speculation: {s_['tokens_per_second']:.1f} tok/s vs greedy "
            f"{g['tokens_per_second']:.1f} tok/s = {ratio:.2f}x"
        )
    return {
        "suite": "editor",
        "files": files,
        "model": model_name,
        "threads": threads,
        "points": len(points),
        "keystrokes": total,
        "configs": summaries,
        "prefix_reuse_speedup": round(speedup, 2),
    }

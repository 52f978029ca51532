"""``structspec serve --backend URL``: a streaming passthrough proxy that adds metrics.

Plain paths under ``/v1/`` are relayed to the backend (vLLM, llama.cpp's
server, LM Studio, Ollama, or any OpenAI-compatible server) under the
backend URL's own path, bodies unchanged, with these exceptions on purpose:

- a path with a ``.``/``..`` segment in any encoding (or a backslash, an empty
  segment, a control character) is refused with a 400 and never sent
  (``backend_path``): nothing outside the backend's ``/v1/`` can be reached;
- only the request headers in ``FORWARDED_HEADERS`` are sent on;
- a JSON body that does not parse is refused here with a 400 (and a body over
  the limit with a 413), so every backend gives the same clear error;
- ``"model": "auto"`` is replaced by the backend's first model (what the
  original structspec's examples send; Ollama and LM Studio need a real name).

Streamed responses are relayed chunk by chunk as they arrive
(``structspec_proxy_relay_seconds`` measures what the relay adds per chunk), in
constant memory however long they run. A non-streamed answer is read whole first
(so a client gets all of it or a JSON error, never a cut 200), up to
``MAX_ANSWER_BYTES`` and within ``ANSWER_TIMEOUT_S`` of its headers: past the cap
a 502, past the time a 504. Generated tokens are counted from the backend's
``usage`` when it reports a plausible one, else one per streamed content event;
nothing a backend sends (malformed or deeply nested JSON, negative or infinite
counts, endless lines) stops a relay or its metrics. A backend that cannot be
reached is a 502, one that stops answering a 504, one that redirects a 502
naming where (its ``Location`` would lead the client around this server). A
client that hangs up before its answer starts closes the backend's request.

The backend is asked for uncompressed answers; one that compresses anyway with
gzip or deflate is decoded here (its ``Content-Encoding`` is not relayed, so
the bytes must be the plain ones, and the caps and the token count apply to
what the client reads); any other coding is refused with a 502. The backend's
CORS headers (``Access-Control-*``) are never relayed: this server grants no
web page access (see ``security``), whatever the backend would.

The proxy does no speculative decoding itself: the backend decodes (configure
vLLM's own model-free speculation with ``structspec vllm-command``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from structspec.backends.client import content_codings
from structspec.files import JSONError, load_json
from structspec.http.common import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    ClientGone,
    error_response,
    http_exception,
    metrics_endpoint,
    parse_json,
    read_body,
)
from structspec.http.openai_api import ApiError
from structspec.metrics import Metrics

T = TypeVar("T")

#: Request headers relayed to the backend; every other one (cookies, Host,
#: X-Forwarded-*, hop-by-hop headers) stays here. ``Authorization`` is relayed
#: only when ``serve`` has no API key of its own (with one, the header carries
#: that key, which the backend must not see); ``backend_api_key`` replaces it.
FORWARDED_HEADERS = ("content-type", "accept", "user-agent", "authorization")
#: Response headers that describe one connection, not the message (RFC 9110
#: 7.6.1), or that httpx/uvicorn recompute, or that would act on this server's
#: origin (cookies): not relayed back to the client. ``content-encoding``: what
#: is relayed is always the decoded bytes.
NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "content-encoding",
        "date",
        "server",
        "set-cookie",
    }
)
#: Response header prefixes never relayed: CORS grants (vLLM sends
#: ``Access-Control-Allow-Origin: *`` by default) would let any web page read
#: this server's answers.
NOT_RELAYED_PREFIXES = ("access-control-",)
#: Content codings of a backend's answer that are decoded here (httpx decodes
#: them); an answer in any other is refused with a 502.
DECODED_ENCODINGS = frozenset({"identity", "gzip", "deflate"})
#: Largest non-streamed answer relayed, counted decoded: a completion with
#: logprobs is a few MB, a batch of embeddings tens. Past it: a 502.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Seconds a non-streamed answer has to arrive whole once its headers came: as
#: long as the backend is given to start answering (a backend may send headers
#: before it generates). Past it: a 504.
ANSWER_TIMEOUT_S = 600.0
#: Longest line of a stream read to count tokens; a longer one is relayed but not
#: counted (so an endless line costs no memory).
MAX_EVENT_BYTES = 1024 * 1024
#: Seconds between two looks at whether the client is still there while the
#: backend has not answered (``_while_connected``).
DISCONNECT_POLL_S = 0.25
#: Largest token count taken from a backend's ``usage``; no backend's context
#: holds more (positions are 32-bit integers). Anything else there is not counted.
MAX_REPORTED_TOKENS = 2**31 - 1
#: Percent-decoding rounds a path may need before it stops changing; a path
#: still changing after this many is refused (nobody encodes an API path 4 times).
MAX_DECODE_ROUNDS = 4
#: Characters left unescaped when a checked path segment is sent on.
_SEGMENT_SAFE = "!$&'()*+,;=:@-._~"


def backend_path(raw_path: str) -> str:
    """The ``/v1/...`` path to send to the backend, or ``ApiError`` 400.

    ``raw_path`` is the path as it came on the wire (percent-encoded). Every
    decoding of it (once, twice, ... until it stops changing), and its NFKC
    form (full-width dots), must be a ``/v1/`` path whose segments are
    neither ``.`` nor ``..`` (nor ``..;x``), with no backslash, no empty
    segment and no control character. What is sent is each segment of the
    path decoded once and escaped again: exactly one level of encoding, no dot
    segment, so the backend cannot resolve it anywhere outside its ``/v1/``.
    """
    forms = [raw_path]
    while len(forms) <= MAX_DECODE_ROUNDS:
        try:
            decoded = unquote(forms[-1], errors="strict")
        except UnicodeDecodeError:
            raise _bad_path(raw_path, "is not UTF-8 once decoded") from None
        if decoded == forms[-1]:
            break
        forms.append(decoded)
    else:
        raise _bad_path(raw_path, "is percent-encoded too many times")
    for form in [*forms, *(unicodedata.normalize("NFKC", f) for f in forms)]:
        if "\\" in form:
            raise _bad_path(raw_path, "contains a backslash")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in form):
            raise _bad_path(raw_path, "contains a control character")
        segments = form.split("/")
        if segments[:2] != ["", "v1"]:
            raise _bad_path(raw_path, "is not under /v1/")
        for seg in segments[2:]:
            if seg.split(";", 1)[0].strip() in (".", ".."):
                raise _bad_path(raw_path, "has a '.' or '..' segment")
        if any(seg == "" for seg in segments[2:-1]):
            raise _bad_path(raw_path, "has an empty segment ('//')")
    # Segment by segment, so an encoded slash inside a segment (a model id such as
    # ``org%2Fname``) stays one segment.
    return "/".join(quote(unquote(seg), safe=_SEGMENT_SAFE) for seg in raw_path.split("/"))


def _bad_path(raw_path: str, why: str) -> ApiError:
    return ApiError(
        400,
        f"the path {raw_path[:200]!r} {why}; only plain /v1/ paths are relayed",
        code="invalid_path",
    )


def _endpoint(path: str) -> str:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/completions"):
        return "completions"
    if path.rstrip("/").endswith("/models") or "/models/" in path:
        return "models"
    return "other"


class ProxyApp:
    """State of one proxy: the backend client and the metrics."""

    def __init__(
        self,
        backend: str,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
        connect_timeout: float = 5.0,
        read_timeout: float = 600.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        answer_timeout: float = ANSWER_TIMEOUT_S,
        metrics: Metrics | None = None,
        relay_authorization: bool = True,
        backend_api_key: str | None = None,
    ) -> None:
        self.backend = backend.rstrip("/")
        if self.backend.endswith("/v1"):
            self.backend = self.backend[: -len("/v1")]
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.max_answer_bytes = max_answer_bytes
        self.answer_timeout = answer_timeout
        self.metrics = metrics or Metrics(mode="proxy", model=self.backend)
        # With a backend key, every request carries it; else a client's own
        # Authorization is relayed unless it is this server's key.
        self.relay_authorization = relay_authorization and backend_api_key is None
        headers = {"accept-encoding": "identity"}  # relay bytes as they come, and read usage
        if backend_api_key is not None:
            headers["authorization"] = f"Bearer {backend_api_key}"
        self.client = httpx.AsyncClient(
            base_url=self.backend,
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            headers=headers,
        )
        self._auto_model: str | None = None

    async def close(self) -> None:
        await self.client.aclose()

    async def _first_model(self) -> str | None:
        if self._auto_model is None:
            try:
                async with self.client.stream("GET", "/v1/models", timeout=5.0) as r:
                    if r.status_code != 200 or len(content_codings(r.headers)) > 1:
                        return None
                    data = load_json(await self._read_answer(r, timeout=5.0)).get("data")
                self._auto_model = str(data[0]["id"]) if data else None
            except (httpx.HTTPError, ApiError, JSONError, KeyError, TypeError, AttributeError):
                return None
        return self._auto_model

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "mode": "proxy", "backend": self.backend})

    def _fail(self, endpoint: str, err: ApiError) -> Response:
        self.metrics.requests.labels(endpoint=endpoint, status=str(err.status)).inc()
        if 400 <= err.status < 500:
            self.metrics.rejected.labels(
                reason="too_large" if err.status == 413 else "bad_request"
            ).inc()
        return error_response(err)

    def _backend_fails(self, endpoint: str, kind: str, err: ApiError) -> Response:
        self.metrics.backend_errors.labels(kind=kind).inc()
        return self._fail(endpoint, err)

    def _forwarded_headers(self, request: Request) -> dict[bytes, bytes]:
        """The request headers the backend sees (see ``FORWARDED_HEADERS``), the first of each.

        As the client sent their bytes: a value that is not ASCII (a user agent
        with an accent) is relayed as it came, not re-encoded, which httpx
        would refuse.
        """
        names = FORWARDED_HEADERS if self.relay_authorization else FORWARDED_HEADERS[:-1]
        wanted = {name.encode() for name in names}
        forwarded: dict[bytes, bytes] = {}
        for name, value in request.headers.raw:  # names in lower case (ASGI)
            if name in wanted:
                forwarded.setdefault(name, value)
        return forwarded

    async def _incoming(self, request: Request) -> tuple[str, bytes, bool]:
        """The backend path, the body to send and whether a stream was asked for.

        Raises ``ApiError`` for a request the proxy refuses itself, ``ClientGone``.
        """
        raw = request.scope.get("raw_path")
        try:
            wire = raw.decode("utf-8") if raw else quote(request.url.path)
        except UnicodeDecodeError:
            raise ApiError(400, "the request path is not UTF-8", code="invalid_path") from None
        path = backend_path(wire)
        body = await read_body(request, self.max_body_bytes, self.body_timeout)
        stream = False
        if request.method == "POST":
            payload = parse_json(body)
            if isinstance(payload, dict):
                stream = payload.get("stream") is True
                if payload.get("model") == "auto":
                    model = await self._first_model()
                    if model is not None:
                        payload["model"] = model
                        body = json.dumps(payload).encode()
        return path, body, stream

    async def relay(self, request: Request) -> Response:
        endpoint = _endpoint(request.url.path)
        t0 = time.monotonic()
        try:
            path, body, stream = await self._incoming(request)
        except ApiError as err:
            return self._fail(endpoint, err)
        except ClientGone:
            return self._client_gone(endpoint)
        outgoing = self.client.build_request(
            request.method,
            path,
            params=request.query_params,
            content=body,
            headers=self._forwarded_headers(request),
        )
        try:
            upstream = await _while_connected(request, self.client.send(outgoing, stream=True))
        except ClientGone:
            return self._client_gone(endpoint)
        except httpx.TimeoutException as exc:
            return self._backend_fails(endpoint, "timeout", self._timed_out(exc))
        except httpx.HTTPError as exc:
            return self._backend_fails(
                endpoint,
                "connect",
                ApiError(
                    502,
                    f"cannot reach the backend {self.backend}: {exc or type(exc).__name__}",
                    kind="server_error",
                    code="backend_unreachable",
                ),
            )
        encoding = upstream.headers.get("content-encoding", "")
        codings = content_codings(upstream.headers)
        if len(codings) > 1 or any(c not in DECODED_ENCODINGS for c in codings):
            await upstream.aclose()
            return self._backend_fails(
                endpoint,
                "encoding",
                ApiError(
                    502,
                    f"the backend {self.backend} answered in the content coding "
                    f"{encoding[:100]!r}, which this proxy does not decode (it asks for "
                    "uncompressed answers; one layer of gzip or deflate is decoded)",
                    kind="server_error",
                    code="backend_encoding",
                ),
            )
        if 300 <= upstream.status_code < 400 and upstream.status_code != 304:
            # Relayed, its Location would send the client to the backend's own host,
            # around this server (and its key); the setting should name the target.
            location = upstream.headers.get("location", "")[:200]
            await upstream.aclose()
            return self._backend_fails(
                endpoint,
                "redirect",
                ApiError(
                    502,
                    f"the backend {self.backend} answered {upstream.status_code}, a redirect to "
                    f"{location!r}: set --backend to the URL it leads to",
                    kind="server_error",
                    code="backend_redirect",
                ),
            )
        out_headers = _relayed_headers(upstream)
        status = upstream.status_code
        if status >= 500:
            self.metrics.backend_errors.labels(kind=f"http_{status}").inc()
        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if stream or is_sse:
            try:
                return StreamingResponse(
                    self._relay_stream(upstream, endpoint, t0, sse=is_sse),
                    status_code=status,
                    headers=out_headers,
                    media_type=None,
                )
            except BaseException:  # the stream is never read: its connection goes back now
                await upstream.aclose()
                raise
        return await self._relay_whole(request, upstream, endpoint, t0, out_headers)

    def _client_gone(self, endpoint: str) -> Response:
        """The client hung up before its answer: the backend's request was closed."""
        self.metrics.requests.labels(endpoint=endpoint, status="499").inc()
        return Response(status_code=499)

    async def _relay_whole(
        self,
        request: Request,
        upstream: httpx.Response,
        endpoint: str,
        t0: float,
        out_headers: dict[str, str],
    ) -> Response:
        """A non-streamed answer, read whole within the cap and the time limit, then relayed."""
        status = upstream.status_code
        try:
            content = await _while_connected(
                request, self._read_answer(upstream, timeout=self.answer_timeout)
            )
        except ClientGone:
            return self._client_gone(endpoint)
        except httpx.TimeoutException as exc:
            return self._backend_fails(endpoint, "timeout", self._timed_out(exc))
        except httpx.HTTPError as exc:
            return self._backend_fails(
                endpoint,
                "read",
                ApiError(
                    502,
                    f"the backend {self.backend} broke off its answer: {exc}",
                    kind="server_error",
                    code="backend_error",
                ),
            )
        except ApiError as err:
            kind = "too_large" if err.code == "backend_answer_too_large" else "timeout"
            return self._backend_fails(endpoint, kind, err)
        finally:
            await upstream.aclose()
        if status == 200 and endpoint in ("chat", "completions"):
            # Parsing a large answer takes a while: off the event loop.
            counts = await asyncio.to_thread(_answer_tokens, content)
            if counts is not None:
                self.metrics.observe_proxy_tokens(counts[0])
                self.metrics.prompt_tokens.inc(counts[1])
        self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)
        return Response(content, status_code=status, headers=out_headers)

    def _timed_out(self, exc: Exception) -> ApiError:
        return ApiError(
            504,
            f"the backend {self.backend} timed out: {exc or type(exc).__name__}",
            kind="server_error",
            code="backend_timeout",
        )

    async def _read_answer(self, upstream: httpx.Response, *, timeout: float) -> bytes:
        """The whole (decoded) body of a non-streamed answer, or ``ApiError``: a 502
        past ``max_answer_bytes``, a 504 when it is not whole ``timeout`` seconds
        after its headers. httpx errors while reading are raised as they are."""
        body = bytearray()
        try:
            async with asyncio.timeout(timeout):
                async for chunk in upstream.aiter_bytes():
                    body += chunk
                    if len(body) > self.max_answer_bytes:
                        raise ApiError(
                            502,
                            f"the backend {self.backend} answered with more than "
                            f"{self.max_answer_bytes} bytes, the most this proxy relays in "
                            "one answer that is not streamed",
                            kind="server_error",
                            code="backend_answer_too_large",
                        )
        except TimeoutError:
            raise ApiError(
                504,
                f"the backend {self.backend} did not finish its answer within {timeout:g} s "
                f"({len(body)} bytes came)",
                kind="server_error",
                code="backend_timeout",
            ) from None
        return bytes(body)

    async def _relay_stream(
        self, upstream: httpx.Response, endpoint: str, t0: float, *, sse: bool = False
    ) -> AsyncIterator[bytes]:
        """The backend's stream, chunk by chunk. One that breaks off (a connection closed
        mid-body, broken chunking or gzip) must not end like a whole answer: an SSE stream
        gets an error event (OpenAI's shape) before its end. (Any other is a JSON body
        cut short, which its client cannot parse.)"""
        status = str(upstream.status_code)
        counter = _EventCounter()
        first = True
        broke: httpx.HTTPError | None = None
        try:
            async for chunk in upstream.aiter_bytes():
                arrived = time.monotonic()
                yield chunk
                # Resumed once the chunk was handed to the server: that is the relay time.
                self.metrics.relay.observe(time.monotonic() - arrived)
                self.metrics.chunks.inc()
                if first:
                    first = False
                    self.metrics.first_token.labels(endpoint=endpoint).observe(arrived - t0)
                # Count events after relaying, so counting never delays a chunk.
                counter.feed(chunk)
        except httpx.HTTPError as exc:
            status = "502"
            self.metrics.backend_errors.labels(kind="read").inc()
            broke = exc
        except BaseException:
            status = "499"  # the client went away; closing upstream tells the backend to stop
            raise
        finally:
            await upstream.aclose()
            self.metrics.observe_proxy_tokens(counter.tokens())
            self.metrics.requests.labels(endpoint=endpoint, status=status).inc()
            self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)
        if broke is not None and sse:
            message = f"the backend {self.backend} broke off its answer: {broke}"
            error = {"message": message, "type": "server_error", "code": "backend_error"}
            yield b"\n\ndata: " + json.dumps({"error": error}).encode() + b"\n\n"


async def _while_connected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, or ``ClientGone`` once the client hangs up (``work`` cancelled).

    Starlette cancels nothing when a client leaves before the answer starts: a
    backend still evaluating a long prompt, or writing a non-streamed answer,
    would go on for its whole timeout. Cancelling ``work`` closes its backend
    connection, which tells the backend to stop. The request's body is read
    whole before this (``_incoming``), so what the client sends next can only
    be its disconnect.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _relayed_headers(upstream: httpx.Response) -> dict[str, str]:
    """The backend's response headers to relay (``_relayed``), with their bytes as they came.

    Decoded as Latin-1, which maps every byte to one character and back: the
    response sends the same bytes on, where httpx's decoding (UTF-8 first) would
    give characters that Starlette cannot encode (a 500, and a leaked stream).
    Repeated headers are joined with ", ", as httpx joins them.
    """
    out: dict[str, str] = {}
    for raw_name, raw_value in upstream.headers.raw:
        name = raw_name.decode("latin-1").lower()
        if _relayed(name):
            value = raw_value.decode("latin-1")
            out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _relayed(header: str) -> bool:
    name = header.lower()
    return name not in NOT_RELAYED and not name.startswith(NOT_RELAYED_PREFIXES)


def _token_count(value: Any) -> int | None:
    """A token count a backend reported, or None when it is not a plausible one
    (not an integer, negative, or past ``MAX_REPORTED_TOKENS``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value <= MAX_REPORTED_TOKENS else None
    return None


def _answer_tokens(content: bytes) -> tuple[int, int] | None:
    """(completion, prompt) tokens of a non-streamed answer's ``usage``, or None
    when it has no plausible one (the answer is still relayed as it is)."""
    try:
        data = load_json(content)
    except JSONError:
        return None
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return None
    completion = _token_count(usage.get("completion_tokens"))
    prompt = _token_count(usage.get("prompt_tokens", 0))
    return None if completion is None else (completion, prompt or 0)


class _EventCounter:
    """Counts the tokens of a stream from its lines as they arrive: one per
    content event, or the last ``usage.completion_tokens`` reported. Holds at most
    one line of ``MAX_EVENT_BYTES``; a longer one is skipped."""

    def __init__(self) -> None:
        self.events = 0
        self.usage: int | None = None
        self._line = bytearray()
        self._overlong = False

    def feed(self, chunk: bytes) -> None:
        *ended, rest = chunk.split(b"\n")
        for piece in ended:
            if not self._overlong and len(self._line) + len(piece) <= MAX_EVENT_BYTES:
                self._line += piece
                n, usage = _event_tokens(bytes(self._line))
                self.events += n
                self.usage = usage if usage is not None else self.usage
            self._line.clear()
            self._overlong = False
        if not self._overlong:
            self._line += rest
            if len(self._line) > MAX_EVENT_BYTES:
                self._line.clear()
                self._overlong = True

    def tokens(self) -> int:
        return self.usage if self.usage is not None else self.events


def _event_tokens(line: bytes) -> tuple[int, int | None]:
    """(content events, usage completion tokens or None) of one SSE line."""
    if not line.startswith(b"data:") or line[5:].strip() in (b"", b"[DONE]"):
        return 0, None
    try:
        event = load_json(line[5:])
    except JSONError:
        return 0, None
    if not isinstance(event, dict):
        return 0, None
    n = 0
    choices = event.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = choice.get("text") or (delta.get("content") if isinstance(delta, dict) else None)
            n += bool(text)
    usage = event.get("usage")
    return n, _token_count(usage.get("completion_tokens")) if isinstance(usage, dict) else None


def create_proxy_app(
    backend: str,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    read_timeout: float = 600.0,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
    answer_timeout: float = ANSWER_TIMEOUT_S,
    relay_authorization: bool = True,
    backend_api_key: str | None = None,
) -> Starlette:
    """A Starlette app relaying ``/v1/*`` to ``backend`` (``app.state.server``: the ProxyApp).

    ``relay_authorization=False`` keeps the client's ``Authorization`` header
    here (``serve --api-key``: it holds this server's key); ``backend_api_key``
    is sent to the backend as ``Authorization: Bearer`` instead.
    """
    server = ProxyApp(
        backend,
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        read_timeout=read_timeout,
        max_answer_bytes=max_answer_bytes,
        answer_timeout=answer_timeout,
        relay_authorization=relay_authorization,
        backend_api_key=backend_api_key,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await server.close()

    app = Starlette(
        routes=[
            Route("/metrics", metrics_endpoint(server.metrics), methods=["GET"]),
            Route("/health", server.health, methods=["GET"]),
            Route("/v1/{rest:path}", server.relay, methods=["GET", "POST", "DELETE", "PUT"]),
        ],
        exception_handlers={HTTPException: http_exception},
        lifespan=lifespan,
    )
    app.state.server = server
    return app

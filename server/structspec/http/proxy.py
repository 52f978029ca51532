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
(``structspec_proxy_relay_seconds`` measures what the relay adds per chunk);
generated tokens are counted from the backend's ``usage`` when it reports one,
else one per streamed content event. A backend that cannot be reached is a 502,
one that stops answering a 504. The proxy does no speculative decoding itself:
the backend decodes (configure vLLM's own model-free speculation with
``structspec vllm-command``).
"""

from __future__ import annotations

import contextlib
import json
import time
import unicodedata
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, unquote

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

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

#: Request headers relayed to the backend; every other one (cookies, Host,
#: X-Forwarded-*, hop-by-hop headers) stays here. ``Authorization`` is relayed
#: only when ``serve`` has no API key of its own (with one, the header carries
#: that key, which the backend must not see); ``backend_api_key`` replaces it.
FORWARDED_HEADERS = ("content-type", "accept", "user-agent", "authorization")
#: Response headers that describe one connection, not the message (RFC 9110
#: 7.6.1), or that httpx/uvicorn recompute, or that would act on this server's
#: origin (cookies): not relayed back to the client.
HOP_BY_HOP = frozenset(
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
        metrics: Metrics | None = None,
        relay_authorization: bool = True,
        backend_api_key: str | None = None,
    ) -> None:
        self.backend = backend.rstrip("/")
        if self.backend.endswith("/v1"):
            self.backend = self.backend[: -len("/v1")]
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
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
                r = await self.client.get("/v1/models", timeout=5.0)
                data = r.json().get("data") or []
                self._auto_model = str(data[0]["id"]) if data else None
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
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

    def _forwarded_headers(self, request: Request) -> dict[str, str]:
        """The request headers the backend sees (see ``FORWARDED_HEADERS``)."""
        names = FORWARDED_HEADERS if self.relay_authorization else FORWARDED_HEADERS[:-1]
        return {name: request.headers[name] for name in names if name in request.headers}

    async def relay(self, request: Request) -> Response:
        endpoint = _endpoint(request.url.path)
        t0 = time.monotonic()
        stream = False
        try:
            raw = request.scope.get("raw_path")
            try:
                wire = raw.decode("utf-8") if raw else quote(request.url.path)
            except UnicodeDecodeError:
                raise ApiError(400, "the request path is not UTF-8", code="invalid_path") from None
            path = backend_path(wire)
            body = await read_body(request, self.max_body_bytes, self.body_timeout)
            if request.method == "POST":
                payload = parse_json(body)
                if isinstance(payload, dict):
                    stream = payload.get("stream") is True
                    if payload.get("model") == "auto":
                        model = await self._first_model()
                        if model is not None:
                            payload["model"] = model
                            body = json.dumps(payload).encode()
        except ApiError as err:
            return self._fail(endpoint, err)
        except ClientGone:
            self.metrics.requests.labels(endpoint=endpoint, status="499").inc()
            return Response(status_code=499)
        outgoing = self.client.build_request(
            request.method,
            path,
            params=request.query_params,
            content=body,
            headers=self._forwarded_headers(request),
        )
        try:
            upstream = await self.client.send(outgoing, stream=True)
        except httpx.TimeoutException as exc:
            self.metrics.backend_errors.labels(kind="timeout").inc()
            return self._fail(
                endpoint,
                ApiError(
                    504,
                    f"the backend {self.backend} timed out: {exc}",
                    kind="server_error",
                    code="backend_timeout",
                ),
            )
        except httpx.HTTPError as exc:
            self.metrics.backend_errors.labels(kind="connect").inc()
            return self._fail(
                endpoint,
                ApiError(
                    502,
                    f"cannot reach the backend {self.backend}: {exc or type(exc).__name__}",
                    kind="server_error",
                    code="backend_unreachable",
                ),
            )
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        status = upstream.status_code
        if status >= 500:
            self.metrics.backend_errors.labels(kind=f"http_{status}").inc()
        is_sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        if stream or is_sse:
            return StreamingResponse(
                self._relay_stream(upstream, endpoint, t0),
                status_code=status,
                headers=out_headers,
                media_type=None,
            )
        try:
            content = await upstream.aread()
        except httpx.HTTPError as exc:
            self.metrics.backend_errors.labels(kind="read").inc()
            return self._fail(
                endpoint,
                ApiError(
                    502,
                    f"the backend {self.backend} broke off its answer: {exc}",
                    kind="server_error",
                    code="backend_error",
                ),
            )
        finally:
            await upstream.aclose()
        if status == 200 and endpoint in ("chat", "completions"):
            self._count_usage(content)
        self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)
        return Response(content, status_code=status, headers=out_headers)

    def _count_usage(self, content: bytes) -> None:
        # A backend may answer without usage (or not in JSON): then nothing is counted.
        with contextlib.suppress(ValueError, TypeError, AttributeError, KeyError):
            data: Any = json.loads(content)
            tokens = int(data["usage"]["completion_tokens"])
            self.metrics.observe_proxy_tokens(tokens)
            self.metrics.prompt_tokens.inc(int(data["usage"].get("prompt_tokens", 0)))

    async def _relay_stream(
        self, upstream: httpx.Response, endpoint: str, t0: float
    ) -> AsyncIterator[bytes]:
        status = str(upstream.status_code)
        events = 0
        usage_tokens: int | None = None
        tail = b""
        first = True
        try:
            async for chunk in upstream.aiter_raw():
                arrived = time.monotonic()
                yield chunk
                # Resumed once the chunk was handed to the server: that is the relay time.
                self.metrics.relay.observe(time.monotonic() - arrived)
                self.metrics.chunks.inc()
                if first:
                    first = False
                    self.metrics.first_token.labels(endpoint=endpoint).observe(arrived - t0)
                # Count events after relaying, so counting never delays a chunk.
                data = tail + chunk
                lines = data.split(b"\n")
                tail = lines.pop()
                for line in lines:
                    n, usage = _event_tokens(line)
                    events += n
                    usage_tokens = usage if usage is not None else usage_tokens
        except httpx.HTTPError:
            status = "502"
            self.metrics.backend_errors.labels(kind="read").inc()
        except BaseException:
            status = "499"  # the client went away; closing upstream tells the backend to stop
            raise
        finally:
            await upstream.aclose()
            self.metrics.observe_proxy_tokens(usage_tokens if usage_tokens is not None else events)
            self.metrics.requests.labels(endpoint=endpoint, status=status).inc()
            self.metrics.latency.labels(endpoint=endpoint).observe(time.monotonic() - t0)


def _event_tokens(line: bytes) -> tuple[int, int | None]:
    """(content events, usage completion tokens or None) of one SSE line."""
    if not line.startswith(b"data:") or line[5:].strip() in (b"", b"[DONE]"):
        return 0, None
    try:
        event = json.loads(line[5:])
    except ValueError:
        return 0, None
    if not isinstance(event, dict):
        return 0, None
    n = 0
    for choice in event.get("choices") or []:
        if isinstance(choice, dict):
            delta = choice.get("delta")
            text = choice.get("text") or (delta.get("content") if isinstance(delta, dict) else None)
            n += bool(text)
    usage = event.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n, tokens if isinstance(tokens, int) else None


def create_proxy_app(
    backend: str,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S,
    read_timeout: float = 600.0,
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

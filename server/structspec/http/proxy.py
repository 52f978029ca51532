"""``structspec serve --backend URL``: a streaming passthrough proxy that adds metrics.

Everything under ``/v1/`` is relayed to the backend (vLLM, llama.cpp's
server, LM Studio, Ollama, or any OpenAI-compatible server) unchanged, with
two exceptions made on purpose:

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
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from structspec.http.common import (
    DEFAULT_MAX_BODY_BYTES,
    error_response,
    http_exception,
    metrics_endpoint,
    parse_json,
    read_body,
)
from structspec.http.openai_api import ApiError
from structspec.metrics import Metrics

#: Headers that describe one connection, not the message (RFC 9110 7.6.1), plus
#: the ones httpx/uvicorn recompute.
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
    }
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
        connect_timeout: float = 5.0,
        read_timeout: float = 600.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.backend = backend.rstrip("/")
        if self.backend.endswith("/v1"):
            self.backend = self.backend[: -len("/v1")]
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics or Metrics(mode="proxy", model=self.backend)
        self.client = httpx.AsyncClient(
            base_url=self.backend,
            timeout=httpx.Timeout(read_timeout, connect=connect_timeout),
            headers={"accept-encoding": "identity"},  # relay bytes as they come, and read usage
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

    async def relay(self, request: Request) -> Response:
        path = request.url.path
        endpoint = _endpoint(path)
        t0 = time.monotonic()
        stream = False
        try:
            body = await read_body(request, self.max_body_bytes)
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
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        outgoing = self.client.build_request(
            request.method, path, params=request.query_params, content=body, headers=headers
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
        with contextlib.suppress(ValueError, TypeError, AttributeError):
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
    backend: str, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, read_timeout: float = 600.0
) -> Starlette:
    """A Starlette app relaying ``/v1/*`` to ``backend`` (``app.state.server``: the ProxyApp)."""
    server = ProxyApp(backend, max_body_bytes=max_body_bytes, read_timeout=read_timeout)

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

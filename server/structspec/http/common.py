"""Pieces both HTTP apps share: bounded body reading, JSON errors, ``/metrics``, 404s."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from structspec.files import JSONError, load_json
from structspec.http.openai_api import ApiError
from structspec.metrics import CONTENT_TYPE, Metrics

#: Default request body limit: a completion prompt of a large source file fits many times.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
#: Default time a client has to send its whole request body (4 MB at 70 KB/s).
DEFAULT_BODY_TIMEOUT_S = 60.0


class ClientGone(Exception):
    """The client closed the connection before its answer was ready."""


def log(message: str) -> None:
    """One line on the server's stderr (client mishaps are not tracebacks)."""
    print(f"structspec: {message}", file=sys.stderr, flush=True)


def peer(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "a client"


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


async def read_body(request: Request, limit: int, timeout: float = DEFAULT_BODY_TIMEOUT_S) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes, and
    with 408 when it has not all arrived ``timeout`` seconds after the headers.

    A client that goes away mid-upload raises ``ClientGone`` (one log line, no
    traceback).
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise ApiError(400, "the Content-Length header is not a number")
        if int(declared) > limit:
            raise _too_large(limit)
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _too_large(limit)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {timeout:g} s",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        log(f"{peer(request)} went away while sending its request body ({len(body)} bytes)")
        raise ClientGone() from None
    return bytes(body)


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"the request body is larger than the limit of {limit} bytes",
        code="request_too_large",
    )


def parse_json(body: bytes) -> Any:
    """Decode a JSON request body or raise a 400 that says what is wrong with it."""
    if not body.strip():
        raise ApiError(400, "the request body is empty; send a JSON object")
    try:
        return load_json(body)
    except JSONError as exc:
        raise ApiError(400, f"the request body {exc}", code="invalid_json") from None


def metrics_endpoint(metrics: Metrics) -> Any:
    async def endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return endpoint


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405s, in OpenAI's error format."""
    assert isinstance(exc, HTTPException)
    message = {
        404: f"no route {request.method} {request.url.path}",
        405: f"method {request.method} is not allowed on {request.url.path}",
    }.get(exc.status_code, str(exc.detail))
    return error_response(
        ApiError(
            exc.status_code,
            message,
            code="not_found" if exc.status_code == 404 else None,
            headers=dict(exc.headers or {}),
        )
    )

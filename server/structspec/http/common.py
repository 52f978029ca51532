"""Pieces both HTTP apps share: bounded body reading, JSON errors, ``/metrics``, 404s."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

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


#: Deepest nesting of arrays and objects accepted in JSON from outside (request
#: bodies, a backend's answers and stream events). API documents nest a few levels
#: (a tool's JSON schema perhaps twenty); a fixed limit far below Python's recursion
#: limit means the same document parses, and can be walked or encoded again, at any
#: depth of the call stack.
MAX_JSON_DEPTH = 100


class JSONError(ValueError):
    """JSON from outside that cannot be used. The message completes a sentence that
    names the document: ``f"the request body {exc}"``."""


def load_json(data: bytes) -> Any:
    """Decode JSON from outside, or raise ``JSONError`` (never anything else).

    The one parser of untrusted JSON in ``http/``: malformed JSON, bytes that are
    not UTF-8, nesting deeper than ``MAX_JSON_DEPTH`` and integers past Python's
    digit limit (``sys.get_int_max_str_digits``, 4300: ``json`` raises a plain
    ``ValueError`` for them) all end here as one ``JSONError``.
    """
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise JSONError(
            f"is malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except UnicodeDecodeError:
        raise JSONError("is not UTF-8 JSON") from None
    except RecursionError:
        raise JSONError(_too_deep()) from None
    except ValueError:
        raise JSONError(
            f"has a number with more than {sys.get_int_max_str_digits()} digits"
        ) from None
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and _depth(doc) > MAX_JSON_DEPTH:
        raise JSONError(_too_deep())
    return doc


def _too_deep() -> str:
    return f"is nested too deeply (more than {MAX_JSON_DEPTH} levels of arrays and objects)"


def _depth(doc: Any) -> int:
    """Levels of arrays and objects in ``doc``, counted without recursion; stops past
    ``MAX_JSON_DEPTH``."""
    depth = 0
    level = [doc] if isinstance(doc, dict | list) else []
    while level and depth <= MAX_JSON_DEPTH:
        depth += 1
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below.extend(c for c in children if isinstance(c, dict | list))
        level = below
    return depth


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

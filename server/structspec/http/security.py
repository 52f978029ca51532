"""Request checks that come before any route: Host, API key, Content-Type.

``Guard`` wraps either app (engine or proxy) as plain ASGI middleware, so a
refused request never reaches a handler, reads no body and starts no model
work. In this order:

1. **Host** (only when the server is bound to a loopback address): the
   ``Host`` header must name the loopback (``localhost``, ``127.x.x.x``,
   ``[::1]``, any port). A web page that rebinds its own DNS name to
   127.0.0.1 (DNS rebinding) sends its own name as ``Host`` and gets 403.
2. **API key** (when one is set): ``Authorization: Bearer KEY``, as
   llama-server and vLLM take it, compared in constant time as the bytes that
   came on the wire. The key is printable ASCII (``check_api_key``): clients
   send header values as ASCII or Latin-1 bytes, so a key with any other
   character could never match, and one with a space would split. Missing or wrong:
   401 with ``WWW-Authenticate: Bearer``. ``GET /health`` stays open so load
   balancers and ``structspec detect`` can probe without the key.
3. **Content-Type** on ``POST``/``PUT``/``PATCH``: must be
   ``application/json`` (parameters such as ``charset`` allowed), else 415.
   A browser can send ``text/plain`` or form POSTs cross-origin without asking
   (CORS "simple requests"); ``application/json`` needs a preflight, which
   this server never grants (it sends no ``Access-Control-Allow-*`` headers).
   So no web page can start a generation.

Errors are JSON in OpenAI's error format, like every other error of ``serve``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from structspec.backends.address import check_api_key

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths answered without the API key.
OPEN_PATHS = frozenset({"/health"})
#: Methods whose body is a request document (and so must be JSON).
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address or name, no port) is the loopback."""
    host = host.strip().strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_header_name(value: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8080`` -> ``::1``)."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1 :] if end >= 0 else ""
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return value  # not ``[address]`` or ``[address]:port``: no host it names
        return value[1:end]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def bearer_matches(authorization: str | None, key: str) -> bool:
    """``Authorization: Bearer <key>``, compared in constant time as bytes.

    ``authorization`` is the header as ASGI gives it, decoded as Latin-1, so
    encoding it back gives the bytes that came on the wire; ``key`` is ASCII
    (``check_api_key``).
    """
    if not authorization:
        return False
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    try:
        presented = token.strip().encode("latin-1")
    except UnicodeEncodeError:  # not from the wire: cannot be an ASCII key
        return False
    return hmac.compare_digest(presented, key.encode("ascii"))


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return status, json.dumps(body).encode("utf-8")


class Guard:
    """ASGI middleware applying the checks of the module docstring."""

    def __init__(self, app: ASGIApp, *, api_key: str | None, loopback_only: bool) -> None:
        if api_key is not None and (why := check_api_key(api_key)) is not None:
            raise ValueError(f"the API key {why}")
        self.app = app
        self.api_key = api_key
        self.loopback_only = loopback_only

    def check(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        """``(status, body)`` of the refusal, or ``None`` when the request may pass."""
        if self.loopback_only:
            host = headers.get("host")
            if host is not None and not is_loopback_host(host_header_name(host)):
                return _error(
                    403,
                    f"the Host header {host!r} does not name this machine's loopback address; "
                    "this server is bound to the loopback and only answers requests for "
                    "localhost or 127.0.0.1",
                    "bad_host",
                )
        if (
            self.api_key is not None
            and path not in OPEN_PATHS
            and not bearer_matches(headers.get("authorization"), self.api_key)
        ):
            return _error(
                401,
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                "invalid_api_key",
            )
        if method in BODY_METHODS:
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                return _error(
                    415,
                    f"requests must have 'Content-Type: application/json', not "
                    f"{headers.get('content-type', 'none')!r}",
                    "unsupported_media_type",
                )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self.check(scope["method"], scope["path"], headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, body = refusal
        response_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if status == 401:
            response_headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body})

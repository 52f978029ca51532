"""The ``backend`` setting's URL: its base and the protocol its path pins, if any; its key.

A leaf module (it imports nothing of structspec), so ``config`` checks the
settings with the same rules the client applies.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

#: ``backend = "auto"``: the first inference server ``structspec detect`` finds here.
AUTO = "auto"

#: A URL path naming one protocol pins it (the rest of the path is the base).
PINNED_PATHS: dict[str, str] = {
    "/infill": "infill",
    "/completion": "completion",
    "/api/generate": "ollama",
    "/v1/completions": "openai",
    "/v1": "openai",
}


#: A URL's user name and password (``scheme://user:password@host``).
_USERINFO = re.compile(r"(?<=//)[^/?#]*@")


def without_userinfo(url: str) -> str:
    """``url`` with its user name and password (``//user:password@``) hidden, for messages."""
    return _USERINFO.sub("***@", url)


def _short(value: str, limit: int = 80) -> str:
    """``repr`` of ``value`` with any password hidden, cut to ``limit`` characters (an error
    message stays one line, and goes to logs)."""
    text = repr(without_userinfo(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def split_url(url: str) -> tuple[str, str | None]:
    """``(base URL, pinned protocol or None)``; ``ValueError`` for a URL that is not http(s),
    names no host, has a port that is not 1..65535, or that no HTTP client could open."""
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # ``http://[``: an unclosed IPv6 bracket
        raise ValueError(f"backend {_short(url)} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"backend must be an http:// or https:// URL or auto, not {_short(url)}")
    if "@" in parts.netloc:
        # The HTTP client would send it as Basic credentials in place of backendApiKey,
        # and the URL is shown in the status and every message.
        raise ValueError(
            f"backend {_short(url)} has a user name or password in it: set backendApiKey "
            "(sent as a bearer token) instead"
        )
    if parts.query:
        raise ValueError(f"backend {_short(url)} has a query (?...), which would not be sent")
    if not parts.hostname:
        raise ValueError(f"backend {_short(url)} names no host")
    try:
        # Parsed only when read: ``:abc`` must fail here, with a ValueError, not later
        # in the HTTP client (whose InvalidURL is no ValueError).
        port = parts.port
    except ValueError:
        port = 0
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"backend {_short(url)}: the port must be a number from 1 to 65535")
    if not url.strip().isprintable() or " " in parts.netloc:
        raise ValueError(f"backend {_short(url)} has a space or a control character")
    if ":" not in parts.hostname:  # an IPv6 literal has no labels
        try:
            # What the resolver does with the name: a label over 63 characters or an
            # empty one (``a..b``) could never be looked up.
            parts.hostname.encode("idna")
        except UnicodeError:
            raise ValueError(f"backend {_short(url)} has no valid host name") from None
        if not parts.hostname.isascii():
            # The HTTP client's IDNA rules are stricter than the codec's (``☃.com``);
            # imported only here, so checking an ASCII setting stays cheap.
            import httpx

            try:
                httpx.URL(url.strip())
            except httpx.InvalidURL:
                raise ValueError(f"backend {_short(url)} has no valid host name") from None
    path = parts.path.rstrip("/")
    for suffix, protocol in PINNED_PATHS.items():
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            return urlunsplit((parts.scheme, parts.netloc, path, "", "")), protocol
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), None


def check_backend(value: str) -> None:
    """``ValueError`` unless ``value`` is ``auto`` or an http(s) URL ``split_url`` takes (the
    setting's check, and ``serve --backend``'s)."""
    if value != AUTO:
        split_url(value)


def check_api_key(key: str) -> str | None:
    """Why ``key`` cannot be an API key, or None when it can: it must be printable
    ASCII without spaces (what a client can send in a header and ``Bearer KEY``
    can carry)."""
    if not key:
        return "is empty"
    if not all("!" <= c <= "~" for c in key):
        return (
            "must be printable ASCII without spaces: HTTP clients send header values as "
            "ASCII or Latin-1 bytes, so a key with any other character could never be sent "
            "or matched"
        )
    return None

"""The ``backend`` setting's URL: its base and the protocol its path pins, if any; its key.

A leaf module (it imports nothing of structspec), so ``config`` checks the
settings with the same rules the client applies.
"""

from __future__ import annotations

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


def split_url(url: str) -> tuple[str, str | None]:
    """``(base URL, pinned protocol or None)``; ``ValueError`` for a URL that is not http(s)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"backend must be an http:// or https:// URL or auto, not {url!r}")
    path = parts.path.rstrip("/")
    for suffix, protocol in PINNED_PATHS.items():
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            return urlunsplit((parts.scheme, parts.netloc, path, "", "")), protocol
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), None


def check_backend(value: str) -> None:
    """``ValueError`` unless ``value`` is ``auto`` or an http(s) URL (the setting's check)."""
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

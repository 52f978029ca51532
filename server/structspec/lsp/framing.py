"""LSP base-protocol framing: ``Content-Length`` headers, validated, never trusted.

A message is a header block (``Name: value`` lines, ended by an empty line)
followed by exactly ``Content-Length`` bytes of body. The reader here is lenient
where the spec or common clients are (header names in any case, ``Content-Type``
optional, LF-only line ends) and strict where a peer could hurt the server:

- ``Content-Length`` must be 1 to 12 ASCII digits and at most
  ``MAX_MESSAGE_BYTES``; a huge, negative, non-numeric or missing length is a
  framing error, never an allocation of that size.
- a header line longer than ``MAX_HEADER_LINE``, or more than ``MAX_HEADERS``
  lines, is a framing error.
- after any framing error the reader resynchronises: it drops bytes until the
  next ``Content-Length`` header, searching the bad header block itself too
  (a block whose line end was not one ran into the next message's header), so
  one bad frame costs that frame, not the session. A length that is wrong but
  valid cannot be told from a right one: its body takes what it says, and a
  message it cut in two is lost too.

Memory is bounded by ``MAX_MESSAGE_BYTES`` plus one read chunk, whatever arrives.
Nothing here knows JSON: a body that is not JSON is the dispatcher's business
(it answers ``-32700``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

#: The largest message body accepted. A 10 MB source file is a 10-20 MB JSON body;
#: anything much larger is not an editor buffer the model could use anyway.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: The longest header line accepted (real ones are under 100 bytes).
MAX_HEADER_LINE = 4096
#: The most header lines in one block (real ones have one or two).
MAX_HEADERS = 32
#: A bad header block up to this size is searched again for the next header.
REQUEUED_BLOCK = 8 * 1024
#: Bytes asked of the transport per read.
CHUNK = 64 * 1024

_HEADER_START = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_SPLIT_HEADER = 64  # bytes kept while seeking: more than any "Content-Length   :" prefix
_LENGTH = re.compile(rb"[0-9]{1,12}")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an RFC 7230 header name


class FramingError(Exception):
    """A header block that cannot be trusted; the reader logs it and resynchronises."""


class FrameReader:
    """Read LSP message bodies from ``read(n)`` (returns up to ``n`` bytes, ``b''`` at EOF)."""

    def __init__(
        self,
        read: Callable[[int], Awaitable[bytes]],
        *,
        max_message: int = MAX_MESSAGE_BYTES,
        max_header_line: int = MAX_HEADER_LINE,
    ) -> None:
        self._read = read
        self._buf = bytearray()
        self._block = bytearray()  # the header lines read of the block being parsed
        self._eof = False
        self.max_message = max_message
        self.max_header_line = max_header_line
        #: Framing errors seen so far (for logs and tests).
        self.errors = 0

    async def next_body(self) -> bytes | None:
        """The next message body, or ``None`` at the end of the stream."""
        while True:
            if not await self._seek_header():
                return None
            self._block = bytearray()
            try:
                length = await self._read_headers()
            except FramingError as exc:
                self.errors += 1
                log.warning("LSP framing error, skipping to the next header: %s", exc)
                # The next message's header may be inside the bad block (a line end
                # that was not one ran two headers together): look for it there,
                # past the bad header's own start.
                if len(self._block) <= REQUEUED_BLOCK:
                    self._buf[:0] = self._block[1:]
                continue
            if length is None:
                return None
            if not await self._fill_to(length):
                if self._buf:
                    log.warning(
                        "LSP stream ended inside a message (%d of %d bytes)", len(self._buf), length
                    )
                return None
            body = bytes(self._buf[:length])
            del self._buf[:length]
            return body

    # -- internals ----------------------------------------------------------
    async def _more(self) -> bool:
        if self._eof:
            return False
        chunk = await self._read(CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    async def _fill_to(self, n: int) -> bool:
        while len(self._buf) < n:
            if not await self._more():
                return False
        return True

    async def _seek_header(self) -> bool:
        """Drop bytes until the buffer starts with a ``Content-Length`` header.

        ``False`` at the end of the stream. Blank lines between messages are
        dropped silently, anything else with a log line.
        """
        dropped = 0
        while True:
            match = _HEADER_START.search(self._buf)
            # Without a match, keep a tail that may hold the start of a split header.
            cut = match.start() if match else max(0, len(self._buf) - _SPLIT_HEADER)
            if bytes(self._buf[:cut]).strip():
                dropped += cut
            del self._buf[:cut]
            if match is not None:
                break
            if not await self._more():
                dropped += len(self._buf) if bytes(self._buf).strip() else 0
                self._buf.clear()
                break
        if dropped:
            log.warning("LSP framing: dropped %d bytes that were not a message", dropped)
        return match is not None

    async def _line(self) -> bytes | None:
        """One header line without its line end (CRLF or LF); ``None`` at EOF."""
        while True:
            end = self._buf.find(b"\n", 0, self.max_header_line + 1)
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                self._block += line + b"\n"
                return line[:-1] if line.endswith(b"\r") else line
            if len(self._buf) > self.max_header_line:
                del self._buf[: self.max_header_line]
                raise FramingError(f"header line longer than {self.max_header_line} bytes")
            if not await self._more():
                return None

    async def _read_headers(self) -> int | None:
        """Parse a header block; the body length, or ``None`` at EOF."""
        headers: dict[bytes, bytes] = {}
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                break
            name, colon, value = line.partition(b":")
            name = name.strip()
            if not colon or not _TOKEN.fullmatch(name):
                raise FramingError(f"malformed header line {_show(line)}")
            key = name.lower()
            if key in headers:
                raise FramingError(f"repeated header {_show(name)}")
            if len(headers) == MAX_HEADERS:
                raise FramingError(f"more than {MAX_HEADERS} header lines")
            headers[key] = value.strip()
        raw = headers.get(b"content-length")
        if raw is None:
            raise FramingError("header block without Content-Length")
        if not _LENGTH.fullmatch(raw):
            raise FramingError(f"Content-Length is not a length: {_show(raw)}")
        length = int(raw)
        if length > self.max_message:
            raise FramingError(
                f"Content-Length {length} is over the limit of {self.max_message} bytes"
            )
        return length


def _show(data: bytes, limit: int = 60) -> str:
    text = repr(data[:limit])
    return text + ("..." if len(data) > limit else "")

"""A streaming client for remote inference engines: llama-server, OpenAI-compatible, Ollama.

``RemoteBackend(url, ...)`` completes a ``RemoteRequest`` (the text before and
after the cursor) through the first protocol the server speaks, in this order:

- ``infill``: llama-server's ``POST /infill`` (``input_prefix``,
  ``input_suffix``, ``input_extra`` for project context), when the model has
  FIM tokens (llama-server answers 501 otherwise);
- ``completion``: llama-server's ``POST /completion`` with a prompt;
- ``ollama``: Ollama's ``POST /api/generate`` (``suffix``, or ``raw`` with a
  FIM prompt of a known template), NDJSON stream;
- ``openai``: ``POST /v1/completions`` (vLLM, LM Studio, SGLang,
  llama-cpp-python's server, ``structspec serve``), the FIM prompt built from
  the model family's template (``fim``).

llama-server requests carry ``cache_prompt`` and an ``id_slot`` per document
(when ``/props`` reports the slots), so a document keeps its KV cache. A
request whose prefix was backed up over a partial word (``healed``, token
healing) carries, to llama-server, a GBNF ``grammar`` that makes the output
start with that word (``healing_grammar``): the model's best completion of the
word comes back. The other protocols cannot be constrained; their caller keeps
only the completions that write the word.

A URL whose path names an endpoint (``http://h:8080/infill``, ``.../v1``) pins
that protocol. An endpoint answering 404, 405 or 501 passes on to the next
protocol; once one answers, ``notes`` says which were passed over and why, once.

Every request is streamed and bounded: ``stream`` yields text as it arrives and
is given a ``stop`` callable it polls while waiting (cancellation, a latency
budget); stopping, or closing the iterator, closes the HTTP response, so the
server sees the connection close and stops generating. A line longer than
``MAX_LINE`` bytes, a response over ``MAX_RESPONSE`` bytes, or a line that is
not the protocol's JSON is an error, not a hang. Errors are ``BackendError``
with a message for the user (the URL, the setting to fix); an unreachable
server is retried with back-off (``BackendUnreachable`` says when).

The client is synchronous for its caller (the completion worker thread) and
runs httpx's async client on a private event loop, so that waiting for the
next chunk can be abandoned at any moment without a thread blocked in ``recv``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import httpx

from structspec.backends.address import split_url
from structspec.backends.fim import FimTemplate, template_for
from structspec.files import JSONError, load_json

#: Protocols in the order they are tried, and their endpoints.
PROTOCOLS: tuple[str, ...] = ("infill", "completion", "ollama", "openai")
ENDPOINTS: dict[str, str] = {
    "infill": "/infill",
    "completion": "/completion",
    "ollama": "/api/generate",
    "openai": "/v1/completions",
}
#: What each protocol is called in messages and in the status.
TITLES: dict[str, str] = {
    "infill": "llama-server /infill",
    "completion": "llama-server /completion",
    "ollama": "Ollama /api/generate",
    "openai": "OpenAI-compatible /v1/completions",
}
#: Longest line of a streamed answer, whole answer, and error body read (bytes).
MAX_LINE = 1 << 20
MAX_RESPONSE = 8 << 20
MAX_ERROR_BODY = 64 << 10
#: How often a wait for the next chunk looks at ``stop`` (seconds).
POLL_S = 0.02
#: Seconds the end of an answer's body is waited for after its last event, so
#: that its connection can serve the next request (an answer closed before its
#: body's end closes the connection: a new one, and on https a new TLS
#: handshake, for every completion). Servers end the body at once.
DRAIN_S = 0.05
#: Connect timeout; back-off after an unreachable server: first and longest wait.
CONNECT_TIMEOUT_S = 3.0
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
#: Longest wait for a metadata GET (``/props``, ``/v1/models``, ``/api/tags``),
#: and how long one that failed is not asked again (it is awaited inside a
#: completion, so a stalled one must not cost every completion).
METADATA_TIMEOUT_S = 1.0
METADATA_RETRY_S = 60.0
#: Statuses that mean "this endpoint is not here": try the next protocol.
UNAVAILABLE = frozenset({404, 405, 501})


class BackendError(Exception):
    """A backend failed; the message says what and how to fix it (shown to the user)."""


class BackendUnreachable(BackendError):
    """Nothing answers at the URL (connection refused, DNS, timeout); retried with back-off."""


class BackendBusy(BackendUnreachable):
    """The server is busy or rate-limits (429, 503): not asked again before its Retry-After."""


def _retry_after(value: str | None, now: float | None = None) -> float:
    """Seconds a ``Retry-After`` header asks for, within the back-off bounds.

    Delta-seconds, or an HTTP date (``now``: the wall clock, for tests); a
    header sent twice reaches here joined by a comma (``"20, 20"``).
    """
    seconds = BACKOFF_FIRST_S
    if value is not None:
        try:
            seconds = float(value.split(",")[0])
        except ValueError:
            with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
                when = email.utils.parsedate_to_datetime(value.strip()).timestamp()
                seconds = when - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        seconds = BACKOFF_FIRST_S
    return min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, seconds))


class _Unavailable(Exception):
    """The endpoint is not served here (404/405/501): the next protocol is tried."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RemoteRequest:
    """One completion: the text around the cursor and how much to write.

    ``document`` keys the llama-server slot; ``extra`` is project context as
    ``(file name, text)`` pairs (``/infill``'s ``input_extra``). ``healed``:
    the partial word at the cursor that ``prefix`` was backed up over; the
    completion is to write it first (see the module docstring).
    """

    prefix: str
    suffix: str
    max_tokens: int
    stop: tuple[str, ...] = ()
    document: str = ""
    extra: tuple[tuple[str, str], ...] = ()
    healed: str = ""


def healing_grammar(word: str) -> str:
    """A GBNF grammar (llama.cpp's) for text that starts with ``word``, then anything.

    ``word`` goes in a string literal: ``"`` and ``\\`` escaped, and every
    character outside printable ASCII written as a ``\\u``/``\\U`` code point,
    so no character of the word (a control character, a non-ASCII letter)
    can end or break the literal.
    """
    literal = "".join(_gbnf_char(ch) for ch in word)
    return f'root ::= "{literal}" .*'


def _gbnf_char(ch: str) -> str:
    point = ord(ch)
    if ch in '"\\':
        return "\\" + ch
    if 0x20 <= point < 0x7F:
        return ch
    return f"\\u{point:04X}" if point <= 0xFFFF else f"\\U{point:08X}"


def _tls_error(exc: BaseException) -> BaseException | None:
    """The ``ssl.SSLError`` behind ``exc``, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def content_codings(headers: httpx.Headers) -> list[str]:
    """The content codings an answer's ``Content-Encoding`` applies, in order
    (lower case, ``identity`` left out). More than one is refused by this client
    and by ``serve``'s proxy: httpx inflates each chunk whole before anything can
    count it, so one layer of gzip is bounded by the chunk (64 KiB inflate to at
    most ~64 MiB) and two are not (a 1 KB answer inflates to gigabytes). No
    inference server stacks them."""
    codings = (c.strip().lower() for c in headers.get_list("content-encoding", split_commas=True))
    return [c for c in codings if c and c != "identity"]


def _stacked_coding(response: httpx.Response) -> str | None:
    """The ``Content-Encoding`` of ``response`` when it stacks codings (``content_codings``)."""
    codings = content_codings(response.headers)
    return ", ".join(codings) if len(codings) > 1 else None


#: What a completion never inserts into a document: control characters but tab
#: and newline (NUL, CR, ESC...), C1 controls, lone surrogates (``"\ud800"`` in
#: JSON), bidirectional overrides and isolates ("Trojan Source"), a BOM.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\ufeff]")


def _one_line(text: str, limit: int = 200) -> str:
    """A backend's text for a message: an HTML page's title (or its text), on one line,
    without control characters, at most ``limit`` characters."""
    if text.lstrip().startswith("<"):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        text = title.group(1) if title else re.sub(r"<[^>]*>", " ", text)
    return " ".join(_UNSAFE.sub(" ", text).split())[:limit]


def _error_message(body: bytes) -> str:
    """The message of an error body (llama-server, OpenAI, vLLM, Ollama, FastAPI shapes)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = load_json(text.encode())  # as decoded above: a stray byte is no reason to fail
    except JSONError:
        return _one_line(text)
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return _one_line(str(error))
    return _one_line(text)


class RemoteBackend:
    """A remote engine at ``url`` (see the module docstring). Not thread-safe: one caller."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str = "",
        model: str = "",
        fim_template: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base, pinned = split_url(url)
        self._protocols = [pinned] if pinned else list(PROTOCOLS)
        self.model = model
        self._fim_setting = fim_template
        if fim_template:
            template_for("", fim_template)  # raises ValueError for a malformed template
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._clock = clock
        self._loop = asyncio.new_event_loop()
        self._client: httpx.AsyncClient | None = None
        #: What the user should read once: fallbacks, a missing FIM template.
        self.notes: list[str] = []
        self._noted: set[str] = set()
        self._slots: OrderedDict[str, int] = OrderedDict()
        self._total_slots: int | None = None  # None: not known (yet); 0: no slots
        #: When a metadata path may be asked (again): after a failure, later.
        self._meta_after: dict[str, float] = {}
        self._failures = 0
        self._retry_at = 0.0
        self._retry_why = "is unreachable"  # what the back-off waits for (its message)
        self._answered = False  # a protocol answered 200 (``name`` names it)
        self._skipped: list[str] = []  # why the protocols before this one were passed over
        #: The model whose prompt went without a FIM template (noted once it is answered).
        self._missing_template: str | None = None

    # -- what it is ----------------------------------------------------------
    @property
    def protocol(self) -> str:
        """The protocol in use (the first one not yet found missing)."""
        return self._protocols[0]

    @property
    def sees_suffix(self) -> bool:
        """The protocol in use puts the text after the cursor in the model's prompt.

        ``/infill`` and a FIM template do; Ollama is sent it as ``suffix`` (its
        template places it for a FIM model); a plain prompt is the prefix alone.
        """
        if self.protocol in ("infill", "ollama"):
            return True
        return template_for(self.model, self._fim_setting) is not None

    @property
    def name(self) -> str:
        """For the status: the protocol once one answered, the URL, the model when known."""
        model = f" ({self.model})" if self.model else ""
        what = f"{TITLES[self.protocol]} at " if self._answered else ""
        return f"{what}{self.base}{model}"

    def _note(self, message: str) -> None:
        if message not in self._noted:
            self._noted.add(message)
            self.notes.append(message)

    def take_notes(self) -> list[str]:
        """The notes not yet taken."""
        notes, self.notes = self.notes, []
        return notes

    # -- streaming ------------------------------------------------------------
    def stream(
        self, request: RemoteRequest, stop: Callable[[], bool] = lambda: False
    ) -> Iterator[str]:
        """The completion's text as it arrives; ``BackendError`` on failure.

        ``stop()`` is read every ``POLL_S`` while waiting: once true the stream
        ends (the HTTP response is closed). Closing the iterator early closes
        it too.
        """
        wait = self._retry_at - self._clock()
        if wait > 0:
            raise BackendUnreachable(
                f"structspec: the backend {self.base} {self._retry_why}; retrying in {wait:.0f} s"
            )
        chunks = self._chunks(request)
        try:
            while True:
                step = self._loop.create_task(_next(chunks))
                while not step.done():
                    self._loop.run_until_complete(asyncio.wait({step}, timeout=POLL_S))
                    if not step.done() and stop():
                        step.cancel()
                        self._loop.run_until_complete(asyncio.wait({step}))
                        return
                text = step.result()
                if text is None:
                    return
                yield text
                if stop():  # a server that writes faster than POLL_S is stopped here
                    return
        finally:
            self._loop.run_until_complete(_close(chunks))

    async def _chunks(self, request: RemoteRequest) -> AsyncGenerator[str, None]:
        """Texts from the first protocol that serves ``request``."""
        while True:
            protocol = self._protocols[0]
            try:
                async with contextlib.aclosing(self._attempt(protocol, request)) as attempt:
                    async for text in attempt:
                        yield text
                return
            except _Unavailable as exc:
                if len(self._protocols) == 1:
                    raise BackendError(
                        f"structspec: no completion endpoint at {self.base}: {exc}. Fix: set "
                        "`backend` to a llama-server, OpenAI-compatible or Ollama URL"
                    ) from None
                self._protocols.pop(0)
                self._skipped.append(str(exc))  # said once the next one answers

    async def _attempt(self, protocol: str, request: RemoteRequest) -> AsyncGenerator[str, None]:
        client = self._http()
        self._missing_template = None
        path, body = await self._body(protocol, request)
        url = self.base + path
        try:
            async with client.stream("POST", url, json=body, headers=self._headers) as response:
                self._failures, self._retry_at = 0, 0.0
                if (coding := _stacked_coding(response)) is not None:
                    raise BackendError(
                        f"structspec: {url} answered in the stacked content codings "
                        f"{coding[:60]!r}, which are not decoded (a decompression bomb)"
                    )
                if response.status_code != 200:
                    raise await self._refusal(protocol, url, response)
                self._answered = True
                if self._skipped:
                    skipped, self._skipped = "; ".join(self._skipped), []
                    self._note(f"structspec: {skipped}; using {TITLES[protocol]}")
                self._note_missing_template()
                answered = False  # an object of the protocol came (maybe without text)
                async with contextlib.aclosing(_lines(url, response)) as lines:
                    objects = _decode(protocol, url, _whole(response), lines)
                    async with contextlib.aclosing(objects):
                        async for data in objects:
                            if "content" in data or "choices" in data or "response" in data:
                                answered = True
                                text = _text_of(protocol, data)
                                if text:
                                    yield text
                            if _finished(protocol, data):
                                break
                    await _drain(lines)
                if not answered:  # a web page, another API's JSON, an unknown coding...
                    kind = response.headers.get("content-type", "no Content-Type")
                    raise BackendError(
                        f"structspec: {url} answered 200 but not as {TITLES[protocol]} does "
                        f"({kind[:60]}). Fix: set `backend` to the inference server's URL"
                    )
        except httpx.TransportError as exc:
            raise self._transport_error(url, exc) from None
        except httpx.HTTPError as exc:  # a body that cannot be decoded, a bad redirect...
            raise BackendError(f"structspec: {url}: {exc!r}") from None

    def _transport_error(self, url: str, exc: httpx.TransportError) -> BackendError:
        tls = _tls_error(exc)
        if tls is not None:
            return BackendError(
                f"structspec: TLS error talking to {url}: {tls}. Fix: use http:// for a server "
                "without TLS, or give it a certificate this machine trusts"
            )
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            self._failures += 1
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
            self._retry_at = self._clock() + delay
            self._retry_why = "is unreachable"
            return BackendUnreachable(
                f"structspec: the backend {self.base} is unreachable ({exc or type(exc).__name__})"
                f"; retrying in {delay:.0f} s. Fix: start the server, or set `backend` to its URL"
            )
        return BackendError(f"structspec: the connection to {url} broke: {exc!r}")

    async def _refusal(self, protocol: str, url: str, response: httpx.Response) -> Exception:
        """The error for a non-200 answer (its body read up to ``MAX_ERROR_BODY``)."""
        body = await _read(response, MAX_ERROR_BODY)
        status, message = response.status_code, _error_message(body)
        if status in (401, 403):
            return BackendError(
                f"structspec: {url} refused the request ({status}: {message}). Fix: set "
                "`backendApiKey` (env STRUCTSPEC_BACKEND_API_KEY) to the server's API key"
            )
        if protocol == "ollama" and status == 404 and "model" in message.lower():
            return BackendError(
                f"structspec: Ollama at {self.base}: {message}. Fix: set `backendModel` to a "
                "model `ollama list` shows"
            )
        if status in (429, 503):  # busy or rate-limited: wait as it asks, say so once
            delay = _retry_after(response.headers.get("retry-after"))
            self._retry_at = self._clock() + delay
            self._retry_why = f"answered {status}"
            return BackendBusy(
                f"structspec: {url} answered {status}: {message}; retrying in {delay:.0f} s"
            )
        if status in UNAVAILABLE:
            if protocol == "infill" and status == 501:
                return _Unavailable(status, f"the model at {url} has no FIM tokens ({message})")
            return _Unavailable(status, f"{url} answered {status}")
        if 300 <= status < 400:  # not followed: the setting should name where it leads
            location = repr(response.headers.get("location", "")[:200])
            return BackendError(
                f"structspec: {url} answered {status}, a redirect to {location}. Fix: set "
                "`backend` to the URL it leads to"
            )
        return BackendError(f"structspec: {url} answered {status}: {message}")

    # -- request bodies --------------------------------------------------------
    async def _body(self, protocol: str, request: RemoteRequest) -> tuple[str, dict[str, Any]]:
        path = ENDPOINTS[protocol]
        if protocol in ("infill", "completion"):
            body: dict[str, Any] = {
                "n_predict": request.max_tokens,
                "stream": True,
                "cache_prompt": True,
                "temperature": 0.0,
                "stop": list(request.stop),
            }
            slot = await self._slot(request.document)
            if slot is not None:
                body["id_slot"] = slot
            if request.healed:  # /infill and /completion both take a grammar
                body["grammar"] = healing_grammar(request.healed)
            if protocol == "infill":
                # The cursor's line goes in ``prompt``, which llama-server puts after the
                # FIM middle token (as llama.vim does): typing on a line then extends the
                # cached prompt's end instead of changing what comes before the suffix.
                line_start = request.prefix.rfind("\n") + 1
                body["input_prefix"] = request.prefix[:line_start]
                body["prompt"] = request.prefix[line_start:]
                body["input_suffix"] = request.suffix
                body["input_extra"] = [{"filename": f, "text": t} for f, t in request.extra]
            else:  # a model without FIM tokens: the prefix, unless fimTemplate says otherwise
                template = template_for(self.model, self._fim_setting)
                body["prompt"] = _fill(template, request)
            return path, body
        if protocol == "ollama":
            model = self.model or await self._first_model("/api/tags", "models", "name")
            template = template_for(model, self._fim_setting)
            body = {
                "model": model,
                "stream": True,
                "options": {
                    "num_predict": request.max_tokens,
                    "temperature": 0.0,
                    "stop": list(request.stop),
                },
            }
            if template is not None:  # raw: Ollama applies no template of its own
                body.update(raw=True, prompt=template.prompt(request.prefix, request.suffix))
            else:  # the model's Ollama template places the suffix (FIM-capable models)
                body.update(prompt=request.prefix, suffix=request.suffix)
            return path, body
        model = self.model or await self._first_model("/v1/models", "data", "id")
        template = template_for(model, self._fim_setting)
        if template is None:
            self._missing_template = model
        body = {
            "prompt": _fill(template, request),
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            "stream": True,
        }
        if model:
            body["model"] = model
        if request.stop:
            body["stop"] = list(request.stop)
        return path, body

    def _note_missing_template(self) -> None:
        """Once the protocol answered: say that the prompt had no FIM template."""
        model, self._missing_template = self._missing_template, None
        if model is not None:
            self._note(
                f"structspec: no FIM template is known for the model {model or '(unnamed)'}: "
                "completing from the text before the cursor only. Fix: set `fimTemplate` "
                "(e.g. <|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>)"
            )

    async def _first_model(self, path: str, key: str, field: str) -> str:
        """The server's first model (``GET path``), remembered; ``""`` when it names none
        (not asked again for ``METADATA_RETRY_S``)."""
        if self._clock() < self._meta_after.get(path, 0.0):
            return self.model
        self._meta_after[path] = self._clock() + METADATA_RETRY_S  # set first: a cut GET counts
        data = await self._get_json(path)
        items = data.get(key) if isinstance(data, dict) else None
        if isinstance(items, list) and items and isinstance(items[0], dict):
            name = items[0].get(field)
            # Shown in messages and the status: a name, not a page of control characters.
            if isinstance(name, str) and 0 < len(name) <= 256 and name == _one_line(name, 256):
                self.model = name
        return self.model

    async def _slot(self, document: str) -> int | None:
        """The llama-server slot of ``document``: least recently used slots are reused."""
        if self._total_slots is None and self._clock() >= self._meta_after.get("/props", 0.0):
            self._meta_after["/props"] = self._clock() + METADATA_RETRY_S  # a cut GET counts
            data = await self._get_json("/props")
            total = data.get("total_slots") if isinstance(data, dict) else None
            if isinstance(total, int) and total > 0:
                self._total_slots = total
            elif data is not None:  # it answered, without slots: never asked again
                self._total_slots = 0
        if not self._total_slots or not document:
            return None
        if document in self._slots:
            self._slots.move_to_end(document)
            return self._slots[document]
        if len(self._slots) < self._total_slots:
            slot = len(self._slots)
        else:
            _, slot = self._slots.popitem(last=False)
        self._slots[document] = slot
        return slot

    async def _get_json(self, path: str) -> Any:
        """``GET path`` as JSON (bounded); ``None`` when it fails in any way."""
        try:
            async with asyncio.timeout(METADATA_TIMEOUT_S):
                async with self._http().stream("GET", self.base + path, headers=self._headers) as r:
                    if r.status_code != 200 or _stacked_coding(r) is not None:
                        return None
                    body = await _read(r, MAX_ERROR_BODY)
            return load_json(body)
        except (httpx.HTTPError, JSONError, TimeoutError):
            return None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(
                CONNECT_TIMEOUT_S, read=None, write=10.0, pool=CONNECT_TIMEOUT_S
            )
            # The environment applies as for any HTTP client: proxies with NO_PROXY, SSL_CERT_FILE.
            # Uncompressed answers asked for (as ``serve --backend`` does): a stream is
            # small text, and compression would only hold back its chunks.
            self._client = httpx.AsyncClient(
                timeout=timeout, headers={"Accept-Encoding": "identity"}
            )
        return self._client

    def close(self) -> None:
        """Close the connections and the private loop."""
        if self._loop.is_closed():
            return
        if self._client is not None:
            self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


def _fill(template: FimTemplate | None, request: RemoteRequest) -> str:
    """The prompt: the template around prefix and suffix, or the prefix alone."""
    return request.prefix if template is None else template.prompt(request.prefix, request.suffix)


async def _close(chunks: AsyncGenerator[str, None]) -> None:
    """Close the stream, then let what it dropped finish closing (httpx's inner generators)."""
    await chunks.aclose()
    for _ in range(3):
        await asyncio.sleep(0)


async def _next(chunks: AsyncIterator[str]) -> str | None:
    try:
        return await chunks.__anext__()
    except StopAsyncIteration:
        return None


async def _lines(url: str, response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The response's lines, bounded by ``MAX_LINE`` and ``MAX_RESPONSE``."""
    buffer = b""
    total = 0
    async with contextlib.aclosing(_received(response)) as received:
        async for data in received:
            total += len(data)
            if total > MAX_RESPONSE:
                raise BackendError(f"structspec: {url} sent more than {MAX_RESPONSE >> 20} MiB")
            # One split per chunk: cutting each line off the buffer's front copied
            # the rest every time (a megabyte of empty lines took seconds).
            *lines, buffer = (buffer + data).split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r")
            if len(buffer) > MAX_LINE:
                raise BackendError(f"structspec: {url} sent a line over {MAX_LINE >> 10} KiB")
    if buffer.strip():
        yield buffer


def _received(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The body's chunks (an async generator, typed by httpx as an iterator: closed explicitly)."""
    return cast(AsyncGenerator[bytes, None], response.aiter_bytes())


async def _read(response: httpx.Response, limit: int) -> bytes:
    """The response's body, at most its first ``limit`` bytes."""
    body = b""
    async with contextlib.aclosing(_received(response)) as received:
        async for data in received:
            body += data
            if len(body) >= limit:
                break
    return body[:limit]


def _whole(response: httpx.Response) -> bool:
    """The answer is one JSON body (a server that ignored ``"stream": true``)."""
    kind = response.headers.get("content-type", "")
    return "json" in kind and "ndjson" not in kind


async def _drain(lines: AsyncIterator[bytes]) -> None:
    """Read what is left of an answer, for at most ``DRAIN_S``, so that its connection
    can be used again; whatever it holds or fails with is not part of the answer."""
    with contextlib.suppress(TimeoutError, BackendError, httpx.HTTPError):
        async with asyncio.timeout(DRAIN_S):
            async for _ in lines:
                pass


async def _decode(
    protocol: str, url: str, whole: bool, lines: AsyncIterator[bytes]
) -> AsyncGenerator[dict[str, Any], None]:
    """The JSON objects of a stream's ``lines``: SSE ``data:`` lines, NDJSON, or one JSON
    body (``whole``). The lines after the last object are left unread (``[DONE]``)."""
    if whole:
        body = b"".join([line + b"\n" async for line in lines])
        yield _parse(url, body)
        return
    start = True
    async for line in lines:
        if start:  # a UTF-8 BOM before the first line is no part of it (SSE, NDJSON)
            line, start = line.removeprefix(b"\xef\xbb\xbf"), False
        if protocol == "ollama":
            if line.strip():
                yield _parse(url, line)
            continue
        if not line.startswith(b"data:"):
            if line.startswith(b"error:"):  # llama-server's SSE error event
                raise BackendError(f"structspec: {url}: {_error_message(line[6:])}")
            continue  # blank separators, comments, event names
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        if payload:  # an empty ``data:`` field carries nothing (SSE allows it)
            yield _parse(url, payload)


def _parse(url: str, raw: bytes) -> dict[str, Any]:
    try:
        data = load_json(raw)
    except JSONError:
        data = None
    if not isinstance(data, dict):
        raise BackendError(f"structspec: {url} sent a malformed answer: {raw[:80]!r}")
    if data.get("error"):  # (``"error": null``, ``false`` or ``""`` is no error)
        raise BackendError(f"structspec: {url}: {_error_message(raw)}")
    return data


def _text_of(protocol: str, data: dict[str, Any]) -> str:
    if protocol == "openai":
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        text = first.get("text") if isinstance(first, dict) else None
        delta = first.get("delta") if isinstance(first, dict) and text is None else None
        if isinstance(delta, dict):  # a server that answers in chat chunks
            text = delta.get("content")
    else:
        text = data.get("response" if protocol == "ollama" else "content")
    return _UNSAFE.sub("", text) if isinstance(text, str) else ""


def _finished(protocol: str, data: dict[str, Any]) -> bool:
    if protocol == "openai":
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        return isinstance(first, dict) and bool(first.get("finish_reason"))  # not null, not ""
    return data.get("done" if protocol == "ollama" else "stop") is True  # not a "false" string

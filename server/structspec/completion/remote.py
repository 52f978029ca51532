"""One completion through a remote engine (the ``backend`` setting), on the worker thread.

The counterpart of ``generate.run_completion`` when the model lives on a
server (``backends.client``): the same inputs and the same ``Outcome``, the
same editor policy around a different source of text.

- The prompt is text: the document before the cursor within ``window_tokens``
  (about ``CHARS_PER_TOKEN`` characters each), its start on a grid of a
  quarter window and then at a line start, so that it stays the same while
  the user types and the server's prompt cache (``cache_prompt``) reuses it;
  the text after the cursor up to ``FIM_SUFFIX_TOKENS``; with
  ``project_context``, the other open documents as ``/infill``'s
  ``input_extra``.
- The stream is cut by the same rules as a local generation: the single-line
  or block mode (a block answers with its first line), a loop
  (``suggest.loop_start``), and the budgets: no text by ``max_latency_ms``
  after the keystroke ends the request, and once the server has written for
  ``max_generation_ms`` the word being written is finished and the suggestion
  ends there. A server that writes on past twice that budget, or stops
  writing, is cut without the unfinished word. Every cut closes the HTTP
  stream, and so does cancellation (a new keystroke), within
  ``backends.client.POLL_S``.
- Token healing (``token_healing``): a model asked to continue after a
  partial word (``ret|``) often writes badly, so the prompt backs up over the
  word and the request says which word it was (``RemoteRequest.healed``): the
  model chooses the whole word from its start. llama-server is constrained to
  write that word first (a grammar, ``backends.client``), as the local engine
  constrains its first tokens; the other protocols cannot be, so only a
  completion that writes the word first is kept, without it, and one that
  writes another word gives no suggestion.
- Clean-up is ``suggest.clean``; typing through the suggestion on screen
  needs no request (the service's pending suggestion).
- Pre-generation (``RemoteCompleter.pregenerate``) is text, not tokens: once
  a suggestion is shown and the user paused (``background``), one longer
  request at its place (``PREGENERATION_FACTOR`` times ``max_tokens``, no
  stop at the line's end) writes on past it. Its text becomes the pending
  suggestion's ``cache.Continuation`` (without tokens), so typing through the
  suggestion and on past its end is answered from it by the same code as the
  local engine's (``cache.PendingSuggestion.continuation_at``,
  ``suggest.continuation_answer``: the same line/block policy) without a
  request; an edit that leaves it drops it. A keystroke closes its stream
  and keeps what had arrived.

``RemoteCompleter`` holds the client of one ``backend`` setting and tells the
user about it once: its name and notes (a protocol fallback) through
``on_loaded``, a failure through ``on_failed`` (again only when it changes),
and ``on_loaded`` once it works again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace

from structspec.backends.client import (
    BackendError,
    BackendUnreachable,
    RemoteBackend,
    RemoteRequest,
)
from structspec.completion.cache import Continuation
from structspec.completion.generate import (
    CompletionInput,
    Outcome,
    first_line_done,
    why_empty,
    word_end,
)
from structspec.completion.prompt import CONTEXT_TOKENS, FIM_SUFFIX_TOKENS, file_name
from structspec.completion.suggest import BLOCK, LINE, clean, cut_block, loop_start
from structspec.completion.types import EmptyReason
from structspec.config import Settings
from structspec.engine.stats import GenerationStats

log = logging.getLogger(__name__)

#: Characters per token for windows measured in tokens (no tokenizer here).
CHARS_PER_TOKEN = 4
#: A stream that goes on this many times ``max_generation_ms`` is cut.
HARD_CUT_FACTOR = 2.0
#: Requests in a row without text by ``max_latency_ms`` before the user is told.
SILENT_REQUESTS = 3
#: Other documents sent as project context, most recently used first.
CONTEXT_DOCUMENTS = 4
#: A suggestion is cut at ``max_tokens`` times this many characters (a server
#: that ignores ``max_tokens``, or writes one endless word, is not followed on).
MAX_CHARS_PER_TOKEN = 16
#: A pre-generation asks for this many times ``max_tokens``, and may write this
#: many times as long as a request.
PREGENERATION_FACTOR = 4

RemoteKey = tuple[str, ...]


def remote_key(settings: Settings) -> RemoteKey:
    """Every setting that changes the remote client; ``()`` without a backend."""
    if not settings.backend:
        return ()
    return (
        settings.backend,
        settings.backend_api_key,
        settings.backend_model,
        settings.fim_template,
    )


def text_window(text: str, offset: int, settings: Settings) -> tuple[str, str]:
    """The prefix and suffix sent for a cursor at ``offset`` (see the module docstring)."""
    chars = (settings.window_tokens or settings.context_size) * CHARS_PER_TOKEN
    start = 0
    if offset > chars:
        step = max(1, chars // 4)
        start = -(-(offset - chars) // step) * step  # rounded up: at most ``chars`` long
        newline = text.find("\n", start, offset)
        start = newline + 1 if newline >= 0 else start
    end = min(len(text), offset + FIM_SUFFIX_TOKENS * CHARS_PER_TOKEN)
    if end < len(text):
        newline = text.rfind("\n", offset, end)
        end = newline + 1 if newline >= 0 else end
    return text[start:offset], text[offset:end]


def healed_word(job: CompletionInput) -> str:
    """The partial word at the cursor the prompt backs up over (``""``: none, or healing off)."""
    return job.cursor.word_prefix if job.settings.token_healing else ""


def request_for(job: CompletionInput) -> RemoteRequest:
    """The job as a remote request; ``healed``: the partial word its prompt backed up over."""
    settings = job.settings
    prefix, suffix = text_window(job.text, job.offset, settings)
    heal = healed_word(job)
    if heal and prefix.endswith(heal):
        prefix = prefix[: -len(heal)]
    else:
        heal = ""
    extra: tuple[tuple[str, str], ...] = ()
    if settings.project_context:
        limit = CONTEXT_TOKENS * CHARS_PER_TOKEN
        others = job.others[:CONTEXT_DOCUMENTS]
        extra = tuple((file_name(o.uri), o.text[:limit]) for o in others)
    stop = ("\n",) if job.cursor.mode == LINE else ()
    return RemoteRequest(prefix, suffix, settings.max_tokens, stop, job.uri, extra, heal)


def unheal(healing: str, piece: str) -> tuple[str, str] | None:
    """``(healing, piece)`` less what ``piece`` wrote of the word still to come.

    ``None`` when ``piece`` writes another word than ``healing``.
    """
    written = min(len(healing), len(piece))
    if piece[:written] != healing[:written]:
        return None
    return healing[written:], piece[written:]


class RemoteCompleter:
    """The remote engine of one ``backend`` setting (worker thread only)."""

    def __init__(
        self,
        settings: Settings,
        *,
        on_loaded: Callable[[str, list[str]], None],
        on_failed: Callable[[str], None],
        url: str = "",
    ) -> None:
        """``url``: the server's URL when ``settings.backend`` does not say it (``auto``)."""
        self.key = remote_key(settings)
        self.backend = RemoteBackend(
            url or settings.backend,
            api_key=settings.backend_api_key,
            model=settings.backend_model,
            fim_template=settings.fim_template,
        )
        self._on_loaded = on_loaded
        self._on_failed = on_failed
        self._failure: str | None = None
        self._name = ""
        self._silent = 0  # requests in a row the latency budget cut before any text
        self._announce()

    def _announce(self) -> None:
        """Tell the service the backend's name (when it changed) and any new notes."""
        notes = self.backend.take_notes()
        if notes or self.backend.name != self._name:
            self._name = self.backend.name
            for note in notes:
                log.info("%s", note)
            self._on_loaded(self._name, notes)

    def _report(self, exc: BackendError) -> None:
        # An unreachable (or busy) server's message changes with its back-off: one report per
        # outage. Other messages carry the server's text: request ids and numbers in it
        # (``req_8f3a...``, ``try again in 142ms``) do not make another failure.
        key = (
            "unreachable"
            if isinstance(exc, BackendUnreachable)
            else re.sub(r"\w*\d\w*", "#", str(exc))
        )
        if key != self._failure:
            self._failure = key
            log.warning("%s", exc)
            self._on_failed(str(exc))

    def complete(
        self,
        job: CompletionInput,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        progress: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Outcome:
        """One suggestion for ``job`` (``clock`` is the clock of ``job.t0``)."""
        settings = job.settings
        mode = job.cursor.mode
        latency_deadline = job.t0 + settings.max_latency_ms / 1000.0
        budget = settings.max_generation_ms / 1000.0
        started = clock()
        first: float | None = None
        cut = ""

        def stop() -> bool:
            nonlocal cut
            if cancelled():
                return True
            now = clock()
            if first is None and now > latency_deadline:
                cut = "latency"
            elif first is not None and now > first + HARD_CUT_FACTOR * budget:
                cut = "budget"
            return bool(cut)

        text, early, chunks, mark = "", False, 0, None
        limit = settings.max_tokens * MAX_CHARS_PER_TOKEN
        request = request_for(job)
        healing = request.healed  # what of the word is still to come
        stream = self.backend.stream(request, stop)
        try:
            for piece in stream:
                if first is None:
                    first = clock()
                chunks += 1
                if healing:
                    rest = unheal(healing, piece)
                    if rest is None:
                        cut = "healing"  # another word than the one being typed
                        break
                    healing, piece = rest
                    if not piece:
                        continue
                before = len(text)
                text += piece
                if progress is not None:
                    progress(text)
                loop = loop_start(text)
                if loop is not None:  # the model is stuck in a loop: that line is dropped
                    text, early = text[:loop], True
                    break
                if mode == LINE and "\n" in text:  # a server that ignored "stop"
                    text, early = text[: text.index("\n")], True
                    break
                if mode == BLOCK:
                    text, dedented = cut_block(text, job.cursor)
                    line_end = first_line_done(text)
                    if dedented or line_end is not None:
                        text = text if line_end is None else text[:line_end]
                        early = True
                        break
                if mark is None and clock() - first > budget:
                    mark = before  # finish the word being written, then stop
                # From ``before``: the text up to it was looked at for a word end already.
                if mark is not None and (end := word_end(text, max(mark, before))) is not None:
                    text, early = text[:end], True
                    break
                if len(text) > limit:  # a server that ignored max_tokens
                    text, early, cut = text[:limit], True, "length"
                    break
        except BackendError as exc:
            self._report(exc)
            if cancelled():
                return Outcome(cancelled=True, empty=EmptyReason.CANCELLED)
            return Outcome(empty=EmptyReason.ERROR)
        finally:
            stream.close()  # type: ignore[attr-defined]
        if self._failure is not None:  # it works again
            self._failure = None
            self._name = ""
        self._announce()
        self._count_silence(cut == "latency" and first is None, settings)
        ended = clock()
        stats = GenerationStats(
            tokens=chunks,
            passes=chunks,
            prefill_ms=((first or ended) - started) * 1000.0,
            decode_ms=(ended - (first or ended)) * 1000.0,
            stop_reason="cancelled" if cancelled() else cut or ("cut" if early else "end"),
        )
        if cancelled():
            return Outcome(stats=stats, cancelled=True, empty=EmptyReason.CANCELLED)
        if cut == "budget" and not early and mark is not None:
            text = text[:mark]  # cut mid-word: without the unfinished word
        if cut == "healing" or healing:  # it did not write the word being typed
            return Outcome(stats=stats, empty=EmptyReason.STOP_RULE)
        if first is None and cut == "latency":  # the server still evaluating the prompt
            return Outcome(stats=stats, empty=EmptyReason.PROMPT_UNFINISHED)
        sees_rest = self.backend.sees_suffix
        cleaned = clean(text, job.cursor, mode, sees_rest=sees_rest) if text else None
        if cleaned is None:
            return Outcome(stats=stats, empty=why_empty(text, "", early or bool(cut)))
        return Outcome(cleaned, stats)

    def pregenerate(
        self,
        job: CompletionInput,
        *,
        cancelled: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> Continuation | None:
        """What the server writes from ``job``'s cursor, asked for at length, in idle time.

        The text as written (the healed word left out), cut only at a loop,
        by ``cancelled`` (what arrived is kept) or by ``PREGENERATION_FACTOR``
        times the budgets; ``ended`` when the server ended it. ``None`` when
        it wrote nothing usable, wrote another word than the one being typed,
        or failed (a failure is the next request's to report).
        """
        settings = job.settings
        request = request_for(job)
        healing = request.healed
        request = replace(request, max_tokens=settings.max_tokens * PREGENERATION_FACTOR, stop=())
        started = clock()
        first_by = started + PREGENERATION_FACTOR * settings.max_latency_ms / 1000.0
        budget = PREGENERATION_FACTOR * HARD_CUT_FACTOR * settings.max_generation_ms / 1000.0
        first: float | None = None
        cut = False

        def stop() -> bool:
            nonlocal cut
            now = clock()
            cut = now > (first_by if first is None else first + budget)
            return cancelled() or cut

        text, ended = "", False
        stream = self.backend.stream(request, stop)
        try:
            for piece in stream:
                if first is None:
                    first = clock()
                if healing:
                    rest = unheal(healing, piece)
                    if rest is None:
                        return None
                    healing, piece = rest
                text += piece
                loop = loop_start(text)
                if loop is not None:  # what follows a loop is not worth keeping
                    if not loop:
                        return None
                    return Continuation(
                        text[:loop], (), ended=True, sees_rest=self.backend.sees_suffix
                    )
                if len(text) > PREGENERATION_FACTOR * settings.max_tokens * MAX_CHARS_PER_TOKEN:
                    break
                if stop():  # a server that writes faster than POLL_S is cut here
                    break
            else:
                ended = not cancelled() and not cut
        except BackendError as exc:
            log.debug("pre-generation through %s failed: %s", self.backend.base, exc)
            return None
        finally:
            stream.close()  # type: ignore[attr-defined]
        if healing or not text:
            return None
        return Continuation(text, (), ended=ended, sees_rest=self.backend.sees_suffix)

    def _count_silence(self, silent: bool, settings: Settings) -> None:
        """Warn once when ``SILENT_REQUESTS`` requests in a row got no text in time."""
        self._silent = self._silent + 1 if silent else 0
        if self._silent == SILENT_REQUESTS:
            message = (
                f"structspec: the backend {self.backend.base} sent nothing within maxLatencyMs "
                f"({settings.max_latency_ms} ms) for {SILENT_REQUESTS} requests in a row. Fix: "
                "raise maxLatencyMs, or check the server (its load, its URL)"
            )
            log.warning("%s", message)
            self._on_loaded(self._name, [message])

    def close(self) -> None:
        self.backend.close()

"""The completion service: documents in, suggestions out, independent of any editor protocol.

Threads: every public method runs on one asyncio event loop (the language
server's). The model and the engine belong to a single worker thread
(``host.EngineHost``), so one generation uses the model at a time and the loop
stays free to answer ``initialize``, edits and ``shutdown`` while a generation
runs. Blocking work (loading the model, tokenizing, decoding) never runs on the
loop.

This module keeps what lives on the loop: per-document sessions, the
typing-through and pre-generated answers, debounce (adaptive, see
``debounce``), cancellation and status; on the worker only the entry points
that hand a job to ``host`` and ``generate`` (``_warm``, ``_run``,
``_prewarm``, ``_pregenerate``).

Stale work: a new request for a document cancels the one in flight for it
(that one answers ``None``); a cancelled request (``$/cancelRequest``, which
cancels the awaiting task) stops its generation between verification passes,
``ADOPT_GRACE_S`` after its last request left. Except when the keystrokes
since agree with it: a request whose edit since the generation in flight was
asked is typing, at its cursor, the start of what it has written so far waits
for that generation and is typed through its answer (``_adopt``). A user who
types faster than the model answers, typing what the model is writing, sees
each answer a pass after it is done instead of never.

Settings: ``configure`` is the one way in (the language server's
``initialized`` too). A change that reshapes the model or the engine queues one
warm-up on the worker; changes arriving while one is queued share it (it reads
the latest settings when it runs), so toggling a setting twenty times loads at
most twice.

A request goes: typing-through cache (no model) -> debounce -> worker
(``generate.run_completion``): stable prompt (see ``prompt``; with
``projectContext``, snippets of the other open documents, see ``snippets``),
corpus of the open buffers, chunked prefill within the latency budget (see
``prewarm``), engine stream with the single-line/block mode and the latency
budget -> clean-up (see ``suggest``).

Background work, one job at a time on the worker, only when no request is
queued or running, abandoned by any request or edit: part-way through the
decode it is in when the model can be interrupted (``model.extras``), else
between two prefill chunks or two verification passes. A request's own job is
only ever stopped between them, so each of its decodes adds to the cache:
keystrokes faster than a prefill chunk still get the prompt evaluated.

- *pre-warm*: an opened document, one the user stopped editing for
  ``PREWARM_IDLE_S``, or the place the editor says the cursor moved to
  (``cursor_moved``), is prefilled into a KV slot;
- *pre-generation*: once a suggestion is shown, the model keeps writing past
  its end (``generate.continue_generation``), so that accepting it (whole, a
  line, a word) and going on is answered from what is written
  (``cache.PendingSuggestion.continuation_at``) without the model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import logging
import posixpath
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from structspec.completion.cache import Extension, PendingSuggestion
from structspec.completion.corpus import DocumentSnapshot
from structspec.completion.debounce import AdaptiveDebounce
from structspec.completion.documents import (
    UTF16,
    Document,
    DocumentStore,
    TextChange,
    index_to_column,
    uri_path,
)
from structspec.completion.generate import (
    GENERATED_CONTEXT_TOKENS,
    CompletionInput,
    Outcome,
    build_prompt,
    continue_generation,
    run_completion,
)
from structspec.completion.host import (
    EngineHost,
    EngineLoader,
    ModelOpener,
    default_load_engine,
    default_open_model,
    engine_key,
    model_key,
)
from structspec.completion.prewarm import (
    PREWARM_IDLE_S,
    opening_offset,
    prefill_in_chunks,
)
from structspec.completion.prompt import prompt_room, window_budget
from structspec.completion.stats import AcceptanceStats
from structspec.completion.suggest import CursorContext, continuation_answer
from structspec.completion.types import (
    BUSY,
    ERROR,
    IDLE,
    NOT_LOADED,
    CompletionRequest,
    Status,
    Suggestion,
)
from structspec.config import Settings
from structspec.engine.decode import EngineError
from structspec.engine.healing import vocab_index
from structspec.engine.stats import GenerationStats
from structspec.model.base import Interrupt, ModelError
from structspec.model.extras import interrupted_by
from structspec.syntax.domains import detect_language

__all__ = ["CompletionRequest", "CompletionService", "Status", "Suggestion", "draft_language"]

log = logging.getLogger(__name__)

#: Latest generations kept per document for the ``recycle`` draft source.
RECENT_SUGGESTIONS = 4
#: Seconds a generation whose last request was cancelled goes on, in case the
#: next keystroke's request agrees with it (an editor cancels the request on the
#: edit, before it asks again); a request that does not agree stops it at once.
ADOPT_GRACE_S = 0.15


def draft_language(uri: str, language_id: str, text: str) -> str:
    """The languageId the draft sources see for a document.

    The editor's own languageId when the syntax table knows it; otherwise the
    language detected from the file name and the text (a ``.py`` buffer the
    editor calls ``plaintext``, a ``#!/bin/sh`` script without an extension),
    so the syntax sources still serve it. Unknown stays as the editor said.
    """
    lang, _ = detect_language(language_id, uri_path(uri), text)
    return lang.language_ids[0] if lang is not None and lang.language_ids else language_id


class _Job:
    """One request's work for the worker thread: its inputs, its session and a cancel flag."""

    __slots__ = ("session", "input", "waiters", "_cancelled", "interrupt", "partial")

    def __init__(self, session: _Session, inputs: CompletionInput) -> None:
        self.session = session
        self.input = inputs
        self.waiters = 0  # requests awaiting this job
        self._cancelled = threading.Event()
        #: Stops a background job's decode part-way (``interrupted_by``).
        self.interrupt = Interrupt()
        #: The text the generation has written so far (set on the worker, read on the loop).
        self.partial = ""

    def wrote(self, text: str) -> None:
        self.partial = text

    def agrees(self, text: str, offset: int) -> bool:
        """``text`` is this job's text with, at its cursor, the start of what it has written.

        That is, the edits since it was asked typed what the model is writing.
        """
        if self.cancelled():
            return False
        old, at = self.input.text, self.input.offset
        typed = offset - at
        if typed <= 0 or len(text) != len(old) + typed:
            return False
        return (
            self.partial.startswith(text[at:offset])
            and text[:at] == old[:at]
            and text[offset:] == old[at:]
        )

    def cancel(self) -> None:
        self._cancelled.set()
        self.interrupt.set()

    def cancelled(self) -> bool:
        return self._cancelled.is_set()


@dataclass
class _Result:
    """A job's outcome as the loop sees it: the suggestion's id once it is shown."""

    outcome: Outcome
    id: str | None = None


@dataclass
class _Session:
    """Per-document state: the prompt cut (worker), the pending suggestion and job (loop).

    ``recent`` holds the document's latest generations (``Outcome.generated``,
    newest first), the cancelled ones too: what the model said a keystroke ago
    is the ``recycle`` source's draft for the next request.
    """

    cut: int | None = None
    pending: PendingSuggestion | None = None
    job: _Job | None = None
    task: asyncio.Future[_Result] | None = None
    recent: deque[tuple[int, ...]] = field(default_factory=lambda: deque(maxlen=RECENT_SUGGESTIONS))

    def remember(self, generated: tuple[int, ...]) -> None:
        if not generated:
            return
        if generated in self.recent:
            self.recent.remove(generated)
        self.recent.appendleft(generated)


def _edited(doc: Document, text: str) -> bool:
    """The document's text is no longer ``text`` (a request's answer for it is stale)."""
    return doc.text is not text and doc.text != text


def _where(request: CompletionRequest) -> str:
    """``file.py:line:character`` of a request, for the log (the line 1-based)."""
    return f"{posixpath.basename(uri_path(request.uri))}:{request.line + 1}:{request.character}"


def _log_unfinished(request: CompletionRequest, ms: float) -> None:
    """A request whose prompt evaluation ran out of ``maxLatencyMs``: it answered nothing."""
    log.info(
        "no suggestion at %s in %.0f ms: the prompt's evaluation ran past maxLatencyMs "
        "(what was evaluated stays cached; the next request or a pause continues it)",
        _where(request),
        ms,
    )


def _log_answer(
    request: CompletionRequest, ms: float, stats: GenerationStats | None, what: str
) -> None:
    """One log line per request the model worked on: where its time went (prefill or decode)."""
    if stats is None or not log.isEnabledFor(logging.INFO):
        return
    log.info(
        "%s at %s in %.0f ms: prompt %d tokens (%d evaluated in %.0f ms), "
        "%d tokens in %.0f ms (%d passes), stop: %s",
        what,
        _where(request),
        ms,
        stats.prompt_tokens,
        stats.prompt_tokens - stats.reused_tokens,
        stats.prefill_ms,
        stats.tokens,
        stats.decode_ms,
        stats.passes,
        stats.stop_reason or "-",
    )


class CompletionService:
    """Editor-independent inline completion (see the module docstring).

    ``on_status`` and ``on_message(level, text)`` are called on the event loop;
    ``level`` is ``error``, ``warning`` or ``info``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        on_status: Callable[[Status], None] | None = None,
        on_message: Callable[[str, str], None] | None = None,
        open_model: ModelOpener = default_open_model,
        load_engine: EngineLoader = default_load_engine,
    ) -> None:
        self.settings = settings
        self.documents = DocumentStore(UTF16)
        self.stats = AcceptanceStats()
        self.debounce = AdaptiveDebounce()
        self._on_status = on_status
        self._on_message = on_message
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="structspec-engine"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, _Session] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._background_timer: asyncio.Handle | None = None
        self._background_job: _Job | None = None
        #: The pre-generation on the worker: its future, session and the tokens it extends.
        self._pregeneration: (
            tuple[concurrent.futures.Future[Extension], _Session, tuple[int, ...]] | None
        ) = None
        self._ids = itertools.count(1)
        self._busy = 0
        self._closed = False
        self._released: threading.Event | None = None
        self._state = IDLE
        self._message = ""
        self._draft_languages: dict[str, str] = {}  # uri -> languageId the sources see
        self._model_name = NOT_LOADED
        #: The model and engine keys the last warm-up was queued for (``None``: never).
        self._warm_keys: tuple[object, object] | None = None
        self._warm_queued = False
        # Worker-thread state.
        self._host = EngineHost(
            announce=self._announce,
            on_loaded=lambda name, warnings: self._call_soon(self._model_loaded, name, warnings),
            on_failed=lambda message: self._call_soon(self._model_failed, message),
            open_model=open_model,
            load_engine=load_engine,
        )

    # -- documents ---------------------------------------------------------
    def open_document(self, uri: str, language: str, version: int, text: str) -> Document:
        self._touch(uri)
        self._draft_languages[uri] = draft_language(uri, language, text)
        doc = self.documents.open(uri, language, version, text)
        self._schedule_prewarm(uri)
        return doc

    def change_document(self, uri: str, version: int, changes: Iterable[TextChange]) -> Document:
        """Apply edits; raises ``UnknownDocument`` for a URI that is not open."""
        doc = self.documents.change(uri, version, changes)
        self.debounce.keystroke(time.perf_counter())
        self._touch(uri)
        self._schedule_prewarm(uri, doc.edited_at)
        return doc

    def close_document(self, uri: str) -> None:
        self.documents.close(uri)
        self._recent.pop(uri, None)
        self._draft_languages.pop(uri, None)
        session = self._sessions.pop(uri, None)
        if session is not None and session.job is not None:
            session.job.cancel()

    def _touch(self, uri: str) -> None:
        self._recent[uri] = None
        self._recent.move_to_end(uri, last=False)

    # -- settings and lifecycle -------------------------------------------
    def configure(self, settings: Settings) -> None:
        """Use ``settings`` from the next request on (the one way to apply settings).

        A change of a setting that shapes the model or the engine (the first
        call included) loads them in the worker now rather than on the next
        request; other settings cost nothing.
        """
        if settings.model != self.settings.model:
            for session in self._sessions.values():
                session.recent.clear()  # token ids of another model
        self.settings = settings
        if self._warm_keys != (model_key(settings), engine_key(settings)):
            self.start()

    def start(self) -> None:
        """Load the model and engine for the current settings in the worker now.

        At most one warm-up waits in the queue: it reads the settings of the
        moment it runs, so settings changed meanwhile share it.
        """
        self._bind_loop()
        if self._closed:
            return
        self._warm_keys = (model_key(self.settings), engine_key(self.settings))
        if self._warm_queued:
            return
        self._set_state(BUSY, "loading model")
        self._warm_queued = True  # before submitting: the worker may clear it at once
        try:
            future = self._executor.submit(self._warm)
        except RuntimeError:  # shut down
            self._warm_queued = False
            return
        future.add_done_callback(lambda f: self._call_soon(self._warm_done, f))

    def _warm_done(self, future: concurrent.futures.Future[str | None]) -> None:
        error = None if future.cancelled() else future.result()
        if error is not None:
            self._set_state(ERROR, error)  # the user was told by _model_failed already
        elif self._busy == 0:
            self._set_state(IDLE, "")

    def close(self) -> None:
        """Cancel everything in flight; the worker then releases the model and ends."""
        if self._closed:
            return
        self._closed = True
        self._abandon_background()
        for session in self._sessions.values():
            if session.job is not None:
                session.job.cancel()
        self._released = threading.Event()
        released = self._released

        def _release() -> None:
            try:
                self._host.close()
            finally:
                released.set()

        # Queued jobs see their cancel flag (or ``_closed``) and return at once.
        self._executor.submit(_release)
        self._executor.shutdown(wait=False)

    def join(self, timeout: float = 10.0) -> bool:
        """After ``close``: wait until the worker released the model."""
        return self._released.wait(timeout) if self._released is not None else False

    @property
    def model_name(self) -> str:
        return self._model_name

    def status(self) -> Status:
        return Status(
            self._state,
            self._model_name,
            self.stats.last_tokens_per_second,
            self.stats.acceptance,
            self.stats.last_latency_ms,
            self._message,
            self.stats.to_dict(),
        )

    # -- acceptance ---------------------------------------------------------
    def accept(self, suggestion_id: str) -> bool:
        """The user took suggestion ``suggestion_id``; ``False`` if it is unknown."""
        accepted = self.stats.record_accept(suggestion_id)
        if accepted:
            self._emit_status()
        return accepted

    # -- completion ---------------------------------------------------------
    async def complete(self, request: CompletionRequest) -> Suggestion | None:
        """A suggestion at the request's cursor, or ``None``.

        A request for the same text and cursor as the one in flight (an
        editor asking for inline and menu completion at once) shares its
        generation; any other request for the document cancels it. Raises
        ``asyncio.CancelledError`` when the awaiting task is cancelled (the
        generation stops too once no request waits for it).
        """
        self._bind_loop()
        t0 = time.perf_counter()
        self._abandon_background()
        await self._settle_pregeneration()
        self.stats.requests += 1
        doc = self.documents.get(request.uri)
        settings = self.settings
        if doc is None or self._closed:
            self.stats.empty += 1
            return None
        if settings.languages and doc.language not in settings.languages:
            self.stats.empty += 1
            return None
        session = self._sessions.setdefault(request.uri, _Session())
        enc = self.documents.encoding
        text = doc.text
        offset = doc.offset_at(request.line, request.character, enc)
        ctx = CursorContext.at(text, offset)

        job, task = session.job, session.task
        shared = (
            job is not None
            and task is not None
            and not job.cancelled()
            and job.input.text is text
            and job.input.offset == offset
        )
        if (
            not shared
            and job is not None
            and task is not None
            and job.input.settings is settings
            and job.agrees(text, offset)
        ):
            served, answer = await self._adopt(session, job, task, doc, text, offset, ctx, t0)
            if served:
                return answer
            if _edited(doc, text):  # again, meanwhile: a newer request answers
                self.stats.empty += 1
                return None
            job, task = session.job, session.task
        if not shared and job is not None:
            job.cancel()
            session.job = session.task = None

        if not shared and session.pending is not None:
            served, answer = self._from_pending(session, doc, text, offset, ctx, t0)
            if served:
                return answer

        if not shared:
            job = self._job(session, request.uri, text, offset, settings, t0, ctx)
            task = asyncio.ensure_future(self._execute(job, request.invoked))
            task.add_done_callback(functools.partial(self._job_done, job))
            session.job, session.task = job, task
        assert job is not None and task is not None
        result = await self._wait(job, task)
        outcome = result.outcome
        latency = (time.perf_counter() - t0) * 1000.0
        if outcome.text is None or result.id is None or job.cancelled() or _edited(doc, text):
            self.stats.empty += 1
            if outcome.unfinished:
                _log_unfinished(request, latency)
            else:
                _log_answer(request, latency, outcome.stats, "no suggestion")
            return None
        self.stats.record_latency(latency)
        _log_answer(request, latency, outcome.stats, "answer")
        self._schedule_pregeneration(request.uri)  # the job is done: the worker is free
        return self._suggestion(
            result.id, doc, text, offset, ctx, outcome.text, "model", latency, outcome.stats
        )

    async def _adopt(
        self,
        session: _Session,
        job: _Job,
        task: asyncio.Future[_Result],
        doc: Document,
        text: str,
        offset: int,
        ctx: CursorContext,
        t0: float,
    ) -> tuple[bool, Suggestion | None]:
        """Wait for ``job`` (the edits since agree with it), then type through its answer.

        Returns ``(served, suggestion)`` as ``_from_pending`` does; not served
        when it answered nothing, or what it answered no longer agrees.
        """
        result = await self._wait(job, task)
        pending = session.pending
        if _edited(doc, text) or pending is None or result.id is None or pending.id != result.id:
            return False, None
        served, answer = self._from_pending(session, doc, text, offset, ctx, t0)
        if served:
            self.stats.served_from_generation_in_flight += 1
            if answer is not None and not self.stats.is_shown(answer.id):
                # Its own request was cancelled before it came: this is its first showing.
                self.stats.record_shown(answer.id, len(pending.text))
            self._schedule_pregeneration(doc.uri)
        return served, answer

    async def _wait(self, job: _Job, task: asyncio.Future[_Result]) -> _Result:
        """Wait for ``job`` as one of its requests; cancelled, stop it once nobody waits."""
        job.waiters += 1
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            job.waiters -= 1
            self.stats.cancelled += 1
            if job.waiters == 0:
                self._orphaned(job)
            raise
        job.waiters -= 1
        return result

    def _orphaned(self, job: _Job) -> None:
        """No request waits for ``job`` any more: stop it, after the grace for adoption."""
        loop = self._loop
        if loop is None or loop.is_closed():
            job.cancel()
            return
        # The next keystroke's request may agree with it (``_adopt``); stop between
        # passes if none has come to wait for it by then.
        loop.call_later(ADOPT_GRACE_S, self._cancel_if_orphaned, job)

    @staticmethod
    def _cancel_if_orphaned(job: _Job) -> None:
        if job.waiters == 0:
            job.cancel()

    @staticmethod
    def _job_done(job: _Job, _task: asyncio.Future[_Result]) -> None:
        """A job ended: it no longer holds the session (background work waits for that).

        An answer nobody waited for any more stays pending (the next keystroke
        may type through it) but is not pre-generated: nobody was shown it.
        """
        if job.session.job is job:
            job.session.job = job.session.task = None

    def _from_pending(
        self,
        session: _Session,
        doc: Document,
        text: str,
        offset: int,
        ctx: CursorContext,
        t0: float,
    ) -> tuple[bool, Suggestion | None]:
        """Answer from the suggestion on screen or what pre-generation wrote, without the model.

        Returns ``(served, suggestion)``; when not served the pending entry is dropped.
        """
        pending = session.pending
        assert pending is not None
        rest = pending.rest_at(text, offset)
        follow = pending.continuation_at(text, offset) if rest is None else None
        cont = pending.continuation
        ready, shown = (
            (False, None)
            if follow is None or cont is None
            else continuation_answer(follow, cont.ended, ctx)
        )
        if rest is None and not ready:
            session.pending = None
            return False, None
        self.stats.served_from_cache += 1
        latency = (time.perf_counter() - t0) * 1000.0
        self.stats.record_latency(latency)
        if rest is not None:  # typing through the suggestion on screen
            return True, self._suggestion(
                pending.id, doc, text, offset, ctx, rest, "cache", latency, None
            )
        # Past it, along what the model wrote: a new suggestion, or the model's "nothing".
        follow = follow or ""
        assert cont is not None
        self.stats.served_from_pregeneration += 1
        suggestion_id = f"s{next(self._ids)}" if shown is not None else ""
        here = cont.after(len(cont.text) - len(follow))
        session.pending = PendingSuggestion.at(suggestion_id, text, offset, shown or "", here)
        self._schedule_pregeneration(doc.uri)
        if shown is None:
            self.stats.empty += 1
            return True, None
        self.stats.record_shown(suggestion_id, len(shown))
        return True, self._suggestion(
            suggestion_id, doc, text, offset, ctx, shown, "cache", latency, None
        )

    async def _execute(self, job: _Job, invoked: bool) -> _Result:
        """Debounce, generate in the worker, and record the outcome (once per job)."""
        wait = 0.0 if invoked else self.debounce.wait_ms(job.input.settings.debounce_ms)
        if wait > 0:
            await asyncio.sleep(wait / 1000.0)
            if job.cancelled():
                return _Result(Outcome(cancelled=True))
        result = _Result(await self._submit(job))
        outcome = result.outcome
        if outcome.stats is not None and not outcome.cancelled:
            self.debounce.model_answered(outcome.stats.seconds * 1000.0)
        job.session.remember(outcome.generated)
        if outcome.stats is not None and not outcome.cancelled:
            st = outcome.stats
            self.stats.record_generation(st.tokens, st.seconds, st.prefill_ms, st.decode_ms)
            self.stats.record_sources(st.by_source())
        if outcome.text is not None and not job.cancelled():
            result.id = f"s{next(self._ids)}"
            if job.waiters > 0:  # else nobody is shown it (it stays pending, see _job_done)
                self.stats.record_shown(result.id, len(outcome.text))
            job.session.pending = PendingSuggestion.at(
                result.id, job.input.text, job.input.offset, outcome.text, outcome.continuation
            )
        elif outcome.unfinished and not job.cancelled():
            # finish that prefill when idle
            self._schedule_prewarm(job.input.uri, job.input.offset)
        self._emit_status()
        return result

    def _job(
        self,
        session: _Session,
        uri: str,
        text: str,
        offset: int,
        settings: Settings,
        t0: float,
        ctx: CursorContext | None = None,
    ) -> _Job:
        """A job for ``uri`` with snapshots of the other open documents (on the loop)."""
        doc = self.documents.get(uri)
        others = [
            DocumentSnapshot(d.uri, d.version, d.text)
            for u in self._recent
            if u != uri and (d := self.documents.get(u)) is not None
        ]
        language = self._draft_languages.get(uri, doc.language if doc is not None else "")
        ctx = ctx or CursorContext.at(text, max(0, offset))
        inputs = CompletionInput(
            uri,
            text,
            offset,
            language,
            ctx,
            settings,
            others,
            t0,
            recent_suggestions=tuple(session.recent),
        )
        return _Job(session, inputs)

    # -- background work: pre-warm (see ``prewarm``) and pre-generation ----------
    def cursor_moved(self, uri: str, line: int, character: int) -> None:
        """The editor's cursor is at ``line``/``character`` of ``uri``: pre-warm there when idle.

        Ignored for a document that is not open and while the cursor sits at
        the suggestion on screen (pre-generation is working there).
        """
        doc = self.documents.get(uri)
        if doc is None or self._closed:
            return
        offset = doc.offset_at(line, character, self.documents.encoding)
        session = self._sessions.get(uri)
        pending = session.pending if session is not None else None
        if pending is not None and pending.anchor <= offset <= pending.anchor + len(pending.text):
            return
        self._schedule_prewarm(uri, offset)

    def _schedule_prewarm(self, uri: str, offset: int | None = None) -> None:
        """Pre-warm ``uri`` at ``offset`` (``None``: as opened) once the user pauses."""
        self._bind_loop()
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed or not self.settings.prefix_reuse:
            return
        self._abandon_background()
        self._background_timer = loop.call_later(PREWARM_IDLE_S, self._start_prewarm, uri, offset)

    def _schedule_pregeneration(self, uri: str) -> None:
        """Continue the suggestion shown for ``uri`` as soon as the worker is free."""
        self._bind_loop()
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed:
            return
        self._abandon_background()
        self._background_timer = loop.call_soon(self._start_pregeneration, uri)

    def _abandon_background(self) -> None:
        """A request or an edit came: stop any background job (between two steps of it)."""
        if self._background_timer is not None:
            self._background_timer.cancel()
            self._background_timer = None
        if self._background_job is not None:
            self._background_job.cancel()
            self._background_job = None

    def _idle(self) -> bool:
        """No request is queued or running (background work has the lowest priority)."""
        return not self._closed and not (
            self._busy or any(s.job is not None for s in self._sessions.values())
        )

    def _background_session(self, uri: str) -> tuple[Document, _Session] | None:
        doc = self.documents.get(uri)
        if doc is None or not self._idle():
            return None
        if self.settings.backend:  # no local model to pre-warm or pre-generate with
            return None
        if self.settings.languages and doc.language not in self.settings.languages:
            return None
        return doc, self._sessions.setdefault(uri, _Session())

    def _start_prewarm(self, uri: str, offset: int | None) -> None:
        self._background_timer = None
        found = self._background_session(uri)
        if found is None:
            return
        doc, session = found
        at = -1 if offset is None else max(0, min(offset, len(doc.text)))
        job = self._job(session, uri, doc.text, at, self.settings, time.perf_counter())
        self._background_job = job
        with contextlib.suppress(RuntimeError):  # shut down
            self._executor.submit(self._prewarm, job)

    def _start_pregeneration(self, uri: str) -> None:
        self._background_timer = None
        found = self._background_session(uri)
        if found is None:
            return
        doc, session = found
        pending = session.pending
        if pending is None or pending.continuation is None:
            return
        base = pending.continuation.tokens
        job = self._job(session, uri, doc.text, pending.anchor, self.settings, time.perf_counter())
        self._background_job = job
        with contextlib.suppress(RuntimeError):  # shut down
            future = self._executor.submit(self._pregenerate, job, pending)
            self._pregeneration = (future, session, base)
            future.add_done_callback(
                lambda f: self._call_soon(self._pregenerated, session, base, f)
            )

    async def _settle_pregeneration(self) -> None:
        """A request came: wait for the pre-generation it stopped, and keep what it wrote.

        The request would wait for the worker anyway (the pass in progress
        finishes first); once the words are in, it can be answered from them.
        """
        running, self._pregeneration = self._pregeneration, None
        if running is None:
            return
        future, session, base = running
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(future)
        self._pregenerated(session, base, future)

    def _pregenerated(
        self,
        session: _Session,
        base: tuple[int, ...],
        future: concurrent.futures.Future[Extension],
    ) -> None:
        """Loop: add what pre-generation wrote after ``base`` to the pending suggestion (once)."""
        if not future.done():
            return
        ext = None if future.cancelled() or future.exception() else future.result()
        now = session.pending
        if ext is None or not (ext.tokens or ext.ended) or now is None or now.continuation is None:
            return
        if now.continuation.tokens is not base:
            return  # added already, or a suggestion from another generation is on screen
        self.stats.pregenerated_tokens += len(ext.tokens)
        extended = now.continuation.extended(ext)
        session.pending = now.with_continuation(extended)
        if ext.tokens:
            session.remember(extended.tokens[-len(ext.tokens) - GENERATED_CONTEXT_TOKENS :])

    async def _submit(self, job: _Job) -> Outcome:
        self._abandon_background()  # a pre-warm queued meanwhile must not delay a request
        try:
            future = self._executor.submit(self._run, job)
        except RuntimeError:  # shut down
            return Outcome(cancelled=True)
        self._busy += 1
        if self._busy == 1 and self._state != ERROR:
            self._set_state(BUSY, "")
        try:
            return await asyncio.wrap_future(future)
        finally:
            self._busy -= 1
            if self._busy == 0 and self._state == BUSY:
                self._set_state(IDLE, "")

    def _suggestion(
        self,
        suggestion_id: str,
        doc: Document,
        text: str,
        offset: int,
        ctx: CursorContext,
        suggestion: str,
        source: str,
        latency: float,
        stats: GenerationStats | None,
    ) -> Suggestion:
        # Positions are computed on the text the request saw, not a later edit
        # (the document itself while unchanged: its line index is cached).
        view = doc if doc.text is text else Document(doc.uri, doc.language, doc.version, text)
        enc = self.documents.encoding
        line, character = view.position_at(offset, enc)
        line_start, line_end = view.line_bounds(line)
        line_text = text[line_start:line_end]
        word = ctx.word_prefix
        return Suggestion(
            id=suggestion_id,
            uri=doc.uri,
            text=suggestion,
            line=line,
            character=character,
            line_end_character=index_to_column(line_text, len(line_text), enc),
            line_suffix=ctx.line_suffix,
            word_prefix=word,
            word_start_character=index_to_column(line_text, offset - line_start - len(word), enc),
            mode=ctx.mode,
            source=source,
            latency_ms=latency,
            stats=stats,
        )

    # -- loop plumbing --------------------------------------------------------
    def _bind_loop(self) -> None:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the event loop (from any thread); dropped once the loop is gone."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def _set_state(self, state: str, message: str) -> None:
        self._state, self._message = state, message
        self._emit_status()

    def _emit_status(self) -> None:
        if self._on_status is not None:
            try:
                self._on_status(self.status())
            except Exception:  # a broken transport must not break completion
                log.exception("status notification failed")

    def _message_user(self, level: str, text: str) -> None:
        if self._on_message is not None:
            try:
                self._on_message(level, text)
            except Exception:
                log.exception("message to the user failed")

    def _model_failed(self, message: str) -> None:
        self._set_state(ERROR, message)
        self._message_user("error", message)

    def _model_loaded(self, name: str, warnings: list[str]) -> None:
        self._model_name = name
        if self._state == ERROR:
            self._set_state(BUSY if self._busy else IDLE, "")
        for w in warnings:
            self._message_user("warning", w)
        self._emit_status()

    # -- worker thread ------------------------------------------------------
    def _announce(self, message: str) -> None:
        log.info("%s", message)
        self._call_soon(self._message_user, "info", message)

    def _warm(self) -> str | None:
        # Cleared before the settings are read: a change after this queues another warm-up.
        self._warm_queued = False
        if self._closed:
            return None
        if self.settings.backend:  # a remote engine: nothing to load (completion/remote.py)
            return self._host.warm_remote(self.settings)
        try:
            engine = self._host.engine_for(self.settings)
            if self.settings.token_healing:
                vocab_index(engine.model)  # built once per model: no request pays for it
        except ModelError as exc:
            return str(exc)
        except Exception as exc:  # a bug must not leave the state "busy" forever
            log.exception("loading the engine failed")
            return f"structspec: loading the engine failed: {exc}"
        return None

    def _prewarm(self, job: _Job) -> None:
        """Worker: evaluate the job's prompt into a KV slot until done or abandoned."""
        inputs, host = job.input, self._host
        if job.cancelled() or self._closed or not inputs.settings.prefix_reuse:
            return
        try:
            model = host.engine_for(inputs.settings).model
            if inputs.offset < 0:
                room = window_budget(
                    prompt_room(model, inputs.settings.max_tokens), inputs.settings.window_tokens
                )
                inputs = replace(inputs, offset=opening_offset(model, inputs.text, room))
            assert host.prompts is not None
            prompt = build_prompt(host.prompts, host.snippets, inputs, job.session.cut)
            job.session.cut = prompt.cut
            with interrupted_by(model, job.interrupt):
                if prefill_in_chunks(model, prompt.tokens[:-1], job.cancelled):
                    self.stats.prewarmed += 1
        except Exception:  # a failed pre-warm costs nothing but its time
            log.debug("pre-warm of %s failed", inputs.uri, exc_info=True)

    def _pregenerate(self, job: _Job, pending: PendingSuggestion) -> Extension:
        """Worker: what the model writes after ``pending``'s continuation, until abandoned."""
        inputs, host = job.input, self._host
        cont = pending.continuation
        if job.cancelled() or self._closed or cont is None:
            return Extension((), b"")
        try:
            engine = host.engine_for(inputs.settings)
            with interrupted_by(engine.model, job.interrupt):
                ext, _ = continue_generation(
                    engine, host.corpus, inputs, cont, len(pending.text), cancelled=job.cancelled
                )
        except Exception:  # a failed pre-generation costs nothing but its time
            log.debug("pre-generation for %s failed", inputs.uri, exc_info=True)
            return Extension((), b"")
        return ext

    def _run(self, job: _Job) -> Outcome:
        if job.cancelled() or self._closed:
            return Outcome(cancelled=True)
        host = self._host
        if job.input.settings.backend:  # completion/remote.py
            return host.complete_remotely(job.input, cancelled=job.cancelled, progress=job.wrote)
        try:
            engine = host.engine_for(job.input.settings)
        except ModelError:
            return Outcome()
        except Exception:
            log.exception("loading the engine failed")
            return Outcome()
        assert host.prompts is not None
        try:
            outcome = run_completion(
                engine,
                host.prompts,
                host.corpus,
                host.snippets,
                job.input,
                cut_hint=job.session.cut,
                cancelled=job.cancelled,
                progress=job.wrote,
            )
        except (ModelError, EngineError) as exc:
            log.warning("completion for %s failed: %s", job.input.uri, exc)
            return Outcome()
        except Exception:
            log.exception("completion for %s failed", job.input.uri)
            return Outcome()
        if outcome.cut is not None:
            job.session.cut = outcome.cut
        return outcome

"""Background work on the worker: pre-warm and pre-generation, only while no request waits.

One background job at a time, only when no request is queued or running,
abandoned by any request or edit (``abandon``): part-way through the decode it
is in when the model can be interrupted (``model.extras``), else between two
prefill chunks or two verification passes.

- *pre-warm*: an opened document, one the user stopped editing for
  ``PREWARM_IDLE_S``, or the place the editor says the cursor moved to, is
  prefilled into a KV slot (``prewarm``);
- *pre-generation*: once a suggestion is shown, the model keeps writing past
  its end (``generate.continue_generation``), so that accepting it (whole, a
  line, a word) and going on is answered from what is written
  (``cache.PendingSuggestion.continuation_at``) without the model. A request
  that stops a pre-generation waits for it and keeps what it wrote
  (``settle_pregeneration``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from structspec.completion.cache import Extension, PendingSuggestion
from structspec.completion.documents import Document, DocumentStore
from structspec.completion.generate import (
    GENERATED_CONTEXT_TOKENS,
    build_prompt,
    continue_generation,
)
from structspec.completion.jobs import Job, JobMaker, Session
from structspec.completion.prewarm import PREWARM_IDLE_S, opening_offset, prefill_in_chunks
from structspec.completion.prompt import prompt_room, window_budget
from structspec.completion.stats import AcceptanceStats
from structspec.completion.status import StatusBoard
from structspec.completion.worker import Worker
from structspec.config import Settings
from structspec.model.extras import interrupted_by

log = logging.getLogger(__name__)


class Background:
    """Schedules pre-warm and pre-generation on the worker, and abandons them for requests."""

    def __init__(
        self,
        worker: Worker,
        documents: DocumentStore,
        sessions: dict[str, Session],
        stats: AcceptanceStats,
        status: StatusBoard,
        settings: Callable[[], Settings],
        make_job: JobMaker,
    ) -> None:
        self._worker = worker
        self._documents = documents
        self._sessions = sessions
        self._stats = stats
        self._status = status
        self._settings = settings
        self._make_job = make_job
        self._timer: asyncio.Handle | None = None
        self._job: Job | None = None
        #: The pre-generation on the worker: its future, session and the tokens it extends.
        self._pregeneration: (
            tuple[concurrent.futures.Future[Extension], Session, tuple[int, ...]] | None
        ) = None

    # -- the loop's side ------------------------------------------------------
    def schedule_prewarm(self, uri: str, offset: int | None = None) -> None:
        """Pre-warm ``uri`` at ``offset`` (``None``: as opened) once the user pauses."""
        self._worker.bind_loop()
        loop = self._worker.loop
        if loop is None or loop.is_closed() or self._worker.closed:
            return
        if not self._settings().prefix_reuse:
            return
        self.abandon()
        self._timer = loop.call_later(PREWARM_IDLE_S, self._start_prewarm, uri, offset)

    def schedule_pregeneration(self, uri: str) -> None:
        """Continue the suggestion shown for ``uri`` as soon as the worker is free."""
        self._worker.bind_loop()
        loop = self._worker.loop
        if loop is None or loop.is_closed() or self._worker.closed:
            return
        self.abandon()
        self._timer = loop.call_soon(self._start_pregeneration, uri)

    def abandon(self) -> None:
        """A request or an edit came: stop any background job (between two steps of it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._job is not None:
            self._job.cancel()
            self._job = None

    async def settle_pregeneration(self) -> None:
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

    def _idle(self) -> bool:
        """No request is queued or running (background work has the lowest priority)."""
        return not self._worker.closed and not (
            self._status.busy or any(s.job is not None for s in self._sessions.values())
        )

    def _session(self, uri: str) -> tuple[Document, Session] | None:
        doc = self._documents.get(uri)
        if doc is None or not self._idle():
            return None
        settings = self._settings()
        if settings.backend:  # no local model to pre-warm or pre-generate with
            return None
        languages = settings.languages
        if languages and doc.language not in languages:
            return None
        return doc, self._sessions.setdefault(uri, Session())

    def _start_prewarm(self, uri: str, offset: int | None) -> None:
        self._timer = None
        found = self._session(uri)
        if found is None:
            return
        doc, session = found
        at = -1 if offset is None else max(0, min(offset, len(doc.text)))
        job = self._make_job(session, uri, doc.text, at, self._settings(), time.perf_counter())
        self._job = job
        self._worker.submit(self._prewarm, job)

    def _start_pregeneration(self, uri: str) -> None:
        self._timer = None
        found = self._session(uri)
        if found is None:
            return
        doc, session = found
        pending = session.pending
        if pending is None or pending.continuation is None:
            return
        base = pending.continuation.tokens
        settings, t0 = self._settings(), time.perf_counter()
        job = self._make_job(session, uri, doc.text, pending.anchor, settings, t0)
        self._job = job
        future = self._worker.submit(self._pregenerate, job, pending)
        if future is None:  # shut down
            return
        self._pregeneration = (future, session, base)
        future.add_done_callback(
            lambda f: self._worker.call_soon(self._pregenerated, session, base, f)
        )

    def _pregenerated(
        self,
        session: Session,
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
        self._stats.pregenerated_tokens += len(ext.tokens)
        extended = now.continuation.extended(ext)
        session.pending = now.with_continuation(extended)
        if ext.tokens:
            session.remember(extended.tokens[-len(ext.tokens) - GENERATED_CONTEXT_TOKENS :])

    # -- worker thread ------------------------------------------------------
    def _prewarm(self, job: Job) -> None:
        """Worker: evaluate the job's prompt into a KV slot until done or abandoned."""
        inputs, host = job.input, self._worker.host
        if job.cancelled() or self._worker.closed or not inputs.settings.prefix_reuse:
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
                    self._stats.prewarmed += 1
        except Exception:  # a failed pre-warm costs nothing but its time
            log.debug("pre-warm of %s failed", inputs.uri, exc_info=True)

    def _pregenerate(self, job: Job, pending: PendingSuggestion) -> Extension:
        """Worker: what the model writes after ``pending``'s continuation, until abandoned."""
        inputs, host = job.input, self._worker.host
        cont = pending.continuation
        if job.cancelled() or self._worker.closed or cont is None:
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

"""Background work on the worker: pre-warm and pre-generation, only while no request waits.

One background job at a time, only when no request is queued or running,
abandoned by any request or edit (``abandon``): part-way through the decode it
is in when the model can be interrupted (``model.extras``), else between two
prefill chunks or two verification passes.

- *pre-warm*: an opened document and the place the editor says the cursor
  rests at (at once), one the user stopped editing for ``PREWARM_IDLE_S``, or
  the place of a request once it is answered (and its pre-generation done,
  after the same pause), is prefilled into a KV slot (``prewarm``). At that
  place the prompt a request would build comes first (a first window at a new
  place, ``prompt.choose_window``), and what the draft sources read for it is
  made ready (``generate.prepare_drafts``: a request tokenizes and indexes
  only a slice of a new corpus); then the full window there, which the
  document's kept cut moves to once it is cached (the window grows while the
  user reads). Then where the user is likely to go without telling us (no
  ``structspec/didMoveCursor``: Helix, Emacs, Sublime): a document that does
  not fit its window gets the full windows of its other latest places
  (``jobs.Session.places``); then a document is evaluated from its start to
  the end of what its window holds from there (its end when it fits; for a
  longer one, when a KV slot is spare for it), a prefix every cursor there
  shares;
- *pre-generation*: once a suggestion is shown, the model keeps writing past
  its end (``generate.continue_generation``), so that accepting it (whole, a
  line, a word) and going on is answered from what is written
  (``cache.PendingSuggestion.continuation_at``) without the model. A request
  that stops a pre-generation waits for it and keeps what it wrote
  (``settle_pregeneration``). Through a remote engine (``backend``) it is one
  longer request at the suggestion's place once the user paused for
  ``PREWARM_IDLE_S`` (``remote.RemoteCompleter.pregenerate``), its text the
  continuation; there is no pre-warm then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from structspec.completion.cache import Continuation, Extension, PendingSuggestion
from structspec.completion.documents import Document, DocumentStore
from structspec.completion.generate import (
    GENERATED_CONTEXT_TOKENS,
    CompletionInput,
    build_prompt,
    continue_generation,
    pregeneration_wanted,
    prepare_drafts,
)
from structspec.completion.host import KV_SLOTS
from structspec.completion.jobs import Job, JobMaker, Session
from structspec.completion.prewarm import (
    PLACE_CHARS,
    PREWARM_IDLE_S,
    opening_offset,
    prefill_in_chunks,
    reusable_prefix,
)
from structspec.completion.prompt import Prompt, grows, prompt_room, top_tokens, window_budget
from structspec.completion.stats import AcceptanceStats
from structspec.completion.status import StatusBoard
from structspec.completion.worker import Worker
from structspec.config import Settings
from structspec.model.extras import interrupted_by, kv_slots

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
        #: When a pre-warm that was not ``rested`` was last scheduled (``time.monotonic``).
        self._typed_at = float("-inf")
        #: The suggestion (id, anchor) a remote pre-generation last started for (one each).
        self._remote_tried: tuple[str, int] | None = None
        #: The pre-generation on the worker: its future, and what keeps its result (loop).
        self._pregeneration: tuple[concurrent.futures.Future[Any], Callable[[], None]] | None = None

    # -- the loop's side ------------------------------------------------------
    def schedule_prewarm(
        self, uri: str, offset: int | None = None, *, rested: bool = False
    ) -> None:
        """Pre-warm ``uri`` at ``offset`` (``None``: as opened) once the user pauses.

        ``rested``: the user is not typing there, so the work starts at once
        instead of after ``PREWARM_IDLE_S``: the editor said the cursor rests
        at ``offset`` (a cursor report or a highlight request, each sent after
        the editor's own pause: 250 ms in the VS Code client, 0.5 s in Emacs),
        or the document has just opened. Every moment waited there is
        evaluation that the first suggestion pays for when the user types a
        second after arriving. Within ``PREWARM_IDLE_S`` of a pre-warm that
        was not ``rested`` (an edit's, or one after a request and its
        pre-generation: typing goes on, and its requests abandon the work) it
        still waits for the pause.
        """
        self._worker.bind_loop()
        loop = self._worker.loop
        if loop is None or loop.is_closed() or self._worker.closed:
            return
        settings = self._settings()
        if not settings.prefix_reuse or settings.backend:  # a remote engine: nothing to warm
            return  # (and a remote pre-generation goes on until a request stops it)
        self.abandon()
        now = time.monotonic()
        at_once = rested and now - self._typed_at >= PREWARM_IDLE_S
        if not rested:
            self._typed_at = now
        delay = 0.0 if at_once else PREWARM_IDLE_S
        self._timer = loop.call_later(delay, self._start_prewarm, uri, offset)

    def resume(self, uri: str) -> None:
        """A request for ``uri`` ended: warm where the user is, unless other work is scheduled.

        After a suggestion, pre-generation is scheduled; it resumes pre-warm
        itself when it ends (``_pregeneration_ended``).
        """
        if self._timer is None and self._job is None:
            self._warm_latest(uri)

    def _warm_latest(self, uri: str) -> None:
        """Pre-warm ``uri`` at its latest place of an edit or a request (if it has one)."""
        session = self._sessions.get(uri)
        latest = session.places.latest if session is not None else None
        if latest is not None:
            self.schedule_prewarm(uri, latest)

    def schedule_pregeneration(self, uri: str) -> None:
        """Continue the suggestion shown for ``uri`` as soon as the worker is free.

        Through a remote engine, once the user paused for ``PREWARM_IDLE_S``:
        a longer request a keystroke cancels is one more request for the
        server, where the local model's pre-generation costs nothing the
        next request waits for.
        """
        self._worker.bind_loop()
        loop = self._worker.loop
        if loop is None or loop.is_closed() or self._worker.closed:
            return
        self.abandon()
        if self._settings().backend:
            self._timer = loop.call_later(PREWARM_IDLE_S, self._start_pregeneration, uri)
        else:
            self._timer = loop.call_soon(self._start_pregeneration, uri)

    def pregenerate_meanwhile(self, uri: str) -> None:
        """A keystroke typed through the suggestion on screen: pre-generation goes on.

        The local model's resumes from what it wrote before the keystroke
        stopped it (it ends by itself once ``PREGENERATE_LINES`` lines are
        written), so a keystroke along the suggestion finds its line written
        (``request``: a suggestion cut short grows). Through a remote engine,
        one pre-generation per suggestion: a running one goes on, and one that
        ended (kept or not) is not asked again.
        """
        if not self._settings().backend or (self._job is None and self._timer is None):
            self.schedule_pregeneration(uri)

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
        future, keep = running
        with contextlib.suppress(Exception):
            await asyncio.wrap_future(future)
        keep()

    def _idle(self) -> bool:
        """No request is queued or running (background work has the lowest priority)."""
        return not self._worker.closed and not (
            self._status.busy or any(s.job is not None for s in self._sessions.values())
        )

    def _session(self, uri: str, remote: bool = False) -> tuple[Document, Session] | None:
        """The document and session for background work; ``remote``: the work can be remote."""
        doc = self._documents.get(uri)
        if doc is None or not self._idle():
            return None
        settings = self._settings()
        if settings.backend and not remote:  # no local model to pre-warm with
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
        elsewhere: tuple[int, ...] = ()
        if at >= 0:
            elsewhere = tuple(
                p for p in session.places if abs(p - at) >= PLACE_CHARS and p <= len(doc.text)
            )
        job = self._make_job(session, uri, doc.text, at, self._settings(), time.perf_counter())
        self._job = job
        self._worker.submit(self._prewarm, job, elsewhere)

    def _start_pregeneration(self, uri: str) -> None:
        self._timer = None
        found = self._session(uri, remote=True)
        if found is None:
            return
        doc, session = found
        pending = session.pending
        settings, t0 = self._settings(), time.perf_counter()
        remote = bool(settings.backend)
        if remote:
            wanted = remote_wanted(pending, self._remote_tried)
        else:  # a keystroke typed through a suggestion written out asks no worker
            wanted = (
                pending is not None
                and pending.continuation is not None
                and pregeneration_wanted(pending.continuation, len(pending.text))
            )
        if pending is None or not wanted:
            self._warm_latest(uri)  # nothing to write past: warm instead
            return
        job = self._make_job(session, uri, doc.text, pending.anchor, settings, t0)
        self._job = job
        future: concurrent.futures.Future[Any] | None
        if remote:
            self._remote_tried = (pending.id, pending.anchor)
            future = self._worker.submit(self._pregenerate_remotely, job)
        else:
            future = self._worker.submit(self._pregenerate, job, pending)
        if future is None:  # shut down
            return
        if remote:
            keep = partial(self._remotely_pregenerated, session, pending, future)
        else:
            assert pending.continuation is not None
            keep = partial(self._pregenerated, session, pending.continuation.tokens, future)
        self._pregeneration = (future, keep)
        future.add_done_callback(lambda f: self._worker.call_soon(keep))
        future.add_done_callback(
            lambda f: self._worker.call_soon(self._pregeneration_ended, uri, job)
        )

    def _pregeneration_ended(self, uri: str, job: Job) -> None:
        """Loop: a pre-generation nothing abandoned ended: pre-warm goes on at the place."""
        if self._job is job and not job.cancelled():
            self._job = None
            self._warm_latest(uri)

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

    def _remotely_pregenerated(
        self,
        session: Session,
        pending: PendingSuggestion,
        future: concurrent.futures.Future[Continuation | None],
    ) -> None:
        """Loop: what a remote pre-generation wrote becomes ``pending``'s continuation (once)."""
        if not future.done() or future.cancelled() or future.exception():
            return
        cont = future.result()
        if cont is not None and session.pending is pending:  # else the user moved on
            session.pending = pending.with_continuation(cont)

    # -- worker thread ------------------------------------------------------
    def _prewarm(self, job: Job, elsewhere: tuple[int, ...]) -> None:
        """Worker: warm the job's place, then ``elsewhere``, then the document's top.

        The job's place gets the prompt a request there would build now. Then
        the full windows of the places ``elsewhere`` (none when the top holds
        the whole document). Last the *top*: the document from its start to
        ``opening_offset`` of ``prompt.top_tokens`` (the whole document when it
        fits), when it holds this place, this place's window starts at the top,
        or a KV slot is spare for it: a cursor anywhere in it, at a jump
        without a cursor report, finds its window cached
        (``prompt.choose_window``). A place the top holds has its window grown
        by it (the kept cut moves to the top's start once it is cached);
        another place's first window grows to the full window there
        (``prompt.grows``) before the places elsewhere, and the kept cut moves
        to it. An opened document (an offset below zero: nobody asked there
        yet) gets its top only, and keeps the cut at its start.
        """
        inputs, host = job.input, self._worker.host
        if job.cancelled() or self._worker.closed or not inputs.settings.prefix_reuse:
            return
        try:
            engine = host.engine_for(inputs.settings)
            model = engine.model
            assert host.prompts is not None
            prompts, snippets, session = host.prompts, host.snippets, job.session
            settings = inputs.settings
            room = prompt_room(model, settings.max_tokens)
            budget = window_budget(room, settings.window_tokens)
            top_room = top_tokens(prompts.rate.tokens_per_s, room, budget)
            opening = opening_offset(model, inputs.text, top_room)
            opened = inputs.offset < 0
            if opened or opening == len(inputs.text):  # the top holds every place
                elsewhere = ()

            def warm(prompt: Prompt, drafts: CompletionInput | None = None) -> bool:
                """Evaluate ``prompt``, then what the draft sources read at ``drafts``' place.

                The status says warming while a cold prompt is (and its drafts are)
                made ready; the drafts alone say nothing (no suggestion waits on them).
                """
                tokens = prompt.tokens[:-1]
                cold = reusable_prefix(model, tokens) < len(tokens)  # else nothing to say
                warming = self._worker.warming(inputs.uri) if cold else contextlib.nullcontext()
                with warming:
                    with interrupted_by(model, job.interrupt):
                        if not prefill_in_chunks(model, tokens, job.cancelled, rate=prompts.rate):
                            return False
                    if drafts is not None:
                        ready(prompt, drafts)
                return True

            def ready(prompt: Prompt, there: CompletionInput) -> None:
                try:  # drafts only: a failure here costs the pre-warm nothing else
                    prepare_drafts(engine, host.corpus, there, prompt, job.cancelled)
                except Exception:
                    log.debug("preparing the drafts of %s failed", there.uri, exc_info=True)

            covered = inputs.offset <= opening  # the top holds this place (an opened one's too)
            if opened:
                session.cut = 0
            else:
                prompt = build_prompt(prompts, snippets, inputs, session.cut)
                session.cut = prompt.cut
                if not warm(prompt, inputs):
                    return
                full = None if covered else build_prompt(prompts, snippets, inputs, None, full=True)
                if full is not None and grows(prompt, full):  # (else the top grows it)
                    if not warm(full, inputs):
                        return
                    session.cut = full.cut  # typing on here now extends the full window
                self._stats.prewarmed += 1
            for at in elsewhere:
                there = replace(inputs, offset=at)
                if not warm(build_prompt(prompts, snippets, there, None, full=True)):
                    return
                self._stats.prewarmed += 1
            # The top, when it holds this place, when this place's window starts at
            # the top (a prefix of it), or when a KV slot is spare for it (one holds
            # this place, one each of the places elsewhere).
            if (
                covered
                or session.cut == 0
                or (kv_slots(model) is not None and 1 + len(elsewhere) < KV_SLOTS)
            ):
                there = replace(inputs, offset=opening)
                top = build_prompt(
                    prompts, snippets, there, 0, full=True, window_tokens=top_room, top=True
                )
                if not warm(top, there if opened else None):
                    return
                if covered:
                    session.cut = 0  # typing on here now extends the top
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

    def _pregenerate_remotely(self, job: Job) -> Continuation | None:
        """Worker: the remote engine's longer answer at the job's place, until abandoned."""
        remote = self._worker.host.remote_for(job.input.settings)
        if job.cancelled() or self._worker.closed or remote is None:
            return None
        try:
            return remote.pregenerate(job.input, cancelled=job.cancelled)
        except Exception:  # a failed pre-generation costs nothing but its time
            log.debug("pre-generation for %s failed", job.input.uri, exc_info=True)
            return None


def remote_wanted(pending: PendingSuggestion | None, tried: tuple[str, int] | None) -> bool:
    """A remote pre-generation is worth a request at ``pending``'s place.

    When none was started for that suggestion yet (``tried``: the id and
    anchor of the last one started for; its continuation, once kept, makes
    another ``PendingSuggestion``), and nothing written past the suggestion is
    known yet, or what is known has no complete line beyond it and the
    server had not ended it.
    """
    if pending is None or (pending.id, pending.anchor) == tried:
        return False
    cont = pending.continuation
    return cont is None or (not cont.ended and cont.lines_after(len(pending.text)) == 0)

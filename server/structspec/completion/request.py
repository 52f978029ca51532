"""A completion request on the event loop, from the keystroke to the suggestion.

A request goes, first match wins:

1. *shared*: the job in flight is for the same text and cursor (an editor
   asking for inline and menu completion at once): wait for it;
2. *adopted*: the edits since the job in flight was asked typed, at its
   cursor, the start of what it has written (``jobs.Job.agrees``): wait for it
   and type through its answer. A user who types faster than the model
   answers, typing what the model is writing, sees each answer a pass after
   it is done instead of never;
3. *from the pending suggestion*: typing through the suggestion on screen, or
   past it along what pre-generation wrote (``cache``), without the model; a
   suggestion cut short (at the generation budget, a block's first line) is
   answered longer, along it, once pre-generation has written more;
4. *a new job*: any other job for the document is cancelled (its request
   answers ``None``); debounce (``debounce``), then the worker
   (``worker.Worker.run``, ``generate.run_completion``), then the answer is
   recorded as the document's pending suggestion and pre-generation starts.

Every request first abandons background work and keeps what a stopped
pre-generation wrote (``background``), except one that types through the
suggestion on screen from a remote engine: the longer request writing past
it goes on (``remote``). A cancelled request stops its job,
``jobs.ADOPT_GRACE_S`` after its last request left.

A request answered with nothing has a reason (``types.EmptyReason``): it is
in the answer's log line and counted in the status (``emptyReasons``).

A request naming the completion menu's selected item (``types.SelectedItem``)
is asked in the document's text with that item applied (``Asked``): as if the
user had accepted it. Its answer and pending suggestion are for that text;
accepting the item makes it the document's, and the next request types
through the suggestion. Only an edit of the document itself makes it stale.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass

from structspec.completion.background import Background
from structspec.completion.cache import PendingSuggestion
from structspec.completion.debounce import AdaptiveDebounce
from structspec.completion.documents import Document, DocumentStore, index_to_column, uri_path
from structspec.completion.generate import Outcome, why_empty
from structspec.completion.jobs import Job, JobMaker, Result, Session, edited, job_done, wait
from structspec.completion.notebooks import NotebookStore
from structspec.completion.stats import AcceptanceStats
from structspec.completion.status import StatusBoard
from structspec.completion.suggest import CursorContext, continuation_answer
from structspec.completion.types import CompletionRequest, EmptyReason, Suggestion
from structspec.completion.worker import Worker
from structspec.config import Settings
from structspec.engine.stats import GenerationStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Asked:
    """What a request asks about, read once it no longer waits.

    ``base`` is the document's text then; ``text`` and ``offset`` are the text
    the suggestion is for and its cursor: the base, or, when the request names
    the menu's selected item, the base with ``item`` applied (the base's
    offsets it replaces, clamped as any position is, and its text).
    ``t0``: when the request came.
    """

    doc: Document
    base: str
    text: str
    offset: int
    ctx: CursorContext
    t0: float
    item: tuple[int, int, str] | None = None

    @classmethod
    def read(cls, doc: Document, request: CompletionRequest, encoding: str, t0: float) -> Asked:
        base, selected = doc.text, request.selected
        if selected is None:
            offset = doc.offset_at(request.line, request.character, encoding)
            return cls(doc, base, base, offset, CursorContext.at(base, offset), t0)
        start = doc.offset_at(request.line, selected.start, encoding)
        end = max(start, doc.offset_at(request.line, selected.end, encoding))
        text, offset = base[:start] + selected.text + base[end:], start + len(selected.text)
        item = (start, end, selected.text)
        return cls(doc, base, text, offset, CursorContext.at(text, offset), t0, item)

    def stale(self) -> bool:
        """The document changed since: an answer for ``text`` is no longer wanted."""
        return edited(self.doc, self.base)


class RequestFlow:
    """Answers completion requests (see the module docstring); one per service."""

    def __init__(
        self,
        worker: Worker,
        documents: DocumentStore,
        sessions: dict[str, Session],
        stats: AcceptanceStats,
        debounce: AdaptiveDebounce,
        status: StatusBoard,
        background: Background,
        settings: Callable[[], Settings],
        make_job: JobMaker,
        notebooks: NotebookStore,
    ) -> None:
        self._worker = worker
        self._documents = documents
        self._notebooks = notebooks
        self._sessions = sessions
        self._stats = stats
        self._debounce = debounce
        self._status = status
        self._background = background
        self._settings = settings
        self._make_job = make_job
        self._ids = itertools.count(1)
        self._arrivals = itertools.count()
        #: Per document, the newest request waiting for the pre-generation it stopped.
        self._waiting: dict[str, int] = {}

    async def complete(self, request: CompletionRequest) -> Suggestion | None:
        """A suggestion at the request's cursor, or ``None`` (``CompletionService.complete``).

        A notebook cell's request is asked in its notebook text and its
        suggestion moved back to the cell (``notebooks``). The cell is placed
        in that text once the request no longer waits, as its text is read:
        an edit of another cell meanwhile (a cell added above) moves it.
        """
        t0 = time.perf_counter()
        cell = request
        if (place := self._notebooks.place(cell.uri, cell.line, cell.character)) is not None:
            request = place.request(cell)  # the notebook text: the document the waits are for
        if not self._types_through_remotely(request):
            self._background.abandon()
            ticket = next(self._arrivals)
            self._waiting[request.uri] = ticket
            try:
                await self._background.settle_pregeneration()
            finally:
                newest = self._waiting.get(request.uri)
                if newest == ticket:  # also when cancelled meanwhile: one entry per
                    del self._waiting[request.uri]  # document ever seen would stay
            if newest != ticket:
                # A newer request for the document came meanwhile (a client that does
                # not cancel the requests it supersedes) and went on: it answers, and
                # this one must not cancel its job.
                self._empty(request, t0, EmptyReason.CANCELLED)
                return None
        if place is None:
            return await self._respond(request, t0)
        place = self._notebooks.place(cell.uri, cell.line, cell.character)
        if place is None:  # the cell was closed meanwhile
            self._empty(request, t0, EmptyReason.NOT_SERVED)
            return None
        suggestion = await self._respond(place.request(cell), t0)
        return None if suggestion is None else place.suggestion(suggestion, cell)

    async def _respond(self, request: CompletionRequest, t0: float) -> Suggestion | None:
        """``complete`` from the moment the request no longer waits for background work."""
        stats = self._stats
        stats.requests += 1
        doc = self._documents.get(request.uri)
        settings = self._settings()
        if self._worker.closed:
            self._empty(request, t0, EmptyReason.CANCELLED)
            return None
        if doc is None or (settings.languages and doc.language not in settings.languages):
            self._empty(request, t0, EmptyReason.NOT_SERVED)
            return None
        session = self._sessions.setdefault(request.uri, Session())
        asked = Asked.read(doc, request, self._documents.encoding, t0)
        text, offset = asked.text, asked.offset

        job, task = session.job, session.task
        shared = (  # an equal text: the same menu item over the word typed on (Asked)
            job is not None
            and task is not None
            and not job.cancelled()
            and job.input.offset == offset
            and (job.input.text is text or job.input.text == text)
        )
        if not shared:
            if (
                job is not None
                and task is not None
                and job.input.settings is settings
                and job.agrees(text, offset)
            ):
                served, suggestion = await self._adopt(session, job, task, asked)
                if served:
                    return suggestion
                if asked.stale():  # edited meanwhile: a newer request answers
                    self._empty(request, t0, EmptyReason.STALE)
                    return None
                job = session.job
            if job is not None:
                job.cancel()
                session.job = session.task = None
            if session.pending is not None:
                served, suggestion = self._from_pending(session, asked)
                if served:
                    return suggestion
            job = self._make_job(session, request.uri, text, offset, settings, t0, asked.ctx)
            task = asyncio.ensure_future(self._execute(job, request.invoked))
            task.add_done_callback(functools.partial(job_done, job))
            session.job, session.task = job, task
        assert job is not None and task is not None
        return await self._answer(request, job, task, asked)

    def _types_through_remotely(self, request: CompletionRequest) -> bool:
        """The request types through the suggestion on screen, from a remote engine.

        It needs neither the worker nor the server, so a remote pre-generation
        writing past that suggestion goes on (``background``).
        """
        doc = self._documents.get(request.uri)
        session = self._sessions.get(request.uri)
        if not self._settings().backend or doc is None or session is None:
            return False
        if session.pending is None or session.job is not None:
            return False
        asked = Asked.read(doc, request, self._documents.encoding, 0.0)
        return session.pending.rest_at(asked.text, asked.offset) is not None

    async def _answer(
        self,
        request: CompletionRequest,
        job: Job,
        task: asyncio.Future[Result],
        asked: Asked,
    ) -> Suggestion | None:
        """Wait for the request's job and make its outcome the request's suggestion."""
        result = await wait(job, task, self._stats)
        outcome = result.outcome
        reason = _why_empty(result, job, asked)
        if reason is not None:
            self._empty(request, asked.t0, reason, outcome.stats)
            return None
        assert outcome.text is not None and result.id is not None
        latency = (time.perf_counter() - asked.t0) * 1000.0
        self._stats.record_latency(latency)
        _log_answer(request, latency, outcome.stats, "answer")
        self._background.schedule_pregeneration(request.uri)  # the job is done: the worker is free
        return self._suggestion(result.id, asked, outcome.text, "model", latency, outcome.stats)

    async def _adopt(
        self,
        session: Session,
        job: Job,
        task: asyncio.Future[Result],
        asked: Asked,
    ) -> tuple[bool, Suggestion | None]:
        """Wait for ``job`` (the edits since agree with it), then type through its answer.

        Returns ``(served, suggestion)`` as ``_from_pending`` does; not served
        when it answered nothing, or what it answered no longer agrees.
        """
        result = await wait(job, task, self._stats)
        pending = session.pending
        if asked.stale() or pending is None or result.id is None or pending.id != result.id:
            return False, None
        served, answer = self._from_pending(session, asked)
        if served:
            self._stats.served_from_generation_in_flight += 1
            if answer is not None and not self._stats.is_shown(answer.id):
                # Its own request was cancelled before it came: this is its first showing.
                self._stats.record_shown(answer.id, len(pending.text))
            self._background.schedule_pregeneration(asked.doc.uri)
        return served, answer

    def _from_pending(self, session: Session, asked: Asked) -> tuple[bool, Suggestion | None]:
        """Answer from the suggestion on screen or what pre-generation wrote, without the model.

        Returns ``(served, suggestion)``; when not served the pending entry is dropped.
        """
        pending = session.pending
        assert pending is not None
        text, offset, uri = asked.text, asked.offset, asked.doc.uri
        rest = pending.rest_at(text, offset)
        follow = pending.continuation_at(text, offset)
        cont = pending.continuation
        ready, shown = (
            (False, None)
            if follow is None or cont is None
            else continuation_answer(follow, cont.ended, asked.ctx, sees_rest=cont.sees_rest)
        )
        if rest is None and not ready:
            session.pending = None
            return False, None
        self._stats.served_from_cache += 1
        latency = (time.perf_counter() - asked.t0) * 1000.0
        self._stats.record_latency(latency)
        if rest is not None and not (ready and _grows(rest, shown)):
            # Typing through the suggestion on screen.
            self._background.pregenerate_meanwhile(uri)
            return True, self._suggestion(pending.id, asked, rest, "cache", latency, None)
        # Past it, along what the model wrote: a new suggestion, or the model's "nothing".
        # Or along it, where what the model wrote since makes it longer (one cut at the
        # generation budget, the first line of a block): the longer one.
        follow = follow or ""
        assert cont is not None
        self._stats.served_from_pregeneration += 1
        suggestion_id = f"s{next(self._ids)}" if shown is not None else ""
        here = cont.after(len(cont.text) - len(follow))
        session.pending = PendingSuggestion.at(suggestion_id, text, offset, shown or "", here)
        self._background.schedule_pregeneration(uri)
        if shown is None:
            line, newline, _ = follow.partition("\n")
            self._stats.record_empty(why_empty(line, "stop" if newline else ""))
            return True, None
        self._stats.record_shown(suggestion_id, len(shown))
        return True, self._suggestion(suggestion_id, asked, shown, "cache", latency, None)

    async def _execute(self, job: Job, invoked: bool) -> Result:
        """Debounce, generate in the worker, and record the outcome (once per job)."""
        wait_ms = 0.0 if invoked else self._debounce.wait_ms(job.input.settings.debounce_ms)
        if wait_ms > 0:
            await asyncio.sleep(wait_ms / 1000.0)
            if job.cancelled():
                return Result(Outcome(cancelled=True, empty=EmptyReason.CANCELLED))
        result = Result(await self._submit(job))
        outcome = result.outcome
        if outcome.stats is not None and not outcome.cancelled:
            self._debounce.model_answered(outcome.stats.seconds * 1000.0)
        job.session.remember(outcome.generated)
        if outcome.stats is not None and not outcome.cancelled:
            st = outcome.stats
            self._stats.record_generation(st.tokens, st.seconds, st.prefill_ms, st.decode_ms)
            self._stats.record_sources(st.by_source())
        if outcome.text is not None and not job.cancelled():
            result.id = f"s{next(self._ids)}"
            if job.waiters > 0:  # else nobody is shown it (it stays pending, see job_done)
                self._stats.record_shown(result.id, len(outcome.text))
            job.session.pending = PendingSuggestion.at(
                result.id, job.input.text, job.input.offset, outcome.text, outcome.continuation
            )
        elif outcome.unfinished and not job.cancelled():
            # finish that prefill when idle
            self._background.schedule_prewarm(job.input.uri, job.input.offset)
        self._status.emit()
        return result

    async def _submit(self, job: Job) -> Outcome:
        self._background.abandon()  # a pre-warm queued meanwhile must not delay a request
        future = self._worker.submit_request(job)
        if future is None:  # shut down
            return Outcome(cancelled=True, empty=EmptyReason.CANCELLED)
        self._status.request_started()
        try:
            return await asyncio.wrap_future(future)
        finally:
            self._status.request_ended()

    def _empty(
        self,
        request: CompletionRequest,
        t0: float,
        reason: EmptyReason,
        stats: GenerationStats | None = None,
    ) -> None:
        """Answer ``request`` with nothing, for ``reason``: counted and logged."""
        self._stats.record_empty(reason)
        ms = (time.perf_counter() - t0) * 1000.0
        _log_answer(request, ms, stats, f"no suggestion ({reason})")

    def _suggestion(
        self,
        suggestion_id: str,
        asked: Asked,
        suggestion: str,
        source: str,
        latency: float,
        stats: GenerationStats | None,
    ) -> Suggestion:
        """The suggestion in the document's columns (after a menu item: from the item's start)."""
        # Positions are computed on the text the request saw, not a later edit
        # (the document itself while unchanged: its line index is cached).
        doc, base, ctx = asked.doc, asked.base, asked.ctx
        view = doc if doc.text is base else Document(doc.uri, doc.language, doc.version, base)
        enc = self._documents.encoding
        start, end, item = (asked.offset, asked.offset, "") if asked.item is None else asked.item
        line, character = view.position_at(start, enc)
        line_start, line_end = view.line_bounds(line)
        line_text = base[line_start:line_end]
        word = ctx.word_prefix if asked.item is None else ""
        replaces = 0
        if end > start:  # the item replaces text: its columns in the document
            replaces = index_to_column(line_text, end - line_start, enc) - character
        return Suggestion(
            id=suggestion_id,
            uri=doc.uri,
            text=item + suggestion,
            line=line,
            character=character,
            line_end_character=index_to_column(line_text, len(line_text), enc),
            line_suffix=ctx.line_suffix,
            word_prefix=word,
            word_start_character=index_to_column(line_text, start - line_start - len(word), enc),
            mode=ctx.mode,
            source=source,
            latency_ms=latency,
            stats=stats,
            replaces=replaces,
        )


def _grows(rest: str, longer: str | None) -> bool:
    """``longer`` goes on from the whole of ``rest``, the suggestion on screen from the cursor."""
    return longer is not None and len(longer) > len(rest) and longer.startswith(rest)


def _where(request: CompletionRequest) -> str:
    """``file.py:line:character`` of a request, for the log (the line 1-based)."""
    return f"{posixpath.basename(uri_path(request.uri))}:{request.line + 1}:{request.character}"


def _why_empty(result: Result, job: Job, asked: Asked) -> EmptyReason | None:
    """Why a job's ``result`` answers its request with nothing; ``None`` when it answers."""
    outcome = result.outcome
    if outcome.cancelled or job.cancelled():
        return EmptyReason.CANCELLED
    if outcome.text is None:
        return outcome.empty or EmptyReason.ERROR
    if result.id is None:  # cancelled once it was done
        return EmptyReason.CANCELLED
    return EmptyReason.STALE if asked.stale() else None


def _log_answer(
    request: CompletionRequest, ms: float, stats: GenerationStats | None, what: str
) -> None:
    """One log line per answer: where the model's time went (prefill or decode), if it ran."""
    if not log.isEnabledFor(logging.INFO):
        return
    if stats is None:
        log.info("%s at %s in %.0f ms", what, _where(request), ms)
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

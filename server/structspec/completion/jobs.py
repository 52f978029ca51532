"""A generation's job and the per-document session it belongs to, and waiting for a job.

A ``Job`` is one generation's work for the worker thread: its inputs (taken on
the event loop), a cancel flag the worker reads between verification passes,
and the text written so far. Several requests may wait for one job (``wait``):
an editor asking for inline and menu completion at once, or a keystroke that
typed what the job is writing (``Job.agrees``; the request flow then adopts the
job, see ``request``). A job nobody waits for any more goes on for
``ADOPT_GRACE_S`` in case the next keystroke's request agrees with it, and is
then cancelled.

A ``Session`` is what the service keeps per document between requests: the
prompt cut (worker), the suggestion on screen (``cache.PendingSuggestion``),
the job in flight and the document's latest generations, which the draft
sources that read recent suggestions draft from.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from structspec.completion.cache import PendingSuggestion
from structspec.completion.documents import Document
from structspec.completion.generate import CompletionInput, Outcome
from structspec.completion.stats import AcceptanceStats
from structspec.completion.suggest import CursorContext
from structspec.config import Settings
from structspec.model.base import Interrupt

#: Latest generations kept per document for the sources that read recent suggestions.
RECENT_SUGGESTIONS = 4
#: Seconds a generation whose last request was cancelled goes on, in case the
#: next keystroke's request agrees with it (an editor cancels the request on the
#: edit, before it asks again); a request that does not agree stops it at once.
ADOPT_GRACE_S = 0.15


class Job:
    """One generation's work for the worker thread: its inputs, its session and a cancel flag."""

    __slots__ = ("session", "input", "waiters", "_cancelled", "interrupt", "partial")

    def __init__(self, session: Session, inputs: CompletionInput) -> None:
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
class Result:
    """A job's outcome as the loop sees it: the suggestion's id once it is shown."""

    outcome: Outcome
    id: str | None = None


@dataclass
class Session:
    """Per-document state: the prompt cut (worker), the pending suggestion and job (loop).

    ``recent`` holds the document's latest generations (``Outcome.generated``,
    newest first), the cancelled ones too: what the model said a keystroke ago
    is a draft for the next request.
    """

    cut: int | None = None
    pending: PendingSuggestion | None = None
    job: Job | None = None
    task: asyncio.Future[Result] | None = None
    recent: deque[tuple[int, ...]] = field(default_factory=lambda: deque(maxlen=RECENT_SUGGESTIONS))

    def remember(self, generated: tuple[int, ...]) -> None:
        if not generated:
            return
        if generated in self.recent:
            self.recent.remove(generated)
        self.recent.appendleft(generated)


class JobMaker(Protocol):
    """Makes a job for a document's text and cursor (``CompletionService``'s, on the loop)."""

    def __call__(
        self,
        session: Session,
        uri: str,
        text: str,
        offset: int,
        settings: Settings,
        t0: float,
        ctx: CursorContext | None = None,
    ) -> Job: ...


def edited(doc: Document, text: str) -> bool:
    """The document's text is no longer ``text`` (a request's answer for it is stale)."""
    return doc.text is not text and doc.text != text


async def wait(job: Job, task: asyncio.Future[Result], stats: AcceptanceStats) -> Result:
    """Wait for ``job`` as one of its requests; cancelled, stop it once nobody waits."""
    job.waiters += 1
    try:
        result = await asyncio.shield(task)
    except asyncio.CancelledError:
        job.waiters -= 1
        stats.cancelled += 1
        if job.waiters == 0:
            # The next keystroke's request may agree with it (adoption); stop between
            # passes if none has come to wait for it by then.
            asyncio.get_running_loop().call_later(ADOPT_GRACE_S, _cancel_if_orphaned, job)
        raise
    job.waiters -= 1
    return result


def _cancel_if_orphaned(job: Job) -> None:
    if job.waiters == 0:
        job.cancel()


def job_done(job: Job, _task: asyncio.Future[Result]) -> None:
    """A job ended: it no longer holds the session (background work waits for that).

    An answer nobody waited for any more stays pending (the next keystroke
    may type through it) but is not pre-generated: nobody was shown it.
    """
    if job.session.job is job:
        job.session.job = job.session.task = None

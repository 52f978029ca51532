"""The one worker thread that owns the model, and the bridge between it and the event loop.

The model and the engine belong to a single worker thread (``host.EngineHost``
holds them), so one generation uses the model at a time and the event loop
stays free to answer edits and ``shutdown`` while a generation runs. Blocking
work (loading the model, tokenizing, decoding) never runs on the loop.

``Worker`` submits work to that thread (``submit``), brings callbacks back to
the loop (``call_soon``), and runs a request's generation on the thread
(``submit_request``, then ``run``, which calls ``generate.run_completion``).
It counts the requests queued behind the one running: a prompt evaluation
that ran past ``maxLatencyMs`` goes on only while none is (``warming``
tells the status meanwhile). Background work has its own entry points
(``background``); so has the warm-up (``service``).

Loading the model there is not only about blocking: llama.cpp's OpenMP
threads form one team per calling thread, and a model loaded on one thread and
decoded on another leaves two, which slows every pass (``model/threads.py``,
"One thread for llama.cpp's calls"); every model call goes through this one
thread.

The worker's idle slot: behind every piece of work it runs comes a save of the
model's evaluated prefixes to the on-disk prefix cache
(``model.extras.save_prefixes``), skipped while a request is queued; and one
more at shutdown, before the model is released. A save writes megabytes (tens
of milliseconds, more under load), so it never runs inside a prefill a request
waits on: a request's answer is handed back first, and what is saved is what
the model holds then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from structspec.completion.generate import Outcome, run_completion
from structspec.completion.host import (
    EngineHost,
    EngineLoader,
    ModelOpener,
    RateMeter,
    default_model_rates,
)
from structspec.completion.jobs import Job
from structspec.completion.status import StatusBoard
from structspec.completion.types import EmptyReason
from structspec.engine.decode import EngineError
from structspec.model.base import ModelError
from structspec.model.extras import save_prefixes

log = logging.getLogger(__name__)

T = TypeVar("T")


class Worker:
    """The worker thread (``submit``), its engine host, and the way back to the loop."""

    def __init__(
        self,
        status: StatusBoard,
        open_model: ModelOpener,
        load_engine: EngineLoader,
        model_rates: RateMeter = default_model_rates,
    ) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="structspec-engine"
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Set by ``close``: queued and later work returns at once.
        self.closed = False
        self._released: threading.Event | None = None
        #: Requests submitted and not started on the worker yet (``submit_request``).
        self._queued = 0
        self._queued_lock = threading.Lock()
        # Worker-thread state.
        self.host = EngineHost(
            announce=self._announce,
            on_loaded=lambda name, warnings, rates: self.call_soon(
                status.model_loaded, name, warnings, rates
            ),
            on_failed=lambda message: self.call_soon(status.model_failed, message),
            open_model=open_model,
            load_engine=load_engine,
            model_rates=model_rates,
        )
        self._status = status

    # -- the loop's side ------------------------------------------------------
    def bind_loop(self) -> None:
        """Remember the running event loop (the first public call on it binds it)."""
        if self.loop is None:
            try:
                self.loop = asyncio.get_running_loop()
            except RuntimeError:
                self.loop = None

    def call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the event loop (from any thread); dropped once the loop is gone."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T] | None:
        """Queue ``fn(*args)`` on the worker thread, then the idle slot; ``None`` once shut down."""
        try:
            future = self._executor.submit(fn, *args)
            self._executor.submit(self._idle_slot)
        except RuntimeError:  # shut down
            return None
        return future

    def submit_request(self, job: Job) -> concurrent.futures.Future[Outcome] | None:
        """Queue a request's generation (``run``); ``None`` once it is shut down."""
        with self._queued_lock:
            self._queued += 1
        future = self.submit(self._run_queued, job)
        if future is None:
            with self._queued_lock:
                self._queued -= 1
        return future

    def close(self) -> None:
        """Release the model on the worker after what is queued, then end the thread.

        Queued jobs see their cancel flag (or ``closed``) and return at once.
        """
        self.closed = True
        released = self._released = threading.Event()

        def _release() -> None:
            try:
                self._save_prefixes(closing=True)  # a restart starts where this one ended
                self.host.close()
            finally:
                released.set()

        self._executor.submit(_release)
        self._executor.shutdown(wait=False)

    def join(self, timeout: float = 10.0) -> bool:
        """After ``close``: wait until the worker released the model."""
        return self._released.wait(timeout) if self._released is not None else False

    # -- worker thread ------------------------------------------------------
    def _announce(self, message: str) -> None:
        log.info("%s", message)
        self.call_soon(self._status.message_user, "info", message)

    def _idle_slot(self) -> None:
        """Worker, after a piece of work: save evaluated prefixes unless a request waits."""
        if not (self.closed or self.requests_waiting()):
            self._save_prefixes()

    def _save_prefixes(self, *, closing: bool = False) -> None:
        model = self.host.model
        if model is None:
            return
        try:
            saved = save_prefixes(model, closing=closing)
        except Exception:  # a failed save costs the next session an evaluation, nothing more
            log.debug("saving evaluated prefixes failed", exc_info=True)
            return
        if saved:
            log.debug("saved %d evaluated prefix(es) to the prefix cache", saved)

    def _run_queued(self, job: Job) -> Outcome:
        with self._queued_lock:
            self._queued -= 1
        return self.run(job)

    def requests_waiting(self) -> bool:
        """Worker: a request is queued behind the work in progress."""
        return self._queued > 0

    @contextlib.contextmanager
    def warming(self, uri: str) -> Iterator[None]:
        """Worker: the status says the server is warming ``uri`` while inside."""
        self.call_soon(self._status.warming, uri)
        try:
            yield
        finally:
            self.call_soon(self._status.warming, None)

    def run(self, job: Job) -> Outcome:
        """Worker: one request's generation (``generate.run_completion``), never raising."""
        if job.cancelled() or self.closed:
            return Outcome(cancelled=True, empty=EmptyReason.CANCELLED)
        host = self.host
        if job.input.settings.backend:  # completion/remote.py
            return host.complete_remotely(job.input, cancelled=job.cancelled, progress=job.wrote)
        try:
            engine = host.engine_for(job.input.settings)
        except ModelError:
            return Outcome(empty=EmptyReason.NO_MODEL)
        except Exception:
            log.exception("loading the engine failed")
            return Outcome(empty=EmptyReason.NO_MODEL)
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
                keep_evaluating=lambda: not (self.closed or self.requests_waiting()),
                warming=lambda: self.warming(job.input.uri),
            )
        except (ModelError, EngineError) as exc:
            log.warning("completion for %s failed: %s", job.input.uri, exc)
            return Outcome(empty=EmptyReason.ERROR)
        except Exception:
            log.exception("completion for %s failed", job.input.uri)
            return Outcome(empty=EmptyReason.ERROR)
        if outcome.cut is not None:
            job.session.cut = outcome.cut
        return outcome

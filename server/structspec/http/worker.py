"""The one thread that runs the engine, and the bounded fair queue in front of it.

The model holds one KV cache and llama.cpp calls block, so every generation
runs on a single worker thread, never on the event loop. Requests wait in a
queue with a bound: past it the server answers 503 at once instead of letting
latency grow without limit.

Fair order: waiting jobs are grouped by client key (the request's ``user``
field, else its API key, else the peer address) and served round-robin across
keys, FIFO within a key, so one client firing many requests cannot starve
another. Each job carries a cancel flag that the engine polls between
verification passes (``Generation(cancelled=...)``): a client that goes away
frees the model at the next pass; a job cancelled while still waiting never
runs.

One thread for llama.cpp: the model is loaded (with its self-check, cost table
and rates) on the worker thread itself when the server is given a loader
instead of an engine (``EngineWorker(load)``, as ``structspec serve`` does), so
that every llama.cpp call of the process runs on the thread that decodes. An
OpenMP build of llama.cpp keeps one thread team per calling thread; a second
one, left behind by a load on the main thread, makes libgomp count more
threads than cores and park its threads in the kernel at every barrier of
every pass (``model/threads.py``, "One thread for llama.cpp's calls").

``Retry-After`` on a full queue says when a place is expected to free up,
not when the whole queue will have drained: a place frees when the running
job ends (the next waiting job then leaves the queue), so the estimate is the
running job's expected remaining time, from the measured mean duration of
recent jobs minus what it has already run.
"""

from __future__ import annotations

import concurrent.futures
import math
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from structspec.engine.decode import Engine
from structspec.metrics import Metrics


class Job:
    """One unit of model work. ``work(engine, job)`` runs on the worker thread."""

    def __init__(
        self,
        key: str,
        work: Callable[[Engine, Job], Any],
        on_skip: Callable[[], None] | None = None,
    ) -> None:
        self.key = key
        self.work = work
        self.on_skip = on_skip  # called (worker thread) when the job is dropped unrun
        self.enqueued = time.monotonic()  # the worker restamps it with its clock
        self.started: float | None = None
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


class QueueFull(Exception):
    """The queue is at its bound; ``retry_after`` is a whole number of seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the server is busy; retry in {retry_after} s")
        self.retry_after = retry_after


class EngineWorker:
    """A worker thread serving ``Job``s from a bounded, fair queue.

    ``engine`` is the engine, or a loader that makes it: the loader then runs
    first, on the worker thread (see the module docstring), and the
    constructor waits for it and raises what it raised.
    """

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        metrics: Metrics,
        *,
        max_queue: int = 32,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be at least 1")
        load = engine if callable(engine) and not isinstance(engine, Engine) else None
        self.engine: Engine = None if load is not None else engine  # type: ignore[assignment]
        self.metrics = metrics
        self.max_queue = max_queue
        self._cond = threading.Condition()
        self._queues: OrderedDict[str, deque[Job]] = OrderedDict()
        self._waiting = 0
        self._closing = False
        self._current: Job | None = None
        self._clock = clock
        # Running mean of job duration, for Retry-After (no job seen yet: 1 s).
        self._mean_s = 1.0
        self._loaded: concurrent.futures.Future[Engine] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(load,), name="structspec-engine", daemon=True
        )
        self._thread.start()
        if load is not None:
            self.engine = self._loaded.result()  # raises the loader's error here

    def _run(self, load: Callable[[], Engine] | None) -> None:
        if load is not None:
            try:
                engine = load()
            except BaseException as exc:  # noqa: BLE001 - handed to the constructor
                self._loaded.set_exception(exc)
                return
            self._loaded.set_result(engine)
        self._loop()

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(self, job: Job) -> None:
        """Queue ``job`` or raise ``QueueFull``."""
        with self._cond:
            if self._closing:
                raise QueueFull(5)
            if self._waiting >= self.max_queue:
                raise QueueFull(self.retry_after())
            job.enqueued = self._clock()
            self._queues.setdefault(job.key, deque()).append(job)
            self._waiting += 1
            self.metrics.queue_depth.set(self._waiting)
            self._cond.notify()

    def retry_after(self) -> int:
        """Whole seconds until a place in the queue is expected to free (1..300)."""
        current = self._current
        running = 0.0
        if current is not None and current.started is not None:
            running = self._clock() - current.started
        return max(1, min(300, math.ceil(self._mean_s - running)))

    def cancel(self, job: Job) -> None:
        """Cancel ``job``: a waiting one leaves the queue now (its place is free), a
        running one stops at the engine's next verification pass."""
        job.cancel()
        with self._cond:
            jobs = self._queues.get(job.key)
            if jobs is not None and job in jobs:
                jobs.remove(job)
                if not jobs:
                    del self._queues[job.key]
                self._waiting -= 1
                self.metrics.queue_depth.set(self._waiting)

    def _next(self) -> Job | None:
        """Round-robin over client keys (called with the lock held)."""
        while self._queues:
            key, jobs = next(iter(self._queues.items()))
            job = jobs.popleft()
            del self._queues[key]
            if jobs:
                self._queues[key] = jobs  # to the back: the next key goes first
            self._waiting -= 1
            self.metrics.queue_depth.set(self._waiting)
            if not job.cancelled:
                return job
            if job.on_skip is not None:
                job.on_skip()
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                while job is None:
                    if self._closing:
                        return
                    self._cond.wait()
                    job = self._next()
                self._current = job
            job.started = self._clock()
            self.metrics.queue_wait.observe(job.started - job.enqueued)
            self.metrics.active.inc()
            try:
                job.work(self.engine, job)
            except Exception as exc:  # noqa: BLE001 - work reports its own errors; go on
                print(f"structspec: engine job failed: {exc!r}", file=sys.stderr)
            finally:
                self.metrics.active.dec()
                took = self._clock() - job.started
                with self._cond:
                    self._current = None
                    self._mean_s = 0.8 * self._mean_s + 0.2 * took

    def cancel_all(self) -> None:
        """Cancel waiting jobs and the running one; accept no more. Does not block."""
        with self._cond:
            self._closing = True
            for jobs in self._queues.values():
                for job in jobs:
                    job.cancel()
            if self._current is not None:
                self._current.cancel()
            self._cond.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Cancel waiting jobs, let the running one see its cancel flag, stop the thread."""
        self.cancel_all()
        self._thread.join(timeout)

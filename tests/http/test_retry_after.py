"""Retry-After on a full queue: when a place frees, from measured job durations."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from structspec.http.worker import EngineWorker, Job, QueueFull
from structspec.metrics import Metrics


class Clock:
    """A clock the jobs advance, so durations are exact and tests take no time."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_retry_after_is_time_to_a_free_place_not_to_an_empty_queue() -> None:
    clock = Clock()
    worker = EngineWorker(None, Metrics(), max_queue=32, clock=clock)  # type: ignore[arg-type]
    finished = threading.Semaphore(0)

    def takes(seconds: float) -> Any:
        def work(_engine: Any, _job: Job) -> None:
            clock.now += seconds
            finished.release()

        return work

    for _ in range(20):  # recent jobs took 2 s each
        worker.submit(Job("a", takes(2.0)))
        assert finished.acquire(timeout=10)
    gate = threading.Event()
    started = threading.Event()

    def blocker(_engine: Any, _job: Job) -> None:
        started.set()
        gate.wait(10)

    worker.submit(Job("a", blocker))
    assert started.wait(10)
    for i in range(32):
        worker.submit(Job(f"k{i}", takes(0.0)))
    with pytest.raises(QueueFull) as full:
        worker.submit(Job("late", takes(0.0)))
    # The running job is expected to end in ~2 s, and then a place frees. The old
    # estimate (mean x (waiting + 1)) said 66 s: the time for the whole queue to drain.
    assert full.value.retry_after == 2
    clock.now += 1.5  # the running job has used most of its expected time
    with pytest.raises(QueueFull) as full:
        worker.submit(Job("late", takes(0.0)))
    assert full.value.retry_after == 1
    gate.set()
    deadline = time.monotonic() + 10
    while worker.waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.close()
    assert worker.waiting == 0

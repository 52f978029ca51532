"""The contention benchmark's measurement loop (``bench/threads.py``), on the stand-in."""

from __future__ import annotations

from structspec.bench.threads import FixedThreads, measure
from structspec.model.standin import StandInModel


def test_prefill_chunks_are_timed_from_the_same_cached_prefix() -> None:
    model = StandInModel(seed=1)
    times = measure(model, {"one": lambda: FixedThreads(1)}, rows=128, rounds=2, prefill=True)
    assert len(times["one"]) == 16 and all(t >= 0 for t in times["one"])
    assert len(model.cached_tokens) == 300  # each chunk was rolled back after it
    verify = measure(model, {"one": lambda: FixedThreads(1)}, rows=4, rounds=1)
    assert len(verify["one"]) == 8 and len(model.cached_tokens) == 300

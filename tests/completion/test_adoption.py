"""A keystroke that types what the generation in flight is writing is answered from it.

The stand-in model's output depends only on the text (one token per
character), so the answer typed through the generation in flight must equal
what a fresh server suggests at the first cursor, less the typed characters.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest
from tests.completion.test_prewarm import wait_for
from tests.completion.test_service import SlowStandIn, make_service

from structspec.completion.documents import Range, TextChange
from structspec.completion.jobs import Job
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.model.base import Rows
from structspec.model.standin import StandInModel

URI = "u"
TEXT = "items = [1, 2]\ntotal = "
LINE, COL = 1, len("total = ")
SETTINGS = dict(max_tokens=64, max_generation_ms=60_000)


class GatedStandIn(SlowStandIn):
    """Holds its pass number ``hold_at`` until ``release`` is set (a generation kept running)."""

    def __init__(self, hold_at: int, **kw):
        super().__init__(**kw)
        self.hold_at = hold_at
        self.holding = threading.Event()
        self.release = threading.Event()

    def verify(self, tokens: Sequence[int]) -> Rows:
        if self.verify_calls + 1 == self.hold_at:
            self.holding.set()
            assert self.release.wait(10), "the pass was never released"
        return super().verify(tokens)


async def fresh_answer(text: str, line: int, col: int) -> str | None:
    svc, _ = make_service(StandInModel(seed=8, eos_bias=-30.0), **SETTINGS)
    svc.open_document(URI, "python", 1, text)
    try:
        got = await svc.complete(CompletionRequest(URI, line, col))
    finally:
        svc.close()
    return None if got is None else got.text


async def in_flight(svc: CompletionService, chars: int) -> tuple[asyncio.Future, Job]:
    """A request at the end of ``TEXT`` whose generation has written ``chars`` characters."""
    svc.open_document(URI, "python", 1, TEXT)
    first = asyncio.ensure_future(svc.complete(CompletionRequest(URI, LINE, COL)))

    def written() -> bool:
        session = svc._sessions.get(URI)
        return session is not None and session.job is not None and len(session.job.partial) >= chars

    await wait_for(written)
    job = svc._sessions[URI].job
    assert job is not None
    return first, job


def type_at_cursor(svc: CompletionService, typed: str) -> None:
    svc.change_document(URI, 2, [TextChange(typed, Range(LINE, COL, LINE, COL))])


def test_a_keystroke_that_agrees_is_typed_through_the_generation_in_flight() -> None:
    async def scenario():
        # Held at its third pass, when it has written two characters: still running.
        model = GatedStandIn(hold_at=3, delay=0.0, seed=8, eos_bias=-30.0)
        svc, _ = make_service(model, **SETTINGS)
        first, job = await in_flight(svc, 2)
        await wait_for(model.holding.is_set)
        typed = job.partial[:2]
        type_at_cursor(svc, typed)
        first.cancel()  # the editor cancels the request on the edit, then asks again
        with pytest.raises(asyncio.CancelledError):
            await first
        assert job.waiters == 0
        asking = asyncio.ensure_future(svc.complete(CompletionRequest(URI, LINE, COL + 2)))
        await wait_for(lambda: job.waiters > 0)  # the new request waits for the generation
        model.release.set()
        second = await asking
        generations = len(model.prefills)
        svc.close()
        return typed, second, svc.stats, generations, job

    typed, second, stats, generations, job = asyncio.run(scenario())
    expected = asyncio.run(fresh_answer(TEXT, LINE, COL))
    assert expected is not None and expected.startswith(typed) and len(expected) > 2
    assert second is not None and second.text == expected[2:]
    assert stats.served_from_generation_in_flight == 1
    assert not job.cancelled()  # it ran to its end
    assert generations == 1  # the model was asked once
    assert stats.shown == 1  # first shown with the second request


def test_the_request_the_edit_overtook_answers_nothing() -> None:
    """Not cancelled by its editor, the first request's answer is stale: only the second shows."""

    async def scenario():
        svc, _ = make_service(SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0), **SETTINGS)
        first, job = await in_flight(svc, 1)
        type_at_cursor(svc, job.partial[:1])
        second = await svc.complete(CompletionRequest(URI, LINE, COL + 1))
        answer = await first
        svc.close()
        return answer, second

    answer, second = asyncio.run(scenario())
    assert answer is None
    assert second is not None and second.text


def test_a_keystroke_that_disagrees_stops_the_generation_in_flight() -> None:
    async def scenario():
        model = SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0)
        svc, _ = make_service(model, **SETTINGS)
        first, job = await in_flight(svc, 2)
        other = "#" if job.partial[0] != "#" else "@"
        type_at_cursor(svc, other)
        first.cancel()
        second = await svc.complete(CompletionRequest(URI, LINE, COL + 1))
        svc.close()
        return job, second, svc.stats, other

    job, second, stats, other = asyncio.run(scenario())
    assert job.cancelled()
    assert stats.served_from_generation_in_flight == 0
    expected = asyncio.run(fresh_answer(TEXT + other, LINE, COL + 1))
    assert second is not None and second.text == expected


def test_only_an_insertion_at_the_cursor_of_what_was_written_agrees() -> None:
    async def scenario():
        svc, _ = make_service(SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0), **SETTINGS)
        first, job = await in_flight(svc, 3)
        written = job.partial
        end = len(TEXT)
        checks = {
            "typed the first characters": job.agrees(TEXT + written[:2], end + 2),
            "typed all of it": job.agrees(TEXT + written, end + len(written)),
            "typed past it": not job.agrees(TEXT + written + "zz", end + len(written) + 2),
            "typed something else": not job.agrees(TEXT + "#", end + 1),
            "nothing typed": not job.agrees(TEXT, end),
            "edited elsewhere": not job.agrees("X" + TEXT[1:] + written[:1], end + 1),
            "cursor not after it": not job.agrees(TEXT + written[:2], end + 1),
        }
        first.cancel()
        job.cancel()
        checks["cancelled"] = not job.agrees(TEXT + written[:1], end + 1)
        svc.close()
        return checks

    checks = asyncio.run(scenario())
    assert all(checks.values()), checks

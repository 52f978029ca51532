"""Pre-generation: accepting a suggestion is answered from what the model wrote past it.

The stand-in model's output depends only on the text (one token per
character), so a continuation written in the background must equal what a
fresh server computes at the same cursor, character for character.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence

import pytest
from tests.completion.test_prewarm import wait_for
from tests.completion.test_service import SlowStandIn

from structspec.completion.cache import Continuation, Extension, PendingSuggestion
from structspec.completion.documents import Range, TextChange
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.completion.types import Suggestion
from structspec.config import Settings
from structspec.model.base import Interrupted, Rows
from structspec.model.standin import StandInModel

URI = "file:///a.py"
TEXT = "items = [1, 2]\ntotal = "


def make_service(model: StandInModel, window_tokens: int = 1536) -> CompletionService:
    settings = Settings(
        model="standin",
        debounce_ms=0,
        max_tokens=64,
        sources=("lookup",),
        window_tokens=window_tokens,
    )
    return CompletionService(settings, open_model=lambda spec, **kw: model)


def end_of(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


async def fresh_answer(seed: int, text: str) -> str | None:
    """What a server that never saw this document suggests at its end."""
    svc = make_service(StandInModel(seed=seed, eos_bias=-30.0))
    svc.open_document(URI, "python", 1, text)
    try:
        got = await svc.complete(CompletionRequest(URI, *end_of(text)))
    finally:
        svc.close()
    return None if got is None else got.text


def written(svc: CompletionService) -> Continuation | None:
    """What the model wrote from the pending suggestion's place (``None``: nothing yet)."""
    pending = svc._sessions[URI].pending
    return pending.continuation if pending is not None else None


async def accept_then_enter(seed: int) -> tuple[list[str | None], str | None, str, int]:
    """Show a suggestion, accept it, then press Enter with the model's own indentation.

    Returns the answers after accepting and after Enter, a fresh server's answer
    after Enter, what Enter typed, and how many answers came without the model.
    """
    svc = make_service(StandInModel(seed=seed, eos_bias=-30.0))
    svc.open_document(URI, "python", 1, TEXT)
    first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
    assert first is not None
    await wait_for(
        lambda: (c := written(svc)) is not None and c.lines_after(len(first.text)) >= 2, 30
    )
    cont = written(svc)
    assert cont is not None
    served: list[str | None] = []
    text = TEXT
    rest = cont.text[len(first.text) :]
    enter = rest[: len(rest) - len(rest.lstrip())]  # line break(s) and indentation
    # Accept (the editor inserts the suggestion and asks at its end), then Enter.
    for version, typed in enumerate((first.text, enter), start=2):
        line, col = end_of(text)
        svc.change_document(URI, version, [TextChange(typed, Range(line, col, line, col))])
        text += typed
        got = await svc.complete(CompletionRequest(URI, *end_of(text)))
        served.append(None if got is None else got.text)
    without_model = svc.stats.served_from_cache
    assert svc.stats.served_from_pregeneration >= 1
    svc.close()
    return served, await fresh_answer(seed, text), enter, without_model


#: Stand-in seeds whose output for ``TEXT`` has two short lines after the first
#: suggestion (an order-3 stand-in often loops on one long line).
SEEDS = (0, 5, 6, 7, 8, 9)


@pytest.mark.parametrize("seed", SEEDS)
def test_accepting_a_suggestion_is_answered_from_pre_generation_exactly(seed: int) -> None:
    (after_accept, after_enter), fresh, enter, served = asyncio.run(accept_then_enter(seed))
    assert served == 2  # neither answer ran the model
    assert "\n" in enter and fresh is not None
    # After Enter: exactly what a server computing from scratch suggests there.
    assert after_enter == fresh
    # At the end of the accepted line: the next lines, as a block.
    assert after_accept is not None and after_accept.split("\n")[:2] == ["", fresh]


def test_a_keystroke_stops_pre_generation_between_passes() -> None:
    async def scenario() -> tuple[int, int, int]:
        model = SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0)
        svc = make_service(model)
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None
        answered = model.verify_calls  # the suggestion's own passes
        await wait_for(lambda: model.verify_calls > answered + 2)  # pre-generation has written
        line, col = end_of(TEXT)
        svc.change_document(URI, 2, [TextChange("#", Range(line, col, line, col))])
        stopped_at = model.verify_calls
        await asyncio.sleep(0.3)
        svc.close()
        return stopped_at, model.verify_calls, svc.stats.pregenerated_tokens

    stopped_at, after, written = asyncio.run(scenario())
    assert after - stopped_at <= 1  # at most the pass in progress
    assert written > 0  # what was written before the keystroke was kept


class StuckPass(StandInModel):
    """A stand-in whose pass number ``stuck_at`` runs until its decode is interrupted."""

    def __init__(self, stuck_at: int, **kw):
        super().__init__(**kw)
        self.stuck_at = stuck_at
        self.interrupted = 0

    def verify(self, tokens: Sequence[int]) -> Rows:
        if self.verify_calls + 1 == self.stuck_at:
            self.verify_calls += 1
            stop = self._interrupt
            deadline = time.monotonic() + 60  # a wait, generous for a loaded machine
            while stop is None or not stop.is_set():
                assert time.monotonic() < deadline, "the pass was never interrupted"
                time.sleep(0.001)
            self.interrupted += 1
            raise Interrupted("the decode was interrupted")
        return super().verify(tokens)


def test_a_keystroke_interrupts_the_pre_generation_pass_in_progress() -> None:
    """The worker is free at once, and what pre-generation wrote before that pass is kept."""

    async def scenario() -> tuple[StuckPass, int, str | None]:
        model = StuckPass(stuck_at=6, seed=8, eos_bias=-30.0)
        svc = make_service(model)
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None and model.verify_calls < model.stuck_at
        await wait_for(lambda: model.verify_calls >= model.stuck_at)  # pre-generation is stuck
        line, col = end_of(TEXT)
        svc.change_document(URI, 2, [TextChange("#", Range(line, col, line, col))])
        after = await svc.complete(CompletionRequest(URI, line, col + 1))
        svc.close()
        return model, svc.stats.pregenerated_tokens, None if after is None else after.text

    model, written, _ = asyncio.run(scenario())
    assert model.interrupted == 1
    assert written > 0  # the passes before the interrupted one were kept


def test_continuation_follows_what_the_model_wrote() -> None:
    doc = "x = "
    cont = Continuation("", (1, 2)).extended(Extension((5, 6), b"foo(1)\nbar", False))
    entry = PendingSuggestion.at("s1", doc, 4, "foo(1)", cont)
    assert entry.rest_at("x = foo", 7) == "(1)"  # the shown text, as before
    assert entry.continuation_at("x = foo(1)\n", 11) == "bar"
    assert entry.continuation_at("x = foo(1)\nba", 13) == "r"
    assert entry.continuation_at("x = foo(2)\n", 11) is None  # typed something else
    assert entry.continuation_at("y = foo(1)\n", 11) is None  # text before changed
    assert entry.continuation_at("x = foo(1)\nbarz", 15) is None  # past what was written
    later = entry.with_continuation(cont.extended(Extension((7,), b"(2)\n", True)))
    assert later.continuation is not None and later.continuation.text == "foo(1)\nbar(2)\n"
    assert later.continuation.ended and later.continuation.tokens == (1, 2, 5, 6, 7)


def test_a_character_split_between_tokens_waits_for_its_last_byte() -> None:
    snowman = "☃".encode()
    cont = Continuation("", ()).extended(Extension((1,), b"a" + snowman[:2]))
    assert cont.text == "a" and cont.partial == snowman[:2]
    cont = cont.extended(Extension((2,), snowman[2:] + b"b"))
    assert cont.text == "a☃b" and cont.partial == b""


def test_what_a_continuation_answers_at_a_cursor() -> None:
    from structspec.completion.suggest import CursorContext, continuation_answer

    mid = CursorContext.at("x = foo", 7)  # inside a line: one line
    assert continuation_answer("(1)\ny = 2\n", False, mid) == (True, "(1)")
    assert not continuation_answer("(1, ", False, mid)[0]  # line not complete yet
    assert continuation_answer("(1)", True, mid) == (True, "(1)")  # the model ended there
    end = CursorContext.at("x = foo(1)", 10)  # end of a line: the next lines, as a block
    assert continuation_answer("\ny = 2\nz = 3\nw", False, end) == (True, "\ny = 2\nz = 3")
    assert continuation_answer("\ny = ", False, end) == (False, None)
    blank = CursorContext.at("x = 1\n", 6)  # a blank line that opens nothing: one line
    assert continuation_answer("y = 2\n", False, blank) == (True, "y = 2")


def test_a_request_right_after_an_edit_keeps_what_pre_generation_wrote() -> None:
    """The request settles the pre-generation itself; it does not race its callback."""

    async def scenario() -> tuple[str | None, int]:
        svc = make_service(StandInModel(seed=5, eos_bias=-30.0))
        svc._worker.call_soon = lambda *args: None  # type: ignore[method-assign]  # no callbacks
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None
        background = svc._background
        await wait_for(
            lambda: background._pregeneration is not None and background._pregeneration[0].done()
        )
        pending = svc._sessions[URI].pending
        assert pending is not None and pending.continuation is not None
        assert pending.continuation.text == first.text + "\n"  # nothing attached yet
        line, col = end_of(TEXT)
        svc.change_document(URI, 2, [TextChange(first.text, Range(line, col, line, col))])
        got = await svc.complete(CompletionRequest(URI, *end_of(TEXT + first.text)))
        served = svc.stats.served_from_pregeneration
        svc.close()
        return (None if got is None else got.text), served

    text, served = asyncio.run(scenario())
    assert served == 1 and text is not None and text.startswith("\n")


def test_an_older_request_waiting_on_pre_generation_leaves_the_newer_one_alone() -> None:
    """Two keystrokes' requests back to back, the first not cancelled (plain clients).

    The first waits for the pre-generation it stopped; the second, newer one goes
    on meanwhile. The first must then give way (no answer), not cancel the
    second's job and answer at its old cursor in the newer text.
    """

    async def scenario() -> tuple[Suggestion | None, Suggestion | None, str | None]:
        model = SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0)
        svc = make_service(model)
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None
        answered = model.verify_calls
        await wait_for(lambda: model.verify_calls > answered + 2)  # pre-generation is writing
        line, col = end_of(TEXT)
        svc.change_document(URI, 2, [TextChange("a", Range(line, col, line, col))])
        older = asyncio.ensure_future(svc.complete(CompletionRequest(URI, line, col + 1)))
        await asyncio.sleep(0)  # it takes the pre-generation and waits for it
        svc.change_document(URI, 3, [TextChange("b", Range(line, col + 1, line, col + 1))])
        newer = await svc.complete(CompletionRequest(URI, line, col + 2))
        old = await older
        svc.close()
        return old, newer, await fresh_answer(8, TEXT + "ab")

    old, newer, fresh = asyncio.run(scenario())
    assert old is None
    assert newer is not None and fresh is not None and newer.text == fresh


def test_a_request_cancelled_while_it_waits_on_pre_generation_leaves_nothing_behind() -> None:
    """An editor cancels the request of a keystroke superseded while it waited: nothing
    of it is kept (an entry per document ever edited so grew for the whole session)."""

    async def scenario() -> dict[str, int]:
        model = SlowStandIn(delay=0.02, seed=8, eos_bias=-30.0)
        svc = make_service(model)
        svc.open_document(URI, "python", 1, TEXT)
        assert await svc.complete(CompletionRequest(URI, *end_of(TEXT))) is not None
        answered = model.verify_calls
        await wait_for(lambda: model.verify_calls > answered + 2)  # pre-generation is writing
        line, col = end_of(TEXT)
        svc.change_document(URI, 2, [TextChange("a", Range(line, col, line, col))])
        waiting = asyncio.ensure_future(svc.complete(CompletionRequest(URI, line, col + 1)))
        await asyncio.sleep(0)  # it takes the pre-generation and waits for it
        waiting.cancel()  # $/cancelRequest
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        svc.close_document(URI)
        left = dict(svc._requests._waiting)
        svc.close()
        return left

    assert asyncio.run(scenario()) == {}


#: Stand-in seeds whose first suggestion for ``TEXT``, cut at a 1 ms budget, is a word of
#: two or more characters short of the line the model writes there.
CUT_SEEDS = (1, 4, 7, 9)


@pytest.mark.parametrize("seed", CUT_SEEDS)
def test_a_suggestion_cut_at_the_budget_grows_as_it_is_typed_through(seed: int) -> None:
    """Cut at ``maxGenerationMs`` (the word being written finished), the suggestion on
    screen grows at the next keystroke along it to the line pre-generation wrote since:
    the line a server given all the time it needs suggests there, without the model."""

    async def scenario() -> tuple[Suggestion, Suggestion | None, str | None, int]:
        model = SlowStandIn(seed=seed, eos_bias=-30.0, delay=0.02)
        settings = Settings(
            model="standin", debounce_ms=0, max_tokens=64, sources=(), max_generation_ms=1
        )
        svc = CompletionService(settings, open_model=lambda spec, **kw: model)
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None
        await wait_for(lambda: (c := written(svc)) is not None and "\n" in c.text, 30)
        typed = TEXT + first.text[0]
        svc.change_document(
            URI, 2, [TextChange(first.text[0], Range(*end_of(TEXT), *end_of(TEXT)))]
        )
        served = svc.stats.served_from_pregeneration
        grown = await svc.complete(CompletionRequest(URI, *end_of(typed)))
        served = svc.stats.served_from_pregeneration - served
        svc.close()
        return first, grown, await fresh_answer(seed, typed), served

    first, grown, fresh, served = asyncio.run(scenario())
    assert fresh is not None and "\n" not in fresh
    assert len(first.text) >= 2 and fresh.startswith(first.text[1:])
    assert len(first.text) - 1 < len(fresh)  # the first answer was cut short
    assert grown is not None and grown.text == fresh and grown.source == "cache"
    assert served == 1


def test_pre_generation_resumes_after_a_keystroke_typed_through_the_suggestion() -> None:
    """A keystroke along the suggestion stops pre-generation before the line is written;
    it resumes from what it wrote, so the next keystroke along it gets the whole line."""

    async def scenario() -> tuple[Suggestion, Suggestion | None, str | None]:
        model = SlowStandIn(seed=4, eos_bias=-30.0, delay=0.05)
        settings = Settings(
            model="standin", debounce_ms=0, max_tokens=64, sources=(), max_generation_ms=1
        )
        svc = CompletionService(settings, open_model=lambda spec, **kw: model)
        svc.open_document(URI, "python", 1, TEXT)
        first = await svc.complete(CompletionRequest(URI, *end_of(TEXT)))
        assert first is not None and len(first.text) >= 3
        text = TEXT
        for version, typed in enumerate(first.text[:2], start=2):
            if version == 3:  # after the first keystroke: pre-generation writes the line
                await wait_for(lambda: (c := written(svc)) is not None and "\n" in c.text, 30)
            line, col = end_of(text)
            svc.change_document(URI, version, [TextChange(typed, Range(line, col, line, col))])
            text += typed
            got = await svc.complete(CompletionRequest(URI, *end_of(text)))
        svc.close()
        return first, got, await fresh_answer(4, text)

    first, got, fresh = asyncio.run(scenario())
    assert fresh is not None and len(fresh) > len(first.text) - 2
    assert got is not None and got.text == fresh and got.source == "cache"

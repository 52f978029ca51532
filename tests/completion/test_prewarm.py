"""Pre-warm, prefill within the latency budget, and stable windows on a line without breaks."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

from structspec.completion.documents import Range, TextChange
from structspec.completion.prewarm import (
    PREWARM_IDLE_S,
    WINDOW_SHARE,
    opening_offset,
    prefill_in_chunks,
)
from structspec.completion.prompt import ANCHOR_CHARS, PromptBuilder
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings
from structspec.model.base import Interrupt, common_prefix_len
from structspec.model.extras import interrupted_by
from structspec.model.standin import StandInModel

PY = "".join(f"value_{i} = compute({i}, step=2)\n" for i in range(120))


class RecordingStandIn(StandInModel):
    """Records every prefill; ``gate`` (when set) is waited on before each one."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.prefills: list[tuple[int, int]] = []  # (tokens, reused)
        self.gate: threading.Event | None = None
        self.delay = 0.0

    def prefill(self, tokens: Sequence[int]) -> int:
        if self.gate is not None:
            self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        reused = super().prefill(tokens)
        self.prefills.append((len(tokens), reused))
        return reused


def make_service(model: StandInModel, **settings) -> CompletionService:
    base = dict(model="standin", debounce_ms=0, max_tokens=8, sources=("lookup",))
    base.update(settings)
    return CompletionService(Settings(**base), open_model=lambda spec, **kw: model)


async def wait_for(condition, timeout: float = 60.0) -> None:
    """Wait (not a timing assertion) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


# -- chunked prefill -----------------------------------------------------------


def test_chunked_prefill_stops_between_chunks_and_resumes():
    model = RecordingStandIn()
    tokens = model.tokenize(PY)[:1000]
    calls = 0

    def stop() -> bool:
        nonlocal calls
        calls += 1
        return calls > 3

    assert not prefill_in_chunks(model, tokens, stop, chunk=100)
    assert list(model.cached_tokens) == tokens[:300]  # three chunks, kept
    assert prefill_in_chunks(model, tokens, lambda: False, chunk=100)
    assert list(model.cached_tokens) == tokens
    assert model.prefills[3] == (400, 300)  # resumed where it stopped
    n = len(model.prefills)
    assert prefill_in_chunks(model, tokens, lambda: True)  # all cached: nothing to do
    assert len(model.prefills) == n


def test_a_chunk_interrupted_part_way_stops_the_prefill_and_keeps_the_chunks_before():
    model = RecordingStandIn()
    tokens = model.tokenize(PY)[:1000]
    stop = Interrupt()
    calls = 0

    def between_chunks() -> bool:
        nonlocal calls
        calls += 1
        if calls > 2:
            stop.set()  # the third chunk is interrupted while it is evaluated
        return False

    with interrupted_by(model, stop):
        assert not prefill_in_chunks(model, tokens, between_chunks, chunk=100)
    assert list(model.cached_tokens) == tokens[:200]
    assert prefill_in_chunks(model, tokens, lambda: False, chunk=100)  # resumes from there
    assert list(model.cached_tokens) == tokens


def test_chunked_prefill_stops_before_a_chunk_that_would_end_past_the_deadline():
    """At 1 ms a token (a fake clock), 100-token chunks and 50 left after: the deadline holds."""
    model = RecordingStandIn()
    tokens = model.tokenize(PY)[:1000]
    now = [0.0]
    evaluated = [0]

    def clock() -> float:
        if len(model.cached_tokens) != evaluated[0]:  # time passes as tokens are evaluated
            now[0] += (len(model.cached_tokens) - evaluated[0]) / 1000.0
            evaluated[0] = len(model.cached_tokens)
        return now[0]

    done = prefill_in_chunks(
        model, tokens, lambda: clock() > 0.4, chunk=100, leave=50, deadline=0.4, clock=clock
    )
    # 300 tokens (0.3 s) + a fourth chunk and the 50 after it would end at 0.45 s: stopped there.
    assert not done and len(model.cached_tokens) == 300
    # Without the deadline only the time spent counts: the fourth and fifth chunks start in time.
    model.truncate(0)
    now[0], evaluated[0] = 0.0, 0
    assert not prefill_in_chunks(model, tokens, lambda: clock() > 0.4, chunk=100, leave=50)
    assert len(model.cached_tokens) == 500


def test_opening_offset():
    model = StandInModel()  # one token per character
    assert opening_offset(model, "short\n", 1000) == len("short\n")
    at = opening_offset(model, PY, 1000)
    assert PY[at] == "\n" and at <= 1000 * WINDOW_SHARE
    assert PY.rfind("\n", 0, int(1000 * WINDOW_SHARE)) == at  # the last line that fits


# -- the window on a line without breaks (a 1 MB minified file) -----------------


def test_one_megabyte_line_keeps_its_window_while_typing():
    model = StandInModel(n_ctx=2048)
    builder = PromptBuilder(model)
    text = "x=f(a,b);" * 120_000  # ~1 MB, no line break
    cut = None
    previous: list[int] | None = None
    for typed in ("y", "y=", "y=1", "y=1;", "y=1;z"):
        doc = text + typed
        p = builder.build(doc, len(doc), cut_hint=cut, max_tokens=64)
        assert p.cut % ANCHOR_CHARS == 0 and p.cut > 0
        if previous is not None:
            assert p.cut == cut
            # Only the typed characters are new: everything before is reused.
            assert common_prefix_len(previous, p.tokens) >= len(previous) - 1
        cut, previous = p.cut, p.tokens
        assert len(p.tokens) <= 2048 - 64


# -- the window cap (windowTokens) -----------------------------------------------


def test_window_tokens_caps_the_window_and_keeps_it_stable_while_typing():
    model = StandInModel(n_ctx=4096)  # one token per character
    builder = PromptBuilder(model)
    full = builder.build(PY, len(PY), max_tokens=64)
    assert len(full.tokens) > 3000  # the whole document fits the context
    cut = None
    previous: list[int] | None = None
    for typed in ("r", "re", "ret", "retu"):
        doc = PY + typed
        p = builder.build(doc, len(doc), cut_hint=cut, max_tokens=64, window_tokens=600)
        assert len(p.tokens) <= 600 + len(builder.bos)
        assert p.cut > 0 and doc[p.cut - 1] == "\n"  # a line start
        if previous is not None:
            assert p.cut == cut and common_prefix_len(previous, p.tokens) >= len(previous) - 1
        cut, previous = p.cut, p.tokens
    # 0 is no cap: the context decides.
    assert builder.build(PY, len(PY), max_tokens=64, window_tokens=0).tokens == full.tokens


def test_window_tokens_of_zero_or_larger_than_the_room_change_nothing():
    from structspec.completion.prompt import window_budget

    assert window_budget(3000, 0) == 3000
    assert window_budget(3000, 5000) == 3000
    assert window_budget(3000, 1024) == 1024


async def test_an_opened_document_is_prewarmed_within_the_window_cap():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model, window_tokens=500)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    assert 0 < len(model.cached_tokens) <= 500  # not the whole 3,600-token document
    model.prefills.clear()
    await svc.complete(CompletionRequest("file:///p/a.py", 10, 5, invoked=True))
    tokens, reused = model.prefills[0]
    assert tokens <= 500 + 1 and reused >= tokens - 2  # the capped window was evaluated
    svc.close()
    assert svc.join()


# -- the service ------------------------------------------------------------------


async def test_opened_document_is_prewarmed_and_the_first_request_reuses_it():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)  # the default window cap (1536 tokens, 51 lines of PY)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    warmed = len(model.cached_tokens)
    assert warmed > 1000
    model.prefills.clear()
    await svc.complete(CompletionRequest("file:///p/a.py", 40, 5, invoked=True))
    tokens, reused = model.prefills[0]
    assert reused >= tokens - 2  # the window was already evaluated
    svc.close()
    assert svc.join()


async def test_a_request_abandons_the_prewarm():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    model.gate = threading.Event()
    svc = make_service(model)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await asyncio.sleep(PREWARM_IDLE_S + 0.2)  # the pre-warm has started and waits on the gate
    request = asyncio.ensure_future(
        svc.complete(CompletionRequest("file:///p/a.py", 3, 0, invoked=True))
    )
    await asyncio.sleep(0.05)
    model.gate.set()
    suggestion = await request
    assert svc.stats.prewarmed == 0  # abandoned after at most one chunk
    assert suggestion is None or suggestion.text
    svc.close()
    assert svc.join()


async def test_an_edit_elsewhere_is_prewarmed_after_a_pause():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    typed = "total = value_1 + value_2\nresult"
    svc.change_document("file:///p/a.py", 2, [TextChange(typed, Range(110, 0, 110, 0))])
    await wait_for(lambda: svc.stats.prewarmed == 2)
    edit = svc.documents.get("file:///p/a.py").offset_at(111, len("result"))
    expected = PromptBuilder(model).build(
        svc.documents.get("file:///p/a.py").text,
        edit,
        uri="file:///p/a.py",
        language="python",
        cut_hint=svc._sessions["file:///p/a.py"].cut,
        max_tokens=8,
        window_tokens=svc.settings.window_tokens,
    )
    assert list(model.cached_tokens) == expected.tokens[:-1]
    svc.close()
    assert svc.join()


async def test_latency_budget_holds_during_prefill_and_progress_is_kept(monkeypatch, caplog):
    from structspec.completion import generate as generate_module
    from structspec.completion import request as request_module

    class Clock:
        """The service's clock: every prefill chunk takes one second."""

        now = 1000.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()
    monkeypatch.setattr(request_module, "time", clock)  # the request's t0
    monkeypatch.setattr(generate_module, "time", clock)  # the budget during prefill

    class SlowChunks(RecordingStandIn):
        def prefill(self, tokens: Sequence[int]) -> int:
            clock.now += 1.0
            return super().prefill(tokens)

    model = SlowChunks(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model, max_latency_ms=2500)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    with caplog.at_level(logging.INFO, logger="structspec.completion.request"):
        first = await svc.complete(CompletionRequest("file:///p/a.py", 119, 5, invoked=True))
    assert first is None  # out of budget before the prompt was evaluated
    assert "no suggestion at a.py:120:5" in caplog.text and "past maxLatencyMs" in caplog.text
    # After the first chunk (1 s), a second and the last chunk the engine evaluates would end
    # at 3 s, past 2.5: it stops there, and what was evaluated is kept for the next request.
    assert [n for n, _ in model.prefills] == [128]
    assert len(model.cached_tokens) == 128
    model.prefills.clear()
    await svc.complete(CompletionRequest("file:///p/a.py", 119, 5, invoked=True))
    assert model.prefills[0] == (256, 128)  # continued, not restarted
    svc.close()
    assert svc.join()


async def test_request_stats_count_the_chunked_prefill():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-30.0)  # always writes something
    svc = make_service(model)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    s = await svc.complete(CompletionRequest("file:///p/a.py", 119, 5, invoked=True))
    assert s is not None and s.stats is not None
    assert s.stats.prompt_tokens > 1000
    assert s.stats.reused_tokens == 0  # nothing was cached before this request
    svc.close()
    assert svc.join()

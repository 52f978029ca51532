"""Pre-warm, prefill within the latency budget, and stable windows on a line without breaks."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from structspec.completion.documents import Range, TextChange
from structspec.completion.prewarm import (
    DEFAULT_PROMPT_RATE,
    PLACES_KEPT,
    PREFILL_CHUNK,
    PREWARM_IDLE_S,
    WINDOW_SHARE,
    Places,
    PromptRate,
    opening_offset,
    prefill_in_chunks,
)
from structspec.completion.prompt import (
    ANCHOR_CHARS,
    FIRST_WINDOW_MIN,
    Prompt,
    PromptBuilder,
    choose_window,
    prompt_room,
)
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings
from structspec.model.base import Interrupt, common_prefix_len
from structspec.model.extras import interrupted_by, kv_slots
from structspec.model.standin import StandInModel

PY = "".join(f"value_{i} = compute({i}, step=2)\n" for i in range(120))


class RecordingStandIn(StandInModel):
    """Records every prefill; ``gate`` (when set) is waited on before each one."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.prefills: list[tuple[int, int]] = []  # (tokens, reused)
        self.gate: threading.Event | None = None
        self.waiting = threading.Event()  # set once a prefill waits on the gate
        self.delay = 0.0

    def prefill(self, tokens: Sequence[int]) -> int:
        if self.gate is not None:
            self.waiting.set()
            self.gate.wait(10)
        if self.delay:
            time.sleep(self.delay)
        reused = super().prefill(tokens)
        self.prefills.append((len(tokens), reused))
        return reused


class SlottedStandIn(RecordingStandIn):
    """The stand-in with ``slots`` KV caches, chosen as the GGUF model chooses them.

    A prompt goes to the slot holding the longest prefix of it, unless that is
    less than half of either: then to the least recently used one (``model/llama.py``).
    """

    def __init__(self, slots: int = 3, **kw):
        super().__init__(**kw)
        self.slots: list[list[int]] = [[] for _ in range(slots)]
        self.used = [0] * slots
        self.current = 0

    def reusable_prefix(self, tokens: Sequence[int]) -> int:
        return max(common_prefix_len(held, tokens) for held in self.slots)

    def _choose(self, tokens: Sequence[int]) -> None:
        self.slots[self.current] = list(self._cache)
        held = [common_prefix_len(h, tokens) for h in self.slots]
        best = max(range(len(held)), key=lambda i: held[i])
        if held[best] * 2 < min(len(self.slots[best]), len(tokens)):  # less than half its own
            best = min(range(len(held)), key=lambda i: self.used[i])
        self.current, self._cache = best, list(self.slots[best])
        self.used[best] = max(self.used) + 1

    def prefill(self, tokens: Sequence[int]) -> int:
        self._choose(tokens)
        return super().prefill(tokens)

    def prefill_part(self, tokens: Sequence[int], n: int) -> int:
        self._choose(tokens)
        return super().prefill(tokens[:n])


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


class ReadBackStandIn(SlottedStandIn):
    """The first chunk reads back a saved state of the whole prompt (as ``LlamaModel`` does)."""

    def prefill_part(self, tokens: Sequence[int], n: int) -> int:
        if not self.prefills:
            self._choose(tokens)
            self._cache = list(tokens)  # read back, not evaluated
            self.prefills.append((len(tokens), len(tokens)))
            return len(tokens)
        return super().prefill_part(tokens, n)


def test_chunks_a_state_read_back_holds_are_skipped_and_not_measured():
    model = ReadBackStandIn()
    tokens = model.tokenize(PY)[:1000]
    rate = PromptRate()
    assert prefill_in_chunks(model, tokens, lambda: False, chunk=100, rate=rate)
    assert model.prefills == [(1000, 1000)]  # one read back, nothing evaluated after it
    assert not rate.measured  # a read back is no prompt rate


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


async def test_an_opened_document_is_prewarmed_from_its_start_past_the_window_cap():
    """As far as the context holds (at the stand-in's rate, all of it within ``TOP_S``).

    A request deep in it takes that text as its window, wider than ``windowTokens``,
    and evaluates only its last tokens.
    """
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model, window_tokens=500)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    room = prompt_room(model, svc.settings.max_tokens)
    assert room * WINDOW_SHARE * 0.9 < len(model.cached_tokens) <= room
    model.prefills.clear()
    await svc.complete(CompletionRequest("file:///p/a.py", 80, 5, invoked=True))
    tokens, reused = model.prefills[0]
    assert tokens > 2000 and reused >= tokens - 8  # the top, cached
    svc.close()
    assert svc.join()


def test_top_tokens_follow_the_rate_between_the_window_and_the_room():
    from structspec.completion.prompt import TOP_S, top_tokens

    assert top_tokens(1000.0, 4000, 1536) == 4000  # 15,000 tokens in TOP_S: the room decides
    assert top_tokens(200.0, 4000, 1536) == int(200 * TOP_S)
    assert top_tokens(30.0, 4000, 1536) == 1536  # a slow model: its window only


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


def _starts_in(svc: CompletionService) -> float:
    """Seconds until the pre-warm scheduled last starts (the loop's timer)."""
    timer = svc._background._timer
    assert timer is not None, "no pre-warm scheduled"
    return timer.when() - asyncio.get_running_loop().time()


async def test_an_opened_document_is_warmed_at_once_and_an_edit_after_a_pause():
    """Nobody types in a document in the instant it opens; an edit means typing goes on."""
    svc = make_service(RecordingStandIn(n_ctx=4096, eos_bias=-3.0))
    svc.open_document("file:///p/a.py", "python", 1, PY)
    assert _starts_in(svc) < PREWARM_IDLE_S / 2
    svc.change_document("file:///p/a.py", 2, [TextChange("x", Range(3, 0, 3, 0))])
    assert _starts_in(svc) > PREWARM_IDLE_S / 2
    svc.close()
    assert svc.join()


@pytest.mark.parametrize("tell", ["cursor_moved", "cursor_named"])
async def test_a_rested_cursor_is_warmed_at_once_unless_the_user_just_typed(tell: str):
    """The editor's report (or highlight request) comes after its own pause: no second one.

    Right after an edit the user is typing: its requests would abandon the
    work, so the place waits for the pause as an edit's does.
    """
    svc = make_service(RecordingStandIn(n_ctx=4096, eos_bias=-3.0))
    svc.open_document("file:///p/a.py", "python", 1, PY)
    svc.change_document("file:///p/a.py", 2, [TextChange("x", Range(3, 0, 3, 0))])
    getattr(svc, tell)("file:///p/a.py", 50, 0)
    assert _starts_in(svc) > PREWARM_IDLE_S / 2
    await asyncio.sleep(PREWARM_IDLE_S + 0.05)  # the user stopped typing (a margin over the clock)
    getattr(svc, tell)("file:///p/a.py", 80, 0)
    assert _starts_in(svc) < PREWARM_IDLE_S / 2
    svc.close()
    assert svc.join()


async def test_an_edit_elsewhere_is_prewarmed_after_a_pause():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    typed = "total = value_1 + value_2\nresult"
    svc.change_document("file:///p/a.py", 2, [TextChange(typed, Range(110, 0, 110, 0))])
    await wait_for(lambda: svc.stats.prewarmed == 3)  # the edit's place, then the top again
    edit = svc.documents.get("file:///p/a.py").offset_at(111, len("result"))
    # The document's text from its start is what the opened document's pre-warm
    # evaluated, and so the window there: only the edit is evaluated again.
    assert svc._sessions["file:///p/a.py"].cut == 0
    expected = PromptBuilder(model).build(
        svc.documents.get("file:///p/a.py").text,
        edit,
        uri="file:///p/a.py",
        language="python",
        cut_hint=0,
        max_tokens=svc.settings.max_tokens,
        window_tokens=0,
    )
    assert len(expected.tokens) > svc.settings.window_tokens
    # (The stand-in has one KV cache: the top, evaluated last, goes on from the edit's
    # prompt, all but its last token.)
    assert list(model.cached_tokens)[: len(expected.tokens) - 1] == expected.tokens[:-1]
    svc.close()
    assert svc.join()


async def test_request_stats_count_the_chunked_prefill():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-30.0)  # always writes something
    svc = make_service(model)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    end = len("value_119 = compute(119, step=2)")
    s = await svc.complete(CompletionRequest("file:///p/a.py", 119, end, invoked=True))
    assert s is not None and s.stats is not None
    assert s.stats.prompt_tokens > 2 * PREFILL_CHUNK  # a first window: several chunks
    assert s.stats.reused_tokens == 0  # nothing was cached before this request
    svc.close()
    assert svc.join()


# -- the prompt rate, measured from the prefill chunks --------------------------------


def test_prefill_chunks_measure_the_prompt_rate():
    """At 1 ms a token (a fake clock): 1,000 tokens/s; short chunks, cached tokens not counted."""
    tokens = StandInModel().tokenize(PY)[:1000]
    now = [0.0]

    class Clocked(RecordingStandIn):
        def prefill(self, toks: Sequence[int]) -> int:
            now[0] += (len(toks) - common_prefix_len(self.cached_tokens, toks)) / 1000.0
            return super().prefill(toks)

    model = Clocked()
    rate = PromptRate()
    assert not rate.measured and rate.tokens_per_s == DEFAULT_PROMPT_RATE
    model.prefill(tokens[:300])  # cached before: the chunks start after it

    def clock() -> float:
        return now[0]

    assert prefill_in_chunks(model, tokens, lambda: False, chunk=128, clock=clock, rate=rate)
    assert rate.measured and rate.tokens_per_s == 1000.0
    rate = PromptRate()
    model.truncate(0)
    assert prefill_in_chunks(model, tokens[:40], lambda: False, clock=clock, rate=rate)
    assert not rate.measured  # a 40-token chunk is mostly fixed costs


# -- places of edits and requests -------------------------------------------------------


def test_places_are_few_newest_first_and_move_with_the_edits():
    places = Places()
    for at in (100, 5000, 5010, 9000, 20_000):
        places.visit(at)
    # 5010 replaced 5000 (one place); at most PLACES_KEPT, newest first.
    assert list(places) == [20_000, 9000, 5010][:PLACES_KEPT]
    assert places.latest == 20_000
    places.edited(end=6000, delta=50, length=30_050)  # 50 characters typed before 6000
    assert list(places) == [20_050, 9050, 5010]
    places.edited(end=9000, delta=-100, length=29_950)  # 9000..9100 deleted
    assert list(places) == [19_950, 9000, 5010]
    places.edited(end=None, delta=0, length=7000)  # the whole text replaced
    assert list(places) == [7000, 7000, 5010]


# -- pre-warm without the cursor report -------------------------------------------------


async def test_a_new_place_answers_from_a_first_window_and_prewarm_grows_it():
    # A context of 2,048: the top pre-warmed (about 1,700 tokens) ends before line 110.
    model = RecordingStandIn(n_ctx=2048, eos_bias=-3.0)
    svc = make_service(model)  # the default window cap (1536); 1,000 tokens/s (conftest): floor
    uri = "file:///p/a.py"
    svc.open_document(uri, "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)  # the top of the document
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 110, 5, invoked=True))  # a jump, no cursor report
    assert max(n for n, _ in model.prefills) <= FIRST_WINDOW_MIN + 1  # a first window
    first_cut = svc._sessions[uri].cut
    # While the user reads, pre-warm evaluates the full window there and moves the cut to it.
    await wait_for(lambda: svc.stats.prewarmed == 2)
    session = svc._sessions[uri]
    assert session.cut is not None and first_cut is not None and session.cut < first_cut
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 110, 4, invoked=True))  # not the answer on screen
    tokens, reused = model.prefills[0]
    assert tokens > FIRST_WINDOW_MIN + 100 and reused >= tokens - 2  # the full window, cached
    svc.close()
    assert svc.join()


async def test_a_document_that_fits_its_window_is_warmed_from_its_start_for_every_cursor():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    uri = "file:///p/small.py"
    text = "".join(f"item_{i} = load({i})\n" for i in range(40))  # ~800 tokens: fits 1536
    svc.open_document(uri, "python", 1, text)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    svc.change_document(uri, 2, [TextChange("x", Range(10, 0, 10, 0))])  # an edit at line 10
    # The edit's place, then the document from its start to its end.
    await wait_for(lambda: svc.stats.prewarmed == 3)
    doc = svc.documents.get(uri).text
    assert model.detokenize(list(model.cached_tokens)).endswith(doc[:-1])
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 35, 4, invoked=True))  # a cursor far below the edit
    tokens, reused = model.prefills[0]
    assert reused >= tokens - 2  # its window is a prefix of what was warmed
    svc.close()
    assert svc.join()


async def test_a_document_past_its_window_is_warmed_from_its_start_in_a_spare_slot():
    """Longer than its window (1536), opened and edited at once far below its top: after
    the edit's place, its top is warmed in a spare KV slot, so a jump there (no cursor
    report, no request there before) finds its prompt cached."""
    model = SlottedStandIn(n_ctx=4096, eos_bias=-3.0)
    assert kv_slots(model) is model
    svc = make_service(model)
    uri = "file:///p/mid.py"
    text = "".join(f"item_{i} = load({i})\n" for i in range(110))  # ~2,300 tokens
    assert len(model.tokenize(text, add_bos=False)) > 1536
    svc.open_document(uri, "python", 1, text)  # its own pre-warm never starts: an edit comes
    svc.change_document(uri, 2, [TextChange("x", Range(90, 0, 90, 0))])
    await wait_for(lambda: svc.stats.prewarmed == 2)  # the edit's place, then the top
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 15, 4, invoked=True))  # above the place's window
    tokens, reused = model.prefills[0]
    assert tokens > 250 and reused >= tokens - 2  # from the document's start, cached
    svc.close()
    assert svc.join()


async def test_a_place_the_top_holds_is_grown_by_the_top_past_the_window_cap():
    """No full window at the place (the top holds it): the kept cut moves to the document's
    start once the top is cached, and typing on there evaluates only the typed tokens."""
    model = SlottedStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model, window_tokens=500)
    uri = "file:///p/mid.py"
    text = "".join(f"item_{i} = load({i})\n" for i in range(110))  # ~2,300 tokens
    svc.open_document(uri, "python", 1, text)  # its own pre-warm never starts: an edit comes
    svc.change_document(uri, 2, [TextChange("x", Range(90, 0, 90, 0))])
    await wait_for(lambda: svc.stats.prewarmed == 2)  # the edit's place, then the top
    assert svc._sessions[uri].cut == 0
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 90, 1, invoked=True))
    tokens, reused = model.prefills[0]
    assert tokens > 1500 and reused >= tokens - 2  # the top: wider than 500, cached
    svc.close()
    assert svc.join()


async def test_the_top_of_a_long_document_waits_for_a_spare_slot():
    """The same on a model with one KV cache: the top is not warmed over the place the
    user was (no slot to spare for it) where it does not hold that place (a context of
    1,024: the top ends before line 90), and the jump evaluates its window."""
    model = RecordingStandIn(n_ctx=1024, eos_bias=-3.0)
    svc = make_service(model)
    uri = "file:///p/mid.py"
    svc.open_document(uri, "python", 1, "".join(f"item_{i} = load({i})\n" for i in range(110)))
    svc.change_document(uri, 2, [TextChange("x", Range(90, 0, 90, 0))])
    await wait_for(lambda: svc.stats.prewarmed == 1)
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 15, 4, invoked=True))
    assert svc.stats.prewarmed == 1  # the request came after the whole pre-warm: no top
    tokens, reused = model.prefills[0]
    assert reused < tokens - 100
    svc.close()
    assert svc.join()


async def test_the_other_latest_places_are_warmed_after_the_current_one():
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    uri = "file:///p/a.py"
    svc.open_document(uri, "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    svc.change_document(uri, 2, [TextChange("y", Range(40, 0, 40, 0))])  # place A
    svc.change_document(uri, 3, [TextChange("z", Range(110, 0, 110, 0))])  # place B, latest
    # B (its prompt; the top holds it, so no full window there), then A's full window
    # (then the top, which holds A's window as its prefix).
    await wait_for(lambda: svc.stats.prewarmed >= 3)
    model.prefills.clear()
    await svc.complete(CompletionRequest(uri, 40, 1, invoked=True))  # back at A
    tokens, reused = model.prefills[0]
    assert tokens > FIRST_WINDOW_MIN and reused >= tokens - 2  # A's full window, warmed
    svc.close()
    assert svc.join()


async def test_a_request_abandons_the_growing_window_and_the_first_one_is_kept():
    # Answers nothing (no pre-generation); the top pre-warmed ends before line 110.
    model = RecordingStandIn(n_ctx=2048, eos_bias=30.0)
    svc = make_service(model)
    uri = "file:///p/a.py"
    svc.open_document(uri, "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)
    await svc.complete(CompletionRequest(uri, 110, 5, invoked=True))  # a first window
    first_cut = svc._sessions[uri].cut
    model.prefills.clear()
    model.gate = threading.Event()
    await wait_for(model.waiting.is_set)  # pre-warm is growing the window there
    request = asyncio.ensure_future(svc.complete(CompletionRequest(uri, 110, 5, invoked=True)))
    await asyncio.sleep(0.05)  # the request abandoned the background job first thing
    model.gate.set()
    await request
    assert svc.stats.prewarmed == 1  # the growth did not finish
    assert svc._sessions[uri].cut == first_cut  # the request answered from the first window
    assert all(reused >= n - 2 for n, reused in model.prefills)  # nothing was evaluated again
    svc.close()
    assert svc.join()


def test_a_jump_takes_the_full_window_from_a_fresh_cut_where_that_is_cached():
    """The kept cut's full window leaves less than a first window to evaluate, but the full
    window from a fresh cut (pre-warm evaluated the document from its start) leaves less."""
    model = StandInModel(n_ctx=4096)
    fresh = Prompt(list(range(1, 301)), 0, 900, 900, False)
    kept = Prompt([7, *range(400, 600)], 500, 900, 900, False)
    built: list[int | None] = []

    def build(window_tokens: int, hint: int | None) -> Prompt:
        built.append(hint)
        return kept if hint is not None else fresh

    model.prefill(fresh.tokens)  # the document's start, warmed
    assert choose_window(model, build, 500, 1536, FIRST_WINDOW_MIN) is fresh
    model.truncate(0)
    model.prefill(kept.tokens)  # typing on at the kept cut: nothing else is built
    built.clear()
    assert choose_window(model, build, 500, 1536, FIRST_WINDOW_MIN) is kept
    assert built == [500]
    model.truncate(0)  # nothing cached: the kept cut's window, it fits a first window
    assert choose_window(model, build, 500, 1536, FIRST_WINDOW_MIN) is kept


def test_a_jump_into_a_warmed_top_takes_it_whatever_the_window_cap():
    """The document from its start (``build(0, 0)``), cached past the cursor by pre-warm, is
    the window at a jump, though wider than ``windowTokens``; typing on there keeps it
    without building the first window or a fresh cut's."""
    model = StandInModel(n_ctx=4096)
    top = Prompt(list(range(1, 3001)), 0, 9000, 9000, False)  # 3,000 tokens from the start
    at_cut = Prompt([7, *range(2000, 3001)], 5000, 9000, 9000, False)  # 1,536 at most
    first = Prompt([7, *range(2500, 3001)], 7000, 9000, 9000, False)
    built: list[tuple[int, int | None]] = []

    def build(window_tokens: int, hint: int | None) -> Prompt:
        built.append((window_tokens, hint))
        if window_tokens == 0:
            return top
        return first if window_tokens == FIRST_WINDOW_MIN else at_cut

    model.prefill(top.tokens[:-40])  # pre-warm's top ends 40 tokens before this prompt's
    assert choose_window(model, build, 5000, 1536, FIRST_WINDOW_MIN) is top
    model.prefill(top.tokens[:-2])  # the user typed on there: the kept cut is the top's
    built.clear()
    assert choose_window(model, build, 0, 1536, FIRST_WINDOW_MIN) is top
    assert built == [(0, 0)]
    model.truncate(0)  # nothing cached: a first window from a fresh cut
    assert choose_window(model, build, 5000, 1536, FIRST_WINDOW_MIN) is first


async def test_prewarm_tokenizes_the_other_documents_a_request_would_not_wait_for():
    """A request tokenizes at most ``corpus.REQUEST_CHARS`` of text (a large other
    document waits); pre-warm tokenizes it and the draft sources index it, so the
    next request finds it ready (``generate.prepare_drafts``)."""
    from structspec.completion.corpus import REQUEST_CHARS

    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    other = "".join(f"total_{i} = total_{i - 1} + step\n" for i in range(1, 1200))
    assert len(other) > REQUEST_CHARS
    svc.open_document("file:///p/other.py", "python", 1, other)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    host = svc._worker.host
    uri = "file:///p/other.py"

    def indexed() -> bool:  # tokenized, then indexed by the lookup source (a.py's pre-warm)
        entry = host.corpus._docs.get(uri)
        if entry is None or host.engine is None:
            return False
        index = host.engine.sources[0]._corpus.get(id(entry[2]))  # the lookup source's
        return index is not None and index[1].indexed == len(entry[2])

    await wait_for(indexed)
    assert host.corpus._docs[uri][0] == 1
    svc.close()
    assert svc.join()


async def test_a_failure_to_prepare_the_drafts_costs_the_prewarm_nothing_else():
    class Failing(RecordingStandIn):
        def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
            if "BOOM" in text:
                raise RuntimeError("the tokenizer failed")
            return super().tokenize(text, add_bos=add_bos)

    model = Failing(n_ctx=4096, eos_bias=-3.0)
    svc = make_service(model)
    svc.open_document("file:///p/other.py", "python", 1, "BOOM = 1\n" * 50)
    svc.open_document("file:///p/a.py", "python", 1, PY)
    await wait_for(lambda: svc.stats.prewarmed == 1)  # the top, counted after its drafts
    svc.close()
    assert svc.join()

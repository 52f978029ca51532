"""``run_completion``: one completion start to end, without asyncio, on scripted models."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

from tests.helpers.scripted import ScriptedModel

from structspec.completion.corpus import CorpusCache, DocumentSnapshot
from structspec.completion.generate import (
    CompletionInput,
    build_prompt,
    continue_generation,
    generation_budget,
    run_completion,
    word_end,
)
from structspec.completion.prewarm import PromptRate
from structspec.completion.prompt import (
    FIRST_ANSWER_S,
    FIRST_WINDOW_MIN,
    Prompt,
    PromptBuilder,
    first_window,
    grows,
)
from structspec.completion.snippets import SnippetChooser
from structspec.completion.suggest import BLOCK, CursorContext
from structspec.config import Settings
from structspec.engine.decode import Engine
from structspec.model.standin import StandInModel
from structspec.runtime import load_engine


class ContinuingModel(ScriptedModel):
    """Writes ``script`` after the first prompt it sees and goes on with it after a longer one."""

    def prefill(self, tokens: Sequence[int]) -> int:
        first = self._n_prompt
        reused = super().prefill(tokens)
        self._n_prompt = first or self._n_prompt
        return reused


TEXT = "def f():\n    "
SCRIPT = "x = 1\n    y = 2\n    z = 3\n"


def complete(model, settings: Settings, *, clock=None, others=(), text: str = TEXT):
    engine = load_engine(settings, model=model)
    cursor = CursorContext.at(text, len(text))
    job = CompletionInput("file:///a.py", text, len(text), "python", cursor, settings, others)
    kwargs = {"clock": clock} if clock is not None else {}
    return engine, run_completion(
        engine, PromptBuilder(model), CorpusCache(), SnippetChooser(), job, **kwargs
    )


def test_a_block_answers_its_first_line_and_the_continuation_holds_the_rest() -> None:
    settings = Settings(model="standin", max_tokens=64, sources=("lookup",))
    model = ContinuingModel(SCRIPT)
    engine, outcome = complete(model, settings, clock=lambda: 0.0)
    assert CursorContext.at(TEXT, len(TEXT)).mode == BLOCK
    assert outcome.text == "x = 1"
    assert outcome.cut is not None and not outcome.cancelled
    cont = outcome.continuation
    assert cont is not None and SCRIPT.startswith(cont.text) and cont.text.startswith("x = 1\n")
    # Pre-generation writes on until two lines past what was shown are complete.
    cursor = CursorContext.at(TEXT, len(TEXT))
    job = CompletionInput("file:///a.py", TEXT, len(TEXT), "python", cursor, settings)
    ext, _ = continue_generation(engine, CorpusCache(), job, cont, len(outcome.text))
    longer = cont.extended(ext)
    assert SCRIPT.startswith(longer.text) and longer.lines_after(len("x = 1")) >= 2
    assert longer.tokens[: len(cont.tokens)] == cont.tokens
    assert model.detokenize(list(longer.tokens)).endswith(TEXT + longer.text)
    # Until the model ends it.
    ext, _ = continue_generation(engine, CorpusCache(), job, longer, len(longer.text))
    whole = longer.extended(ext)
    assert whole.text == SCRIPT and whole.ended
    assert continue_generation(engine, CorpusCache(), job, whole, 0)[0].tokens == ()


def test_word_end_is_known_only_once_the_next_character_is_written() -> None:
    assert word_end("x = alpha", 0) == 1
    assert word_end("x = alpha", 2) is None  # "alpha" may go on
    assert word_end("foo(bar", 4) is None  # "bar" may go on
    assert word_end("foo(bar)", 4) == 7
    assert word_end("ab\ncd", 0) == 2  # a line's end is a word's end
    assert word_end("((", 0) is None
    assert word_end("f(  ", 2) == 2  # a run of spaces: no word is being written
    assert word_end("x =  1", 0) == 1


def test_past_the_generation_budget_a_run_of_spaces_ends_the_suggestion() -> None:
    """A model writing spaces after the budget is stopped there, not at ``max_tokens``."""
    script = "(" + " " * 100 + "y)\n"
    text = "def f():\n    return g(1)\n\nx = "
    settings = Settings(
        model="standin",
        max_tokens=128,
        max_generation_ms=10,
        speculative=False,
        sources=("lookup",),
    )
    ticks = iter(range(10_000))
    clock = lambda: next(ticks) * 0.004  # noqa: E731 - 4 ms per look at the clock
    _, outcome = complete(ScriptedModel(script), settings, clock=clock, text=text)
    assert outcome.text == "(" and outcome.stats.tokens < 10


def test_past_the_generation_budget_the_word_being_written_is_finished() -> None:
    """The suggestion ends at the first word end after the budget; the continuation keeps going."""
    line = "total = compute_something(alpha, beta) + gamma\n"
    text = "def f():\n    return g(1)\n\nx = "
    settings = Settings(
        model="standin", max_tokens=64, max_generation_ms=10, speculative=False, sources=("lookup",)
    )
    ticks = iter(range(10_000))
    clock = lambda: next(ticks) * 0.004  # noqa: E731 - 4 ms per look at the clock
    _, outcome = complete(ScriptedModel(line), settings, clock=clock, text=text)
    assert outcome.text is not None and outcome.text
    assert line.startswith(outcome.text) and len(outcome.text) < len(line) - 1
    assert not outcome.text[-1:].isspace() and not line[len(outcome.text)].isalnum()
    cont = outcome.continuation
    assert cont is not None and cont.text.startswith(outcome.text)
    # Without the budget the whole line comes back.
    unbounded = dataclasses.replace(settings, max_generation_ms=600_000)
    _, whole = complete(ScriptedModel(line), unbounded, clock=clock, text=text)
    assert whole.text == line.rstrip("\n")


class OnTwoThreads:
    """Makes a stand-in a ``ThreadedModel`` on two threads.

    A test sets ``decode_threads`` as the governor would (1: other processes took a core).
    """

    threads = 2
    decode_threads = 2

    def threads_pinned(self, threads: int):
        return contextlib.nullcontext()


class ThreadedScriptedModel(OnTwoThreads, ScriptedModel):
    """``ScriptedModel`` on two threads."""


class ThreadedStandIn(OnTwoThreads, StandInModel):
    """The stand-in on two threads."""


def test_the_generation_budget_halves_while_the_cores_are_contended() -> None:
    """Under contention a suggestion is cut at half the budget: shorter, a prefix of the quiet."""
    line = "total = alpha + beta * gamma - delta + epsilon * zeta - eta + theta\n"
    text = "def f():\n    return g(1)\n\nx = "
    settings = Settings(
        model="standin", max_tokens=96, max_generation_ms=80, speculative=False, sources=("lookup",)
    )
    quiet_model, loaded_model = ThreadedScriptedModel(line), ThreadedScriptedModel(line)
    loaded_model.decode_threads = 1
    assert generation_budget(quiet_model, settings) == 0.08
    assert generation_budget(loaded_model, settings) == 0.04
    assert generation_budget(ScriptedModel(line), settings) == 0.08  # no governor: never contended

    def answer(model: ScriptedModel) -> str:
        ticks = iter(range(10_000))
        clock = lambda: next(ticks) * 0.004  # noqa: E731 - 4 ms per look at the clock
        _, outcome = complete(model, settings, clock=clock, text=text)
        assert outcome.text is not None
        return outcome.text

    quiet, loaded = answer(quiet_model), answer(loaded_model)
    assert line.startswith(quiet) and len(quiet) < len(line) - 1  # the quiet budget cuts too
    assert quiet.startswith(loaded) and 0 < len(loaded) < len(quiet)
    assert not line[len(loaded)].isalnum()  # still cut at a word's end


def test_cancelled_before_generating_returns_nothing() -> None:
    settings = Settings(model="standin", max_tokens=64, sources=("lookup",))
    model = ScriptedModel(SCRIPT)
    engine = load_engine(settings, model=model)
    cursor = CursorContext.at(TEXT, len(TEXT))
    job = CompletionInput("file:///a.py", TEXT, len(TEXT), "python", cursor, settings)
    prompts, corpus = PromptBuilder(model), CorpusCache()
    outcome = run_completion(engine, prompts, corpus, SnippetChooser(), job, cancelled=lambda: True)
    assert outcome.cancelled and outcome.text is None


def _corpus_seen(sources: tuple[str, ...]) -> list:
    settings = Settings(model="standin", max_tokens=8, sources=sources)
    model = ScriptedModel(SCRIPT)
    seen: list = []
    real = Engine.stream

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("corpus"))
        return real(self, *args, **kwargs)

    Engine.stream = spy  # type: ignore[method-assign]
    try:
        other = DocumentSnapshot("file:///b.py", 1, "def helper(value):\n    return value\n")
        complete(model, settings, others=[other])
    finally:
        Engine.stream = real  # type: ignore[method-assign]
    return seen[0]


def test_the_corpus_is_collected_for_any_source_that_reads_it() -> None:
    """``motif`` reads the other buffers too: it gets them with ``lookup`` off."""
    assert any(len(seq) > 10 for seq in _corpus_seen(("motif",)))
    assert any(len(seq) > 10 for seq in _corpus_seen(("lookup",)))
    assert _corpus_seen(("python",)) == []


# -- the editor's draft sources -------------------------------------------------


def test_generated_is_the_prompt_tail_and_the_output() -> None:
    model = ScriptedModel(SCRIPT)
    settings = Settings(model="standin", max_tokens=64, sources=("recycle",))
    _, outcome = complete(model, settings, clock=lambda: 0.0)
    assert outcome.continuation is not None
    written = outcome.continuation.text  # the first line and what its last pass wrote
    n = len(written)  # one token per character
    assert n >= len("x = 1\n") and SCRIPT.startswith(written)
    assert outcome.generated[-n:] == tuple(model.tokenize(written, add_bos=False))
    assert model.detokenize(outcome.generated[:-n]).endswith("a.py\n" + TEXT)


def test_recycled_generation_drafts_after_a_diverging_keystroke() -> None:
    """The previous generation, handed back, drafts what the model writes again."""
    model = ScriptedModel(SCRIPT)
    settings = Settings(model="standin", max_tokens=64, sources=("recycle",))
    engine, first = complete(model, settings, clock=lambda: 0.0)
    assert first.stats is not None and "recycle" not in first.stats.by_source()
    text = TEXT + "q"  # not the suggestion's "x": the model runs again
    job = CompletionInput(
        "file:///a.py",
        text,
        len(text),
        "python",
        CursorContext.at(text, len(text)),
        settings,
        recent_suggestions=(first.generated,),
    )
    second = run_completion(
        engine, PromptBuilder(model), CorpusCache(), SnippetChooser(), job, clock=lambda: 0.0
    )
    assert second.stats is not None
    recycled = second.stats.by_source()["recycle"]
    assert recycled.accepted > 0 and second.text is not None and second.text.startswith("x = 1")


def test_the_text_after_the_cursor_reaches_the_suffix_source() -> None:
    model = ScriptedModel("y = 2\n")
    text = "x = 1\n"
    below = "\nz = 0\ny = 2\n"
    doc, cursor = text + below, CursorContext.at(text + below, len(text))
    settings = Settings(model="standin", max_tokens=16, sources=("suffix",))
    engine = load_engine(settings, model=model)
    job = CompletionInput("file:///a.py", doc, len(text), "python", cursor, settings)
    outcome = run_completion(
        engine, PromptBuilder(model), CorpusCache(), SnippetChooser(), job, clock=lambda: 0.0
    )
    assert outcome.stats is not None and outcome.stats.by_source()["suffix"].accepted > 0
    off = Settings(model="standin", max_tokens=16, sources=("lookup",))
    job = CompletionInput("file:///a.py", doc, len(text), "python", cursor, off)
    outcome = run_completion(
        engine, PromptBuilder(model), CorpusCache(), SnippetChooser(), job, clock=lambda: 0.0
    )
    assert outcome.stats is not None and "suffix" not in outcome.stats.by_source()


# -- a model stuck in a loop -----------------------------------------------------

LOOP = 'x = ["a", ' + '"bc", ' * 40 + "]\n"


def test_a_loop_stops_the_generation_and_its_line_is_dropped() -> None:
    settings = Settings(model="standin", max_tokens=200, sources=("lookup",))
    text = "names = compute()\n"  # a blank line after a plain line: a single line
    engine, outcome = complete(ScriptedModel(LOOP), settings, text=text)
    assert CursorContext.at(text, len(text)).mode != BLOCK
    assert outcome.text is None  # the line is a loop: nothing is shown
    assert outcome.stats is not None
    # Stopped once the loop was plain (4 repeats, 40 characters), not at max_tokens.
    assert outcome.stats.tokens < len('x = ["a", ') + 8 * len('"bc", ')


def test_a_block_keeps_its_lines_before_a_loop() -> None:
    settings = Settings(model="standin", max_tokens=200, sources=("lookup",))
    model = ContinuingModel("x = 1\n    " + LOOP)
    engine, outcome = complete(model, settings)
    assert outcome.text == "x = 1"  # the first line answers (as any block)
    cursor = CursorContext.at(TEXT, len(TEXT))
    job = CompletionInput("file:///a.py", TEXT, len(TEXT), "python", cursor, settings)
    assert outcome.continuation is not None
    ext, result = continue_generation(engine, CorpusCache(), job, outcome.continuation, 5)
    assert result is not None and result.stats.tokens < 60  # pre-generation stops at the loop too
    from structspec.completion.suggest import clean

    whole = outcome.continuation.extended(ext)
    assert clean(whole.text, cursor, BLOCK) == "x = 1"  # the looping line is not offered


#: 300 distinct lines of 13 tokens (the stand-in's tokens are characters), cursor at the end.
LONG = "".join(f"v{i:03d} = a + b\n" for i in range(300))


def _prompt(prompts: PromptBuilder, text: str, cut_hint=None, *, full: bool = False):
    settings = Settings(model="standin", window_tokens=1536)
    cursor = CursorContext.at(text, len(text))
    job = CompletionInput("file:///a.py", text, len(text), "python", cursor, settings)
    return build_prompt(prompts, SnippetChooser(), job, cut_hint, full=full)


#: ``PromptRate.observe`` as it measures (the completion tests script it: conftest.py).
_OBSERVE = PromptRate.observe


def _measured(prompts: PromptBuilder, tokens_per_s: float, chunks: int = 3) -> PromptBuilder:
    """``prompts`` after ``chunks`` prefill chunks that ran at ``tokens_per_s``."""
    for _ in range(chunks):
        _OBSERVE(prompts.rate, 128, 128 / tokens_per_s)
    return prompts


def test_the_first_window_is_the_measured_rate_times_the_target_within_floor_and_cap() -> None:
    model = ThreadedStandIn()
    prompts = PromptBuilder(model)
    # Before any measurement: the conservative default rate, so the floor.
    assert first_window(model, prompts.rate, 64, 1536) == FIRST_WINDOW_MIN
    # 6,000 tokens/s x 0.25 s = 1,500 tokens: above the floor, under the cap.
    _measured(prompts, 6000)
    assert first_window(model, prompts.rate, 64, 1536) == int(6000 * FIRST_ANSWER_S)
    assert first_window(model, prompts.rate, 64, 1000) == 1000  # windowTokens stays the cap
    # Contended: the rate of now is half the median, so 750 tokens.
    model.decode_threads = 1
    assert first_window(model, prompts.rate, 64, 1536) == 750
    _measured(prompts, 3000, chunks=4)  # the median moves with the latest chunks: 3,000
    assert first_window(model, prompts.rate, 64, 1536) == FIRST_WINDOW_MIN  # 375: the floor
    model.decode_threads = 2
    _measured(prompts, 20_000, chunks=8)
    assert prompts.rate.tokens_per_s == 20_000
    assert first_window(model, prompts.rate, 64, 1536) == 1536


def test_the_first_window_is_capped_by_two_seconds_at_the_rate_whatever_window_tokens() -> None:
    model = ThreadedStandIn()
    prompts = _measured(PromptBuilder(model), 163.1)  # Qwen2.5-Coder-1.5B on 2 cores
    # windowTokens 1536 set by the user: the first answer evaluates 326 tokens (2 s), not 512
    assert first_window(model, prompts.rate, 64, 1536) == 326
    model.decode_threads = 1  # contended: half the rate, half the window
    assert first_window(model, prompts.rate, 64, 1536) == 163
    model.decode_threads = 2
    # Qwen2.5-Coder-7B: 85 tokens, below the adaptive window's 128-token floor
    assert first_window(model, _measured(prompts, 42.9, chunks=8).rate, 64, 128) == 85
    # a fast machine is not affected
    assert first_window(model, _measured(prompts, 6000, chunks=16).rate, 64, 1536) == 1500


def test_a_capped_first_window_is_grown_to_the_window_in_effect() -> None:
    """At 43 tokens/s the first window (85 tokens) of the 128-token window grows: ``grows``."""
    model = ThreadedStandIn()
    prompts = _measured(PromptBuilder(model), 42.9)
    settings = Settings(model="standin", window_tokens=128)
    cursor = CursorContext.at(LONG, len(LONG))
    job = CompletionInput("file:///a.py", LONG, len(LONG), "python", cursor, settings)
    first = build_prompt(prompts, SnippetChooser(), job, None)
    full = build_prompt(prompts, SnippetChooser(), job, None, full=True)
    assert len(first.tokens) - 1 <= 85 < len(full.tokens) - 1 <= 128
    assert grows(first, full) and not grows(full, full)
    # the kept cut of the first window, the prompt pre-warm rebuilds there: grown all the same
    model.prefill(first.tokens[:-1])
    again = build_prompt(prompts, SnippetChooser(), job, first.cut)
    assert again.tokens == first.tokens and grows(again, full)


def test_the_fim_suffix_does_not_hide_a_short_first_window() -> None:
    """Qwen2.5-Coder-7B at 43 tokens/s: a first window of 85 tokens, the window in effect 128."""

    def fim_prompt(window: int, cut: int) -> Prompt:  # BOS, FIM prefix, window, 16+2 after
        return Prompt([0] * (2 + window + 18), cut, 5000, 5100, True, 0, 18)

    full = fim_prompt(128, 3800)
    assert grows(fim_prompt(85, 4000), full)  # 87 of 130 tokens before the cursor
    assert not grows(fim_prompt(96, 3900), full)  # kept while typing: 3/4 of its budget
    assert not grows(fim_prompt(85, 3700), full)  # the full window starts later: no wider


def test_a_new_place_gets_a_first_window_and_a_cached_full_one_is_kept() -> None:
    model = ThreadedStandIn()
    prompts = PromptBuilder(model)
    full = _prompt(prompts, LONG, full=True)
    assert 0.75 * 1536 <= len(full.tokens) - 1 <= 1536  # BOS + the window
    first = _prompt(prompts, LONG)  # nothing cached: a new place
    assert 0.75 * FIRST_WINDOW_MIN <= len(first.tokens) - 1 <= FIRST_WINDOW_MIN
    assert first.cut > full.cut and LONG[first.cut - 1] == "\n"  # still cut at a line start
    assert grows(first, full) and not grows(full, full)
    # The full window is cached (pre-warm grew it): typing on keeps it, contended or not.
    model.prefill(full.tokens[:-1])
    model.decode_threads = 1
    typed = LONG + "v"
    assert _prompt(prompts, typed, cut_hint=full.cut).cut == full.cut
    # The first window is cached and the machine quiet again: typing on keeps it (not
    # widened at a keystroke, that would evaluate a whole window again).
    model.truncate(0)
    model.prefill(first.tokens[:-1])
    model.decode_threads = 2
    assert _prompt(prompts, typed, cut_hint=first.cut).cut == first.cut
    # A measured fast machine gets the full window at a new place.
    model.truncate(0)
    assert _prompt(_measured(prompts, 20_000), LONG).cut == full.cut


def test_a_full_window_prewarmed_at_a_place_is_found_from_another_kept_cut() -> None:
    """Pre-warm evaluated a place's full window from a fresh cut; the kept cut is elsewhere."""
    model = StandInModel()
    prompts = PromptBuilder(model)
    there = LONG[: len(LONG) // 2]
    warmed = _prompt(prompts, there, full=True)
    model.prefill(warmed.tokens[:-1])
    kept = warmed.cut - 17 * 13  # 17 lines above: a cut the full window at the place keeps
    assert _prompt(prompts, there, cut_hint=kept, full=True).cut == kept
    chosen = _prompt(prompts, there, cut_hint=kept)
    assert chosen.tokens == warmed.tokens
    # A model without a thread governor is never contended: the floor applies all the same.
    assert first_window(model, prompts.rate, 64, 1536) == FIRST_WINDOW_MIN


#: A document whose top and end differ in characters per token (the stand-in drops
#: the characters it has no token for): where a window's cut lands when it is
#: moved depends on the text it was measured over.
UNEVEN = "".join(f"def f{i}(self):\n        return None\n" for i in range(100)) + LONG[: 14 * 100]


def test_a_new_places_first_window_does_not_depend_on_the_cut_kept_elsewhere() -> None:
    """A plain client's document is pre-warmed from its top (the kept cut 0); at a new
    place below it the first answer comes from the same window as when nothing was kept."""
    prompts = PromptBuilder(StandInModel())
    cold = _prompt(prompts, UNEVEN)
    assert len(cold.tokens) - 1 <= FIRST_WINDOW_MIN and cold.cut > 0  # a first window
    assert _prompt(prompts, UNEVEN, cut_hint=0).tokens == cold.tokens  # kept: the top
    kept = UNEVEN.index("def f50")  # kept: a place in between
    assert _prompt(prompts, UNEVEN, cut_hint=kept).tokens == cold.tokens


def test_a_full_window_saved_before_a_restart_counts_as_cached(tmp_path) -> None:
    """The on-disk prefix cache reads a saved window back in milliseconds: no first window."""
    from structspec.model.prefix_cache import PrefixCache

    def restarted() -> StandInModel:
        model = StandInModel()
        model.prefix_cache = PrefixCache(tmp_path, model.identity())
        return model

    before = restarted()
    full = _prompt(PromptBuilder(before), LONG, full=True)
    before.prefill(full.tokens[:-1])
    before.save_prefixes()  # the idle time after it: saved on disk
    after = restarted()  # a new process: nothing in its KV cache
    assert _prompt(PromptBuilder(after), LONG).tokens == full.tokens
    assert _prompt(PromptBuilder(StandInModel()), LONG).tokens != full.tokens  # no disk cache

"""Speculative decoding equals greedy decoding exactly, on the deterministic stand-in model.

The stand-in computes every row on its own, so the two must agree bit for bit:
tokens, text and stop reason, whatever the drafts are. Drafts come from an
oracle that knows the greedy continuation and corrupts it at a chosen position
(so every rejection position is exercised), from random noise, and from the
real sources.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.lookup import LookupSource
from structspec.drafts.nearby import NearbySource
from structspec.drafts.recycle import RecycleSource
from structspec.drafts.suffix import SuffixSource
from structspec.engine import (
    AcceptanceEstimator,
    CostModel,
    DraftPlanner,
    Engine,
    GenerationOptions,
)
from structspec.engine.control import ThreadCosts
from structspec.model.base import Interrupt
from structspec.model.extras import interrupted_by
from structspec.model.standin import EOS, StandInModel

ALPHABET = "ab(): \n=x"


class OracleSource:
    """Drafts the true greedy continuation, wrong from position ``wrong_at`` on."""

    name = "oracle"

    def __init__(self, truth: Sequence[int], n_prompt: int, length: int, wrong_at: int, noise: int):
        self.truth = list(truth)
        self.n_prompt = n_prompt
        self.length = length
        self.wrong_at = wrong_at
        self.noise = noise

    def propose(self, ctx: DraftContext) -> Draft | None:
        if self.length == 0:
            return Draft((), self.name)
        done = len(ctx.tokens) - self.n_prompt
        nxt = self.truth[done : done + self.length]
        # Run past the end of the truth (past max tokens or EOS) with EOS and noise.
        nxt += [EOS, self.noise] * self.length
        draft = nxt[: self.length]
        if self.wrong_at < len(draft):
            draft[self.wrong_at] = (draft[self.wrong_at] + 1 + self.noise) % ctx.model.n_vocab
        return Draft(tuple(draft[: ctx.max_tokens]), self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


class NoiseSource:
    name = "noise"

    def __init__(self, seq: Sequence[int]):
        self.seq = list(seq)
        self.i = 0

    def propose(self, ctx: DraftContext) -> Draft | None:
        self.i += 1
        n = self.seq[self.i % len(self.seq)] % 9
        return Draft(tuple(self.seq[(self.i + j) % len(self.seq)] for j in range(n)), self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


def always_draft() -> DraftPlanner:
    """A flat cost table: any draft with any chance of acceptance is sent."""
    return DraftPlanner(CostModel.linear(1.0, 0.0), min_gain=0.0)


def greedy(model: StandInModel, prompt: list[int], opts: GenerationOptions):
    return Engine(model).generate(prompt, GenerationOptions(opts.max_tokens, opts.stop, False))


def model_for(seed: int, eos_bias: float = -2.0) -> StandInModel:
    return StandInModel(seed=seed, alphabet=ALPHABET, eos_bias=eos_bias, n_ctx=512)


prompts = st.text(alphabet=ALPHABET, min_size=0, max_size=40)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 50),
    prompt=prompts,
    max_tokens=st.integers(1, 60),
    length=st.integers(0, 15),
    wrong_at=st.integers(0, 16),
    noise=st.integers(0, 20),
    eos_bias=st.sampled_from([-3.0, -1.0, 0.5]),
    stop=st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=3), max_size=2),
)
def test_oracle_drafts_give_greedy_output(
    seed, prompt, max_tokens, length, wrong_at, noise, eos_bias, stop
):
    model = model_for(seed, eos_bias)
    tokens = model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=max_tokens, stop=tuple(stop))
    ref = greedy(model, tokens, opts)
    oracle = OracleSource(ref.tokens, len(tokens), length, wrong_at, noise)
    spec = Engine(model, [oracle], always_draft()).generate(tokens, opts)
    assert spec.tokens == ref.tokens
    assert spec.text == ref.text
    assert spec.stop_reason == ref.stop_reason
    if length and wrong_at >= length and ref.stats.tokens > 2 and not stop:
        assert spec.stats.passes < ref.stats.passes  # a perfect oracle saves passes


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 50), prompt=prompts, length=st.integers(1, 15))
def test_no_draft_token_past_a_stop_is_verified(seed, prompt, length):
    """A draft is cut before the token that would end the text: its row is never needed."""
    model = model_for(seed)
    tokens = model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=40, stop=("\n",))
    ref = greedy(model, tokens, opts)
    oracle = OracleSource(ref.tokens, len(tokens), length, length, 0)
    sent: list[list[int]] = []
    verify = model.verify

    def logged(rows):
        sent.append(list(rows[1:]))
        return verify(rows)

    model.verify = logged  # type: ignore[method-assign]
    spec = Engine(model, [oracle], always_draft()).generate(tokens, opts)
    assert (spec.tokens, spec.text, spec.stop_reason) == (ref.tokens, ref.text, ref.stop_reason)
    newline = model.tokenize("\n", add_bos=False)[0]
    assert all(newline not in draft for draft in sent)  # the model's own bonus ends the line


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 50), prompt=prompts)
def test_a_draft_cut_by_a_stop_is_priced_as_cut(seed, prompt):
    """A proposal the line's end cuts to one token is priced as one token, and not sent.

    On a CPU-like cost table (a second row costs as much as the first) one
    drafted token never pays. The planner is told the proposals are always
    right, so it sends every long one: only the cut decides.
    """
    model = model_for(seed)
    tokens = model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=40, stop=("\n",))
    ref = greedy(model, tokens, opts)
    oracle = OracleSource(ref.tokens, len(tokens), 8, 8, 0)
    cost = CostModel((1.0, 2.0, 2.2, 2.4, 2.6, 2.8, 3.0, 3.2, 3.4))
    planner = DraftPlanner(cost, AcceptanceEstimator({"oracle": 1.0}, prior_weight=1e9))
    sent: list[int] = []
    verify = model.verify

    def logged(rows):
        sent.append(len(rows) - 1)
        return verify(rows)

    model.verify = logged  # type: ignore[method-assign]
    spec = Engine(model, [oracle], planner).generate(tokens, opts)
    assert (spec.tokens, spec.text, spec.stop_reason) == (ref.tokens, ref.text, ref.stop_reason)
    assert 1 not in sent  # a one-token draft: two rows for at most two tokens


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 30),
    prompt=prompts,
    max_tokens=st.integers(1, 80),
    noise=st.lists(st.integers(0, len(ALPHABET) + 1), min_size=1, max_size=30),
)
def test_noise_and_real_sources_give_greedy_output(seed, prompt, max_tokens, noise):
    model = model_for(seed)
    tokens = model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=max_tokens)
    ref = greedy(model, tokens, opts)
    sources = [LookupSource(), NearbySource(lines=2), NoiseSource(noise)]
    spec = Engine(model, sources, always_draft()).generate(tokens, opts)
    assert spec.tokens == ref.tokens
    assert spec.stop_reason == ref.stop_reason


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 30),
    prompt=prompts,
    max_tokens=st.integers(1, 60),
    suffix=st.text(alphabet=ALPHABET, max_size=40),
    cut=st.integers(0, 60),
    edit=st.text(alphabet=ALPHABET, max_size=3),
    stop=st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=3), max_size=1),
)
def test_editor_sources_give_greedy_output(seed, prompt, max_tokens, suffix, cut, edit, stop):
    """Recycled suggestions, the suffix and nearby lines draft; the output stays greedy.

    The previous suggestion is the greedy output itself with an edit spliced in
    at ``cut`` (what a user's keystroke does to it), and the suffix holds part
    of it too, so that their drafts are often right and sometimes wrong.
    """
    model = model_for(seed)
    tokens = model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=max_tokens, stop=tuple(stop))
    ref = greedy(model, tokens, opts)
    out = ref.tokens
    recent = [
        (*tokens[-8:], *out[:cut], *model.tokenize(edit, add_bos=False), *out[cut:]),
        tuple(out[cut:]),
    ]
    suffix_tokens = model.tokenize(suffix, add_bos=False) + out[cut // 2 :]
    sources = [RecycleSource(), SuffixSource(), NearbySource(lines=3), LookupSource()]
    spec = (
        Engine(model, sources, always_draft())
        .stream(tokens, opts, suffix_tokens=suffix_tokens, recent_suggestions=recent)
        .run()
    )
    assert spec.tokens == ref.tokens
    assert spec.text == ref.text
    assert spec.stop_reason == ref.stop_reason


def test_recycled_suggestion_is_accepted_whole():
    """The previous generation, cut by a keystroke that matched its first token, drafts the rest."""
    model = model_for(7, eos_bias=-5.0)
    tokens = model.tokenize("ab(x):\n")
    opts = GenerationOptions(max_tokens=30)
    ref = greedy(model, tokens, opts)
    typed = tokens + ref.tokens[:1]
    spec = (
        Engine(model, [RecycleSource()], always_draft())
        .stream(typed, opts, recent_suggestions=[(*tokens, *ref.tokens)])
        .run()
    )
    assert spec.tokens == ref.tokens[1:] + greedy(model, tokens + ref.tokens, opts).tokens[:1]
    recycled, st = spec.stats.by_source()["recycle"], spec.stats
    # every token but each pass's bonus token was drafted by recycling, and accepted
    assert recycled.accepted == recycled.drafted == st.tokens - st.passes > 0
    assert st.passes == 2  # 30 tokens: two passes of 15 rows


@pytest.mark.parametrize("wrong_at", range(0, 9))
def test_rejection_at_every_position(wrong_at):
    model = model_for(7, eos_bias=-5.0)
    tokens = model.tokenize("ab(x):\n")
    opts = GenerationOptions(max_tokens=40)
    ref = greedy(model, tokens, opts)
    oracle = OracleSource(ref.tokens, len(tokens), 8, wrong_at, 3)
    spec = Engine(model, [oracle], always_draft()).generate(tokens, opts)
    assert spec.tokens == ref.tokens
    # Every pass accepts exactly min(wrong_at, 8) drafts (until the budget runs out).
    full = [t for t in spec.stats.trace if t.drafted == 8]
    assert full and all(t.accepted == min(wrong_at, 8) for t in full)


def test_stats_account_for_every_token():
    model = model_for(3, eos_bias=-5.0)
    tokens = model.tokenize("x = a\nx = a\nx")
    ref = greedy(model, tokens, GenerationOptions(max_tokens=50))
    oracle = OracleSource(ref.tokens, len(tokens), 5, 99, 0)
    res = Engine(model, [oracle], always_draft()).generate(tokens, GenerationOptions(max_tokens=50))
    s = res.stats
    assert s.tokens == len(res.tokens) == 50
    assert s.passes == len(s.trace)
    assert s.accepted == sum(t.accepted for t in s.trace)
    assert s.drafted == sum(t.drafted for t in s.trace) == s.sources["oracle"].drafted
    # every pass emits its accepted drafts plus one bonus token (the last may be cut by max_tokens)
    assert s.tokens <= s.passes + s.accepted


def test_cache_is_consistent_after_generation_and_reused():
    model = model_for(4, eos_bias=-5.0)
    tokens = model.tokenize("ab = x\n")
    engine = Engine(model, [LookupSource()], always_draft())
    first = engine.generate(tokens, GenerationOptions(max_tokens=30))
    assert list(model.cached_tokens) == (tokens + first.tokens)[: len(model.cached_tokens)]
    second = engine.generate(tokens + first.tokens[:10], GenerationOptions(max_tokens=5))
    assert second.stats.reused_tokens == len(tokens) + 10 - 1
    assert second.tokens == first.tokens[10:15]


def test_on_fewer_threads_the_planner_judges_drafts_by_their_table():
    """A table where extra rows cost far more (one thread) stops drafts; the text is the same."""
    model = model_for(3, eos_bias=-5.0)
    tokens = model.tokenize("x = a\nx = a\nx")
    ref = greedy(model, tokens, GenerationOptions(max_tokens=40))
    oracle = OracleSource(ref.tokens, len(tokens), 4, 99, 0)
    cheap = CostModel.linear(10.0, 1.0)
    dear = CostModel.linear(10.0, 100.0)
    threads = [2]
    engine = Engine(
        model, [oracle], DraftPlanner(cheap), costs=ThreadCosts(2, cheap, dear, lambda: threads[0])
    )
    both = engine.generate(tokens, GenerationOptions(max_tokens=40))
    assert both.stats.drafted > 0 and both.tokens == ref.tokens
    threads[0] = 1
    one = engine.generate(tokens, GenerationOptions(max_tokens=40))
    assert one.stats.drafted == 0 and one.tokens == ref.tokens
    assert engine.planner is not None and engine.planner.cost is dear


def test_cancel_between_passes():
    model = model_for(5, eos_bias=-5.0)
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    res = (
        Engine(model)
        .stream(model.tokenize("ab"), GenerationOptions(max_tokens=50), cancelled=cancelled)
        .run()
    )
    assert res.stop_reason == "cancelled" and len(res.tokens) == 3


def test_abandoned_stream_ends_cancelled():
    model = model_for(5, eos_bias=-5.0)
    gen = Engine(model).stream(model.tokenize("ab"), GenerationOptions(max_tokens=50))
    it = iter(gen)
    next(it)
    it.close()
    assert gen.result is not None and gen.result.stop_reason == "cancelled"


@pytest.mark.parametrize("at_pass", [0, 1, 4])
def test_an_interrupted_pass_ends_the_generation_with_what_was_written(at_pass):
    """A decode interrupted part-way ends the generation there, as cancelled; nothing is lost."""
    model = model_for(5, eos_bias=-5.0)
    prompt = model.tokenize("ab(x")
    opts = GenerationOptions(max_tokens=30)
    ref = greedy(model, prompt, opts)
    oracle = OracleSource(ref.tokens, len(prompt), 3, wrong_at=2, noise=0)
    engine = Engine(model, [oracle], always_draft())
    stop = Interrupt()
    checks = {"n": 0}

    def cancelled() -> bool:  # asked once before each pass: the interrupt comes during pass at_pass
        checks["n"] += 1
        if checks["n"] > at_pass:
            stop.set()
        return False

    with interrupted_by(model, stop):
        res = engine.stream(prompt, opts, cancelled=cancelled).run()
    assert res.stop_reason == "cancelled"
    assert len(res.tokens) == res.stats.tokens and ref.tokens[: len(res.tokens)] == res.tokens
    assert bool(res.tokens) == (at_pass > 0)
    assert list(model.cached_tokens) == [*prompt, *res.tokens][:-1]  # all but the pending token
    # The cache is consistent: the next generation is the greedy one again, whole.
    assert engine.generate(prompt, opts).tokens == ref.tokens

"""Token healing, proven on the stand-in model with multi-character pieces.

The stand-in tokenizes longest piece first, so a prompt cut inside a word ends
in a token the whole word would not use (``ret`` where the word is ``return``),
as with a real BPE vocabulary. Speculative output with healing must equal a
brute-force constrained greedy decoder written here independently, for every
healing length, with any drafts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.drafts.base import Draft, DraftContext
from structspec.engine import CostModel, DraftPlanner, Engine, EngineError, GenerationOptions
from structspec.engine.healing import (
    MAX_HEAL_TOKENS,
    Healing,
    VocabIndex,
    plan_healing,
    trailing_word_bytes,
    vocab_index,
)
from structspec.engine.sampling import Sampling
from structspec.model.standin import BOS, EOS, StandInModel

PIECES = ("return", "ret", "re", "result", "res", "ult", "urn", "value", "val", "self", "print")
WORDS = ("return", "result", "value", "self", "print", "values", "resolve")
CONTEXTS = ("def f(a):\n    ", "x = ", "if a:\n        ", "", "(", "a.b", "print(")


def model_for(seed: int) -> StandInModel:
    return StandInModel(seed=seed, pieces=PIECES, eos_bias=-3.0, n_ctx=512)


def always_draft() -> DraftPlanner:
    return DraftPlanner(CostModel.linear(1.0, 0.0), min_gain=0.0)


class Oracle:
    """Drafts the true continuation, corrupted at ``wrong_at``; with ``noise``, random tokens."""

    name = "oracle"

    def __init__(
        self,
        truth: Sequence[int],
        n_prompt: int,
        length: int,
        wrong_at: int,
        noise: int | None = None,
    ) -> None:
        self.truth, self.n_prompt = list(truth), n_prompt
        self.length, self.wrong_at = length, wrong_at
        self.rng = None if noise is None else np.random.default_rng(noise)

    def propose(self, ctx: DraftContext) -> Draft | None:
        if self.rng is not None:
            tokens = self.rng.integers(1, ctx.model.n_vocab, self.length)
            return Draft(tuple(int(t) for t in tokens), self.name)
        done = len(ctx.tokens) - self.n_prompt
        draft = (self.truth[done : done + self.length] + [EOS] * self.length)[: self.length]
        if self.wrong_at < len(draft):
            draft[self.wrong_at] = (draft[self.wrong_at] + 1) % ctx.model.n_vocab
        return Draft(tuple(draft), self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


def reference(model: StandInModel, prompt: list[int], n_removed: int, max_tokens: int):
    """Constrained greedy by brute force over the vocabulary: (tokens, text after the cursor)."""
    removed = b"".join(model.token_bytes(t) for t in prompt[len(prompt) - n_removed :])
    return constrained_greedy(model, prompt[: len(prompt) - n_removed], removed, max_tokens)


def constrained_greedy(model: StandInModel, ctx: list[int], removed: bytes, max_tokens: int):
    """Greedy after ``ctx``, the output forced to start with ``removed`` (brute force)."""
    ctx = list(ctx)
    out: list[int] = []
    data = b""
    for _ in range(max_tokens):
        row = model.logits(ctx)
        rest = removed[len(data) :] if len(data) < len(removed) else b""
        if rest:
            allowed = [
                t
                for t in range(model.n_vocab)
                if (p := model.token_bytes(t)) and (p.startswith(rest) or rest.startswith(p))
            ]
            tok = allowed[int(np.argmax(row[allowed]))]
        else:
            tok = int(np.argmax(row))
        if tok == EOS:
            break
        out.append(tok)
        ctx.append(tok)
        data += model.token_bytes(tok)
    assert data.startswith(removed)
    return out, data[len(removed) :].decode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 40),
    context=st.sampled_from(CONTEXTS),
    word=st.sampled_from(WORDS),
    cut=st.integers(1, 7),
    length=st.integers(0, 8),
    wrong_at=st.integers(0, 9),
)
def test_speculative_healing_equals_constrained_greedy(seed, context, word, cut, length, wrong_at):
    model = model_for(seed)
    prompt = model.tokenize(context + word[: min(cut, len(word))])
    opts = GenerationOptions(max_tokens=24, speculative=False, token_healing=True)
    plain = Engine(model).generate(prompt, opts)
    n = plain.stats.healed_tokens
    tokens, text = reference(model, list(prompt), n, 24)
    assert plain.tokens == tokens
    assert plain.text == text
    assert plain.prompt_tokens == list(prompt[: len(prompt) - n])
    for noise in (None, wrong_at):  # the truth corrupted at ``wrong_at``, then random drafts
        drafts = Oracle(plain.tokens, len(prompt) - n, length, wrong_at, noise)
        spec = Engine(model, [drafts], always_draft()).generate(
            prompt, GenerationOptions(max_tokens=24, token_healing=True)
        )
        assert spec.tokens == plain.tokens
        assert (spec.text, spec.stop_reason) == (plain.text, plain.stop_reason)


@pytest.mark.parametrize("cut", range(1, 6))
@pytest.mark.parametrize("wrong_at", [0, 1, 3])
def test_healing_at_a_cursor_inside_the_prompt(cut: int, wrong_at: int) -> None:
    """A fill-in-the-middle layout: the partial word before the suffix moves into the output."""
    model = model_for(7)
    prefix = model.tokenize("def f(a):\n    " + "result"[:cut])
    rest = model.tokenize("\n\n    return a\n\n", add_bos=False)
    opts = GenerationOptions(max_tokens=16, speculative=False, token_healing=True)
    plain = Engine(model).generate([*prefix, *rest], opts, cursor=len(prefix))
    n = plain.stats.healed_tokens
    assert n >= 1
    removed = "result"[:cut].encode()
    assert plain.prompt_tokens == [*prefix[: len(prefix) - n], *rest]
    tokens, text = constrained_greedy(model, plain.prompt_tokens, removed, 16)
    assert (plain.tokens, plain.text) == (tokens, text)
    oracle = Oracle(plain.tokens, len(plain.prompt_tokens), 4, wrong_at)
    spec = Engine(model, [oracle], always_draft()).generate(
        [*prefix, *rest], replace(opts, speculative=True), cursor=len(prefix)
    )
    assert (spec.tokens, spec.text) == (plain.tokens, plain.text)


def test_cursor_outside_the_prompt_is_a_clear_error() -> None:
    model = model_for(0)
    with pytest.raises(EngineError, match="cursor"):
        Engine(model).generate(model.tokenize("ab"), GenerationOptions(4), cursor=9)


@pytest.mark.parametrize("cut", range(1, 6))
def test_every_healing_length_is_exercised(cut: int) -> None:
    """``return`` cut after 1..5 characters is healed and the cut reproduced.

    (Whole, ``return`` is one token that no entry extends: not healed.)
    """
    model = model_for(0)
    prompt = model.tokenize("def f(a):\n    " + "return"[:cut])
    result = Engine(model).generate(prompt, GenerationOptions(16, token_healing=True))
    assert result.stats.healed_tokens >= 1
    typed = "return"[:cut]
    assert model.detokenize(result.tokens).startswith(typed)
    assert model.detokenize(result.tokens)[len(typed) :] == result.text


def test_stream_deltas_start_at_the_cursor() -> None:
    model = model_for(1)
    prompt = model.tokenize("x = re")
    gen = Engine(model).stream(prompt, GenerationOptions(12, token_healing=True))
    deltas = [step.text for step in gen]
    assert gen.result is not None and gen.result.stats.healed_tokens == 1
    assert "".join(deltas) == gen.result.text
    assert model.detokenize(gen.result.tokens) == "re" + gen.result.text


def test_stop_strings_apply_after_the_cursor() -> None:
    """A stop string equal to the removed text does not stop before anything is written."""
    model = model_for(2)
    prompt = model.tokenize("x = re")
    result = Engine(model).generate(prompt, GenerationOptions(12, stop=("re",), token_healing=True))
    full = Engine(model).generate(prompt, GenerationOptions(12, token_healing=True))
    assert result.text == full.text.split("re")[0]


# -- fallbacks ------------------------------------------------------------------


def test_start_of_file_is_not_healed() -> None:
    model = model_for(0)
    for prompt in ([BOS], []):
        healed = Engine(model).generate(prompt, GenerationOptions(8, token_healing=True))
        plain = Engine(model).generate(prompt, GenerationOptions(8))
        assert healed.stats.healed_tokens == 0
        assert healed.tokens == plain.tokens


def test_prompt_that_is_only_the_partial_word_keeps_bos() -> None:
    model = model_for(0)
    prompt = model.tokenize("ret")
    assert prompt == [BOS, model.tokenize("ret", add_bos=False)[0]]
    result = Engine(model).generate(prompt, GenerationOptions(8, token_healing=True))
    assert result.prompt_tokens == [BOS]
    assert result.stats.healed_tokens == 1
    assert model.detokenize(result.tokens).startswith("ret")


def test_prompt_without_bos_keeps_its_first_token() -> None:
    model = model_for(0)
    assert plan_healing(model.tokenize("ret", add_bos=False), model) is None
    healing = plan_healing(model.tokenize("a ret", add_bos=False), model)
    assert healing is not None and healing.removed == b"ret"


def test_partial_token_no_vocabulary_entry_extends_is_not_healed() -> None:
    """One character per token: no token extends the last one, so generation is plain."""
    model = StandInModel(seed=4, eos_bias=-3.0)
    prompt = model.tokenize("def f(a):\n    ret")
    healed = Engine(model).generate(prompt, GenerationOptions(16, token_healing=True))
    plain = Engine(model).generate(prompt, GenerationOptions(16))
    assert healed.stats.healed_tokens == 0
    assert (healed.tokens, healed.text) == (plain.tokens, plain.text)


@pytest.mark.parametrize("text", ["x = ret(", "ret ", "ret\n", "a.", "1 + "])
def test_prompt_not_ending_mid_word_is_not_healed(text: str) -> None:
    model = model_for(0)
    assert plan_healing(model.tokenize(text), model) is None


class FakeVocab:
    """Just a vocabulary: what ``plan_healing`` reads of a model."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self.pieces = list(pieces)
        self.n_vocab = len(pieces)

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token] if 0 <= token < self.n_vocab else b""


def test_inside_a_multibyte_character_is_not_healed() -> None:
    #        0    1       2       3        4        5              6
    vocab = [b"", b"", b"caf", b"\xc3", b"\xa9", b"caf\xc3\xa9s", b"x"]
    model = FakeVocab(vocab)
    assert plan_healing([0, 2, 3], model) is None  # "caf" + half of "é"
    healing = plan_healing([0, 2, 3, 4], model)  # "café": a whole word again
    assert healing is not None
    assert (healing.removed, healing.n_tokens) == ("café".encode(), 3)
    assert healing.allowed(0).tolist() == [2, 5]


def test_trailing_word_bytes() -> None:
    assert trailing_word_bytes(b"    ret") == 3
    assert trailing_word_bytes(b"x = self_1") == 6
    assert trailing_word_bytes("a caf\u00e9".encode()) == 5
    assert trailing_word_bytes("\u5909\u6570".encode()) == 6  # a CJK identifier
    assert trailing_word_bytes(b"caf\xc3") == 0
    assert trailing_word_bytes(b"foo(") == 0
    assert trailing_word_bytes(b"") == 0
    assert trailing_word_bytes(b"\xa9ab") == 2  # a stray continuation byte ends the word


def test_healing_is_bounded_in_tokens() -> None:
    model = StandInModel(seed=0, pieces=("fghij",))
    prompt = model.tokenize("x = abcdefghi")  # nine one-character tokens of one word
    healing = plan_healing(prompt, model)
    assert healing is not None and healing.n_tokens == MAX_HEAL_TOKENS
    assert healing.removed == b"fghi"


def test_longest_extended_span_is_chosen() -> None:
    model = model_for(0)
    prompt = model.tokenize("x = resul")  # res + u + l: only "resul" is extended (result)
    healing = plan_healing(prompt, model)
    assert healing is not None and healing.removed == b"resul" and healing.n_tokens == 3
    prompt = model.tokenize("x = resolz")  # no entry extends "resolz", "olz", "lz" or "z"
    assert plan_healing(prompt, model) is None


def test_constraint_only_allows_reachable_prefixes() -> None:
    vocab = [b"", b"", b"ab", b"a", b"abx", b"q"]
    index = VocabIndex(vocab)
    healing = Healing(b"ab", 1, index)
    assert healing.allowed(0).tolist() == [2, 4]  # "a" would leave "b", which no token starts
    assert healing.advance(0, b"a") is None
    assert healing.advance(0, b"abx") == 2
    assert not healing.active(2)


class Fixed:
    """Drafts the same tokens on every pass."""

    name = "fixed"

    def __init__(self, tokens: Sequence[int]) -> None:
        self.tokens = tuple(tokens)

    def propose(self, ctx: DraftContext) -> Draft | None:
        return Draft(self.tokens, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


def test_drafts_violating_the_constraint_end_the_draft() -> None:
    model = model_for(3)
    prompt = model.tokenize("x = ret")
    truth = Engine(model).generate(prompt, GenerationOptions(8, token_healing=True))
    r, z = model.tokenize("rz", add_bos=False)
    engine = Engine(model, [Fixed([r, z, z, z])], always_draft())
    result = engine.generate(prompt, GenerationOptions(8, token_healing=True))
    assert result.tokens == truth.tokens
    # "r" is allowed (a prefix of "ret"), "z" is not: the draft sent was just "r".
    assert result.stats.trace[0].drafted == 1


def test_sampling_composes_with_healing() -> None:
    model = model_for(5)
    prompt = model.tokenize("if a:\n        re")
    for seed in range(30):
        opts = GenerationOptions(10, token_healing=True, sampling=Sampling(1.5, seed=seed))
        plain = Engine(model).generate(prompt, replace(opts, speculative=False))
        assert model.detokenize(plain.tokens).startswith("re")
        oracle = Oracle(plain.tokens, len(plain.prompt_tokens), 3, seed % 4)
        spec = Engine(model, [oracle], always_draft()).generate(prompt, opts)
        assert spec.tokens == plain.tokens


# -- the index ------------------------------------------------------------------


def test_vocab_index_ranges() -> None:
    vocab = [b"", b"r", b"re", b"ret", b"return", b"rf", b"\xff", b"\xff\xff", b"\xffa", b"s"]
    index = VocabIndex(vocab)
    assert len(index) == 9
    assert sorted(index.starting_with(b"re").tolist()) == [2, 3, 4]
    assert sorted(index.starting_with(b"\xff").tolist()) == [6, 7, 8]
    assert sorted(index.starting_with(b"\xff\xff").tolist()) == [7]
    assert index.starting_with(b"z").tolist() == []
    assert index.extends(b"ret") and not index.extends(b"return") and not index.extends(b"x")
    assert index.exact(b"ret") == [3] and index.exact(b"") == []


def test_vocab_index_is_built_once_per_model() -> None:
    model = model_for(0)
    assert vocab_index(model) is vocab_index(model)
    assert vocab_index(model) is not vocab_index(model_for(0))


def test_vocab_index_agrees_with_brute_force_on_a_large_vocabulary() -> None:
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(b"abc \xc3\xa9\xff", dtype=np.uint8)
    vocab = [bytes(rng.choice(alphabet, int(rng.integers(1, 6)))) for _ in range(20_000)]
    index = VocabIndex(vocab)
    for prefix in [b"a", b"ab", b"\xff", b"\xc3\xa9", b"c a", b"zz"]:
        expect = {i for i, p in enumerate(vocab) if p.startswith(prefix)}
        assert set(index.starting_with(prefix).tolist()) == expect

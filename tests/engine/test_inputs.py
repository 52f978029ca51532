"""Bad and edge inputs to the engine: empty prompts, prompts past the context."""

from __future__ import annotations

import pytest

from structspec.engine import Engine, EngineError, GenerationOptions, fit_prompt
from structspec.model.standin import BOS, StandInModel


def test_empty_prompt_generates_from_bos():
    model = StandInModel(seed=1, eos_bias=-5.0)
    res = Engine(model).generate([], GenerationOptions(max_tokens=5))
    assert res.prompt_tokens == [BOS] and len(res.tokens) == 5


def test_empty_prompt_without_bos_is_a_clear_error():
    class NoBos(StandInModel):
        def bos_token(self):
            return None

    with pytest.raises(EngineError, match="empty"):
        Engine(NoBos(seed=1)).generate([], GenerationOptions(max_tokens=5))


def test_prompt_longer_than_context_is_truncated_from_the_left():
    model = StandInModel(seed=2, n_ctx=256, eos_bias=-5.0)
    tokens = model.tokenize("abc " * 200)
    res = Engine(model).generate(tokens, GenerationOptions(max_tokens=32))
    assert res.warnings and "truncated" in res.warnings[0]
    assert res.prompt_tokens[0] == BOS
    assert res.prompt_tokens[1:] == tokens[-(len(res.prompt_tokens) - 1) :]
    assert len(res.prompt_tokens) + 32 <= 256
    assert len(res.tokens) == 32


def test_max_tokens_larger_than_context_is_clamped():
    model = StandInModel(seed=2, n_ctx=128, eos_bias=-9.0)
    prompt = model.tokenize("ab")
    res = Engine(model).generate(prompt, GenerationOptions(max_tokens=10_000))
    assert res.warnings and len(res.tokens) <= 128 - len(prompt) - 16  # what fits after it


def test_fit_prompt_keeps_short_prompts():
    assert fit_prompt([0, 5, 6], 100, 10, 0) == ([0, 5, 6], 0, 10)


def test_fit_prompt_keeps_a_prompt_that_fits_and_clamps_the_answer():
    """A ``max_tokens`` as large as the context cut 961 tokens off a 3,001-token prompt
    that fitted (a chat's system prompt first); llama-server keeps the prompt and
    generates what fits, and so does this now."""
    prompt = [0, *range(1, 3001)]
    assert fit_prompt(prompt, 4096, 4096, 0) == (prompt, 0, 4096 - 3001 - 16)
    assert fit_prompt(prompt, 4096, 1 << 20, 0) == (prompt, 0, 4096 - 3001 - 16)
    snug = [0, *range(1, 4096 - 16 - 16)]  # leaves exactly the floor
    assert fit_prompt(snug, 4096, 128, 0) == (snug, 0, 16)


def test_fit_prompt_cuts_a_prompt_that_leaves_no_room():
    long = [0, *range(1, 5000)]
    kept, dropped, max_tokens = fit_prompt(long, 4096, 128, 0)
    assert kept[0] == 0 and kept[-1] == 4999 and max_tokens == 128
    assert len(kept) + 128 + 16 == 4096 and dropped == 5000 - len(kept)


def test_prepare_hands_the_inputs_to_the_sources_that_digest_them():
    """``Engine.prepare`` (idle time) calls ``prepare`` of each source that has one
    and the policy allows, with the generation's inputs; it stops when asked."""
    from structspec.drafts.base import DraftContext, SourcePolicy

    seen: list[tuple[str, list[int], list[list[int]], str | None]] = []

    class Digests:
        def __init__(self, name: str) -> None:
            self.name = name

        def propose(self, ctx: DraftContext) -> None:
            return None

        def observe(self, draft: object, accepted: int) -> None:
            return None

        def prepare(self, ctx: DraftContext, stop: object) -> None:
            seen.append((self.name, ctx.tokens, [list(s) for s in ctx.corpus], ctx.language))

    class Plain(Digests):
        prepare = None  # type: ignore[assignment]

    model = StandInModel(seed=1)
    sources = [Digests("a"), Plain("b"), Digests("c")]
    engine = Engine(model, sources, policy=lambda ctx: SourcePolicy(sources=frozenset({"a", "b"})))
    engine.prepare([1, 2, 3], corpus=[[4, 5, 6]], language="python")
    assert seen == [("a", [1, 2, 3], [[4, 5, 6]], "python")]
    seen.clear()
    engine.prepare([1, 2, 3], corpus=[[4, 5, 6]], stop=lambda: True)
    assert seen == []

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
    res = Engine(model).generate(model.tokenize("ab"), GenerationOptions(max_tokens=10_000))
    assert res.warnings and len(res.tokens) <= 64


def test_fit_prompt_keeps_short_prompts():
    assert fit_prompt([0, 5, 6], 100, 10, 0) == ([0, 5, 6], 0, 10)


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

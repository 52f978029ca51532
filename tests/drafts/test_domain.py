"""The domain's source policy: which sources draft for a buffer, and how far."""

from __future__ import annotations

import pytest

from structspec.drafts.base import Draft, DraftContext, SourcePolicy
from structspec.drafts.domain import domain_policy
from structspec.engine import CostModel, Engine, GenerationOptions
from structspec.model.standin import StandInModel
from structspec.runtime import make_planner


def _ctx(model: StandInModel, text: str, language: str | None) -> DraftContext:
    tokens = model.tokenize(text)
    return DraftContext(model=model, tokens=tokens, n_prompt=len(tokens), language=language)


def test_policy_caps_and_allows() -> None:
    policy = SourcePolicy(frozenset({"lookup", "ast"}), {"ast": 4})
    assert policy.allows("lookup") and not policy.allows("python")
    assert policy.cap("ast", 15) == 4 and policy.cap("ast", 2) == 2
    assert policy.cap("lookup", 15) == 15
    assert SourcePolicy().allows("anything") and SourcePolicy().cap("x", 7) == 7


@pytest.mark.parametrize(
    ("language", "text", "allowed", "denied", "caps"),
    [
        ("python", "def f(x):\n", {"lookup", "rules", "python", "ast", "motif"}, set(), {"ast": 6}),
        ("json", '{"a": 1', {"lookup", "ast", "motif"}, {"python"}, {"ast": 12, "rules": 6}),
        ("sql", "SELECT a FROM t", {"ast"}, {"python"}, {"ast": 4}),
        # No languageId, or one the table does not know: the text decides.
        (None, '{\n  "name": "x",\n  "version": "1"\n}\n', {"ast"}, {"python"}, {"ast": 12}),
        ("plaintext", "import os\n\ndef main():\n    pass\n", {"python", "ast"}, set(), {}),
        # Nothing recognisable: the Generic domain, without the syntax sources.
        (None, "lorem ipsum dolor", {"lookup", "motif"}, {"python", "ast"}, {}),
    ],
)
def test_domain_policy_of_a_buffer(language, text, allowed, denied, caps) -> None:
    policy = domain_policy(_ctx(StandInModel(), text, language))
    assert all(policy.allows(s) for s in allowed)
    assert not any(policy.allows(s) for s in denied)
    assert {s: policy.cap(s, 15) for s in caps} == caps


class Recorder:
    """Drafts ``length`` copies of the last token and records the limits it was given."""

    def __init__(self, name: str, length: int = 20) -> None:
        self.name = name
        self.length = length
        self.limits: list[int] = []

    def propose(self, ctx: DraftContext) -> Draft | None:
        self.limits.append(ctx.max_tokens)
        return Draft((ctx.tokens[-1],) * self.length, self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


def test_engine_applies_the_policy_to_every_pass() -> None:
    """Denied sources are never asked; a capped one never drafts past its cap; output exact."""
    model = StandInModel(seed=5, n_ctx=1024)
    ast, python = Recorder("ast"), Recorder("python")
    sources = [ast, python]
    planner = make_planner(CostModel.linear(1.0, 0.01), sources)
    engine = Engine(model, sources, planner, policy=domain_policy)
    prompt = model.tokenize('{"a": [1, 1, 1, 1], "b": [1, 1')
    greedy = Engine(model).generate(prompt, GenerationOptions(max_tokens=48, speculative=False))
    gen = engine.stream(prompt, GenerationOptions(max_tokens=48), language="json")
    drafted = [step.drafted for step in gen]
    assert gen.result is not None and gen.result.tokens == greedy.tokens
    assert python.limits == []
    assert ast.limits and max(ast.limits) <= 12 and max(drafted) <= 12
    # Without a policy every source drafts up to the pass limit.
    engine = Engine(model, sources, planner)
    engine.generate(prompt, GenerationOptions(max_tokens=48), language="json")
    assert python.limits and max(ast.limits) == 15


def test_source_names_are_resolved_in_one_place() -> None:
    """Settings, the registry and the benchmark's ablation modes share one check."""
    from structspec.commands.benchmark import _valid_ablation
    from structspec.config import SOURCE_NAMES, Settings, resolve_sources
    from structspec.drafts.registry import build_sources

    assert resolve_sources(["motif", "lookup"]) == ("lookup", "motif")
    assert resolve_sources(["all", "ast"]) == SOURCE_NAMES
    with pytest.raises(ValueError, match="telepathy, tea; choose from all, lookup"):
        resolve_sources(["telepathy", "lookup", "tea"])
    with pytest.raises(ValueError, match="telepathy"):
        build_sources(["telepathy"], StandInModel())
    assert Settings(sources=("rules",)).source_names() == ("rules",)
    assert _valid_ablation("structspec:lookup+rules") and not _valid_ablation("structspec:x")
    assert not _valid_ablation("structspec:")

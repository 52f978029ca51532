"""The syntax sources on the real default model: its tokenizer and a short speculative run."""

from __future__ import annotations

import pytest

from structspec.drafts.ast_shadow import ASTShadowSource
from structspec.drafts.base import DraftContext
from structspec.drafts.motif import MotifSource
from structspec.drafts.registry import build_sources
from structspec.engine.decode import Engine, GenerationOptions
from structspec.runtime import cost_model_for, make_planner

pytestmark = pytest.mark.model


def ctx_for(model, text: str, language: str | None, generation: int) -> DraftContext:
    toks = model.tokenize(text)
    return DraftContext(
        model=model,
        tokens=toks,
        n_prompt=len(toks),
        max_tokens=15,
        language=language,
        generation=generation,
    )


@pytest.mark.parametrize(
    ("language", "before", "after"),
    [
        ("python", "class A:\n    def f(self, x", "):\n        "),
        ("python", "def f(x):\n    if x > 0", ":\n        "),
        ("json", '{\n  "dev": 1,\n  "name": "x",\n  "dev', '": "'),
        ("json", '{\n  "a": "1",\n  "version": "1', '",\n  "'),
        (
            "json",
            '[{\n  "type": "a",\n  "id": 1\n},\n{\n  "type": "b",\n  "id": 2\n},\n{',
            '\n  "type": "',
        ),
        ("html", "<ul>\n  <li>One", "</li>\n  "),
        ("go", "func main() {\n\tx, err := f()\n\tif err", " != nil {"),
        ("sql", "SELECT a FROM t ORDER", " BY"),
    ],
)
def test_ast_drafts_are_the_models_own_tokenization(gemma, language, before, after) -> None:
    """Gemma merges across the boundary (``):``, ``":``, ``</li>``): drafts must too."""
    src = ASTShadowSource(gemma, all_tiers=True)
    draft = src.propose(ctx_for(gemma, before, language, 1))
    assert draft is not None
    whole = gemma.tokenize(before + after)
    head = gemma.tokenize(before)
    assert whole[: len(head)] == head
    assert list(draft.tokens) == whole[len(head) :]


def test_motif_replays_gemma_tokens(gemma) -> None:
    src = MotifSource(gemma)
    text = (
        "def swap(a, i, j):\n    a[i], a[j] = a[j], a[i]\n\n"
        "def g(nums, lo, hi):\n    nums[lo], nums[hi] ="
    )
    draft = src.propose(ctx_for(gemma, text, "python", 2))
    assert draft is not None
    assert gemma.detokenize(draft.tokens).startswith(" nums[hi], nums[lo]\n")


PROMPTS = [
    (
        "json",
        '{\n  "name": "structspec",\n  "version": "0.1.0",\n  "description": "Local code '
        'completion",\n  "scripts": {\n    "build": "tsc -p .",\n    "test": "node test.js"'
        ',\n    "lint": "eslint src"\n  },\n  "dependencies": {\n    "',
    ),
    ("python", "class Point:\n    def __init__(self, x, y, z):\n        self.x = x\n"),
]


def test_speculative_run_with_syntax_sources_stays_on_the_argmax(gemma) -> None:
    """Every emitted token is its row's argmax (teacher-forced, within the batch noise)."""
    sources = build_sources(["ast", "motif"], gemma)
    engine = Engine(gemma, sources, make_planner(cost_model_for(gemma, lambda _: None), sources))
    drafted = 0
    for language, prompt in PROMPTS:
        toks = gemma.tokenize(prompt)
        result = engine.generate(toks, GenerationOptions(max_tokens=40), language=language)
        assert result.tokens
        checks = gemma.teacher_forced(toks, result.tokens)
        assert max(c.gap for c in checks) <= 1.0
        drafted += sum(s.drafted for s in result.stats.sources.values())
    assert drafted > 0

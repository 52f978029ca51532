"""Python syntax drafting: the rules, the FSM == regex equivalence, token boundaries."""

from __future__ import annotations

import inspect
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.drafts import PieceTokenizer

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.python_syntax import (
    RULES,
    FastSyntaxFSM,
    PythonSyntaxProposer,
    PythonSyntaxSource,
    SyntaxRule,
    compile_rules,
)
from structspec.model import StandInModel

SAMPLE = '''from __future__ import annotations

import os


class Store(Base):
    """Keeps things."""

    @property
    def size(self) -> int:
        return len(self.items)

    def __init__(self, path, items=None):
        super().__init__()
        self.path = path
        self.items = []
        for i, item in enumerate(items or []):
            if isinstance(item, str) and not item:
                continue
            elif item is None:
                break
            else:
                self.items.append(item)
        while True:
            try:
                x = divmod(len(self.items), 2)
            except ValueError as exc:
                raise TypeError(exc)
            finally:
                pass
        with open(path) as f:
            data = f.read()  # a comment
        values = sorted(data, key=lambda v: v[1:], reverse=True)


if __name__ == "__main__":
    main()
'''


def _ctx(model, tokens, language=None, generation=1, max_tokens=15) -> DraftContext:
    return DraftContext(
        model=model,
        tokens=list(tokens),
        n_prompt=len(tokens),
        max_tokens=max_tokens,
        language=language,
        generation=generation,
    )


def _agree_on(fsm: FastSyntaxFSM, ref: PythonSyntaxProposer, model, ids) -> int:
    """Check FSM and reference at every prefix of ``ids``; return how many rules fired."""
    state, text, fired = fsm.initial, b"", 0
    for i, tok in enumerate(ids):
        state = fsm.advance(state, tok)
        text += model.token_bytes(tok)
        expected = ref.match(text)
        assert fsm.rule_of(state) == expected, (i, text[-80:])
        if expected is not None:
            fired += 1
            hit = fsm.propose(state, tok)
            want = ref.propose(model, ids[: i + 1])
            assert (hit[0] if hit else None) == want, (i, text[-80:])
    return fired


def test_there_are_fifty_rules_and_both_engines_compile_them():
    assert len(RULES) >= 50
    assert len({r.name for r in RULES}) == len(RULES)
    for rule in RULES:
        re.compile(rule.pattern.encode())
        assert rule.kind in ("line", "newline")
        assert rule.tier in ("deterministic", "strong", "frequent")
    compile_rules(RULES)


def test_compiler_rejects_what_it_does_not_support():
    for pattern in ("a{2}", "\\w+", "(ab", "[ab", "a)"):
        with pytest.raises(ValueError):
            compile_rules([SyntaxRule("bad", pattern, "x")])


def test_fsm_agrees_with_regex_on_code(pieces):
    ids = pieces.tokenize(SAMPLE, add_bos=False)
    fired = _agree_on(FastSyntaxFSM(pieces), PythonSyntaxProposer(), pieces, ids)
    assert fired > 30


_FRAGMENTS = [
    "for", " x", " i", ",", " in", " range", "(", ")", "):", ":", "\n", "    ", "        ",
    "def", " f", "self", "__init__(", "if", " __name__", " ==", "else", "try", "return",
    " True", "pass", "@property", "lambda", "#", " ", ".append", " = ", "[]", "[1:", "]",
    "while", "except", " ValueError", " as", " e", "len", "\t", "é", "class", " A", "from",
    " typing", "import", " numpy", "with", " open", "(f", "super().__init__", "\\", "x",
]  # fmt: skip


_REF = PythonSyntaxProposer()
_CHARS = StandInModel(alphabet="".join(sorted(set("".join(_FRAGMENTS)))), order=1)
_CHARS_FSM = FastSyntaxFSM(_CHARS)
_PIECES = PieceTokenizer()
_PIECES_FSM = FastSyntaxFSM(_PIECES)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40))
def test_fsm_agrees_with_regex_on_random_text(fragments):
    text = "".join(fragments)
    _agree_on(_CHARS_FSM, _REF, _CHARS, _CHARS.tokenize(text, add_bos=False))
    _agree_on(_PIECES_FSM, _REF, _PIECES, _PIECES.tokenize(text, add_bos=False))


def _draft_text(model, text: str, language=None) -> str | None:
    source = PythonSyntaxSource(model)
    draft = source.propose(_ctx(model, model.tokenize(text, add_bos=False), language))
    return None if draft is None else model.detokenize(draft.tokens)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("    for x", " in"),
        ("for i, x", " in"),
        ("    def f(x, y):", "\n        "),
        ("class A:", "\n    "),
        ("    def __init__(", "self"),
        ("if __name__", ' == "__main__":\n    '),
        ("        else", ":\n            "),
        ("    try", ":\n        "),
        ("from __future__", " import annotations"),
        # "\n" + spaces is one token of this vocabulary: after a lone "\n" no indentation
        # is drafted (the model would have written the merged token instead).
        ("    if x:\n", None),
        ("    return x\n", None),  # the next line dedents by an unknown amount
        ("    f(a,\n", None),  # a continuation line: indentation unknown
        ("    if d[1:", None),  # a slice, not the end of the condition
        ("    @property", "\n    def"),
        ("    n = len", "("),
        ("        self.items.append", "("),
    ],
)
def test_transitions(pieces, text, expected):
    assert _draft_text(pieces, text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("    if x:\n", "        "), ("    x = 1\n", "    "), ("    return x\n", None)],
)
def test_indentation_of_a_new_line(text, expected):
    assert _draft_text(StandInModel(), text) == expected


def test_only_python_or_unknown_language(pieces):
    assert _draft_text(pieces, "for x", "python") == " in"
    assert _draft_text(pieces, "for x", None) == " in"
    assert _draft_text(pieces, "for x", "javascript") is None


def test_no_draft_that_merges_into_the_last_token(pieces):
    # The pieces vocabulary writes "):" as one token: after a lone ")" the model
    # would never write ":" next, so "def f(x)" + ":" is not drafted.
    ids = [*pieces.tokenize("def f(x", add_bos=False), pieces.tokenize(")", add_bos=False)[0]]
    source = PythonSyntaxSource(pieces)
    ref = PythonSyntaxProposer()
    assert ref.propose_text(b"    x = 1\n    while True") == b":\n        "
    assert ref.propose(pieces, ids) is None
    assert source.propose(_ctx(pieces, ids)) is None


def test_incremental_state_matches_a_fresh_run(pieces):
    ids = pieces.tokenize(SAMPLE, add_bos=False)
    source = PythonSyntaxSource(pieces)
    ctx = _ctx(pieces, ids[:5])
    fresh = FastSyntaxFSM(pieces)
    rng = random.Random(0)
    i = 5
    while i < len(ids):
        got = source.propose(ctx)
        hit = fresh.propose(fresh.run(ids[:i]), ids[i - 1])
        assert (got.tokens if got else None) == (hit[0][: ctx.max_tokens] if hit else None)
        step = rng.randint(1, 4)
        ctx.tokens.extend(ids[i : i + step])
        i += step
    # A new generation (or a shorter context) resynchronises.
    other = _ctx(pieces, pieces.tokenize("for x", add_bos=False), generation=2)
    assert pieces.detokenize(source.propose(other).tokens) == " in"


def test_sync_start_skips_to_the_last_two_lines(pieces):
    fsm = FastSyntaxFSM(pieces)
    ids = pieces.tokenize(SAMPLE + "    for x", add_bos=False)
    start = fsm.sync_start(ids)
    assert start > 0
    assert fsm.run(ids[start:]) == fsm.run(ids)


def test_cooldown_of_a_failing_rule(pieces):
    source = PythonSyntaxSource(pieces, cooldown_after=2, cooldown_passes=5)
    ctx = _ctx(pieces, pieces.tokenize("for x", add_bos=False))
    for _ in range(2):
        draft = source.propose(ctx)
        assert draft is not None
        source.observe(draft, 0)
    assert source.propose(ctx) is None
    for _ in range(5):
        source.propose(ctx)
    draft = source.propose(ctx)
    assert draft is not None
    source.observe(Draft((1,), "python", "strong"), 0)  # not ours: ignored


def test_python_source_keeps_the_engine_exact():
    from structspec.engine.control import CostModel
    from structspec.engine.decode import Engine, GenerationOptions
    from structspec.runtime import make_planner

    model = StandInModel(seed=5, eos_bias=-3.0)
    engine = Engine(model, [PythonSyntaxSource(model)], make_planner(CostModel.linear(1.0, 0.05)))
    greedy = Engine(model)
    for text in ("for x", "def f(x):\n", "    x = 1\n", "if __name__", "class a:\n  "):
        prompt = model.tokenize(text)
        want = greedy.generate(prompt, GenerationOptions(max_tokens=40, speculative=False))
        got = engine.generate(prompt, GenerationOptions(max_tokens=40))
        assert got.tokens == want.tokens


@pytest.mark.model
def test_fsm_agrees_with_regex_on_real_tokenization(gemma):
    import argparse
    import dataclasses

    fsm, ref = FastSyntaxFSM(gemma), PythonSyntaxProposer()
    fired = 0
    for module in (dataclasses, argparse):
        ids = gemma.tokenize(inspect.getsource(module), add_bos=False)[:3000]
        fired += _agree_on(fsm, ref, gemma, ids)
    assert fired > 100


@pytest.mark.model
def test_drafts_are_the_ids_of_real_code(gemma):
    """On real tokenization, deterministic drafts are mostly exactly what follows."""
    ids = gemma.tokenize(SAMPLE, add_bos=False)
    fsm = FastSyntaxFSM(gemma)
    state, right, total = fsm.initial, 0, 0
    for i, tok in enumerate(ids[:-1]):
        state = fsm.advance(state, tok)
        hit = fsm.propose(state, tok)
        if hit and fsm.rules[hit[1]].tier == "deterministic":
            total += 1
            right += tuple(ids[i + 1 : i + 1 + len(hit[0])]) == hit[0]
    assert total >= 10 and right / total >= 0.8

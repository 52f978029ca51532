"""ASTShadowSource: the syntax each language makes certain, and where it stays silent."""

from __future__ import annotations

import random

import pytest
from tests.helpers.syntax import WordModel, context, draft_text

from structspec.drafts.ast_shadow import ASTShadowSource
from structspec.drafts.base import DraftContext
from structspec.drafts.feedback import TierGate
from structspec.drafts.registry import build_sources
from structspec.engine.control import CostModel
from structspec.engine.decode import Engine, GenerationOptions
from structspec.model.standin import StandInModel
from structspec.runtime import make_planner

CASES = [
    # language, text before the cursor, expected draft text, tier
    ("python", "class A:\n    def f(self, x", "):\n        ", "header-close"),
    ("python", "def f(x):\n    if x > 0", ":\n        ", "header-cond"),
    ("python", "def f(x):\n    try", ":\n        ", "header-kw"),
    ("python", "class A:\n    def f(self)", ":\n        ", "header"),
    ("python", "def f(x):", "\n    ", "block"),
    ("python", "def f(x):\n    for i in range(len(x)", "):\n        ", "header-close"),
    ("python", "def f(x):\n    return g(h(x", "))\n    ", "close-word"),
    ("python", "def f(x):\n    return g(h(x)", ")\n    ", "close"),
    ("python", "def f(x):\n    y = 1\n", "    ", "indent"),
    ("python", "def f(x):\n", "    ", "indent"),
    # A string seen before in the document is likely complete: its end is drafted.
    ("json", '[{"dev": 0},\n {\n  "name": "x",\n  "dev', '": "', "key-end"),
    ("json", '[{"dev": 0},\n {\n  "n": 1,\n  "dev', '": ', "key-end"),
    ("json", '{\n  "name": "1",\n  "version": "1', '",\n  "', "value-end"),
    # The buffer shown from its middle: the containers opened above are implied.
    ("json", '      "b": 2\n    },\n    "c": {\n      "b', '": ', "key-end"),
    ("json", '  "b": 2\n  },\n  {\n', '    "', "indent"),
    ("json", '{\n  "name": "x",\n  "n": 1', ',\n  "', "next"),
    ("json", '{\n  "name": "x",', '\n  "', "next"),
    ("json", '{\n  "a": {', '\n    "a": ', "open+k"),  # first keys of objects alike
    ("json", "[\n  {", '\n    "', "open"),
    ("json", '{\n  "a": [\n', "    ", "indent"),
    ("json", '{\n  "a": 1,\n', '  "', "indent"),
    ("html", "<ul>\n  <li>One", "</li>\n  ", "close-inline"),
    ("html", "<p>Some <b>bold", "</b>", "close-inline"),
    ("html", "<ul>\n  <li>One</li>\n</", "ul>", "end-tag"),
    ("html", "<div>\n  <p>Hello</p>\n", "  ", "indent"),
    ("html", "<body>\n  <table>", "\n    ", "open"),
    ("sql", "SELECT a FROM t ORDER", " BY", "kw"),
    ("sql", "select a from t group", " by", "kw"),
    ("sql", "CREATE TABLE t (\n  id INTEGER PRIMARY", " KEY", "kw"),
    ("go", "package main\n\nfunc main() {\n\tif x > 0", " {\n\t\t", "header-cond"),
    ("go", "func main() {\n\tx, err := f()\n\tif err", " != nil {", "kw"),
    ("go", "func main()", " {\n\t", "header"),
    ("go", "func main() {", "\n\t", "block"),
    ("javascript", "function f(a, b", ") {\n  ", "header-close"),
    ("javascript", "if (x) {\n  y()\n} else", " {\n  ", "header-kw"),
    ("c", 'int main() {\n    printf("%d", x', ");\n    ", "close-word"),
    (
        "java",
        "class A {\n    void f() {\n        for (int i = 0; i < n; i++",
        ") {\n            ",
        "header-close",
    ),
    ("rust", "fn main() {\n    let v = vec![1, 2", "];\n    ", "close-word"),
    ("bash", "for f in *.txt; do", "\n", "kw"),
]


#: Tiers proposed only with ``all_tiers=True``: measured on real model output, the model
#: follows them too rarely to pay for a verification row on a CPU.
LOW_PRECISION = {"header-cond", "header-close", "close", "close-word"}


@pytest.mark.parametrize(("language", "text", "expected", "tier"), CASES)
def test_proposals_per_language(language: str, text: str, expected: str, tier: str) -> None:
    model = WordModel()
    src = ASTShadowSource(model, all_tiers=True)
    draft = src.propose(context(model, text, language, max_tokens=15))
    assert draft is not None, (src.state, src.candidate())
    assert draft_text(model, draft) == expected
    assert draft.tier == tier and draft.source == "ast"


SILENT = [
    ("python", "def f(x):\n    s = 'abc"),  # inside a string
    ("python", 'def f(x):\n    """Docstring (still open'),
    ("python", "def f(x):\n    y = 1  # if x"),  # inside a comment
    ("python", "def f(x):\n    return x +"),  # expression goes on
    ("python", "def f(x):\n    for i in"),
    ("python", "def f(\n"),  # multi-line bracket: indentation is free
    ("python", "def f(x):\n    return x +* ) 2\n\ndef g(y):\n    if y > 0"),  # broken code before
    ("c", "int x; /* if (x"),
    ("go", 'x := "if err'),
    ("html", "<p>Hi <!-- <b>note"),
    ("html", '<a href="x'),
    ("json", '{\n  "a": [\n    "one'),  # a string never seen: its length is unknown
    ("json", '{\n  "name": "x",\n  "dev'),
    (None, "just words here"),  # generic: not a domain of this source
    ("plaintext", "if x"),
]


@pytest.mark.parametrize(("language", "text"), SILENT)
def test_silent_where_drafting_is_pointless(language: str | None, text: str) -> None:
    model = WordModel()
    src = ASTShadowSource(model, all_tiers=True)
    assert src.propose(context(model, text, language)) is None, src.state


JSON_LIST = """{
  "ListA": {
    "input_token": "NextToken",
    "output_token": "NextToken",
    "result_key": "A"
  },
  "ListB": {
    "input_token": "Marker",
    "output_token": "NextToken",
    "result_key": "B"
  },
  "ListC": {
    "input_token": "Marker"""


@pytest.mark.parametrize(
    ("text", "expected", "tier"),
    [
        # The key that followed in the objects before, and its value when it repeats.
        (JSON_LIST, '",\n    "output_token": "NextToken"', "value-end+k"),
        (
            JSON_LIST + '",\n    "output_token": "Next',
            'Token",\n    "result_key": "',
            "value-rest+k",
        ),
        # (12 tokens: the cap of the json domain)
        (JSON_LIST + '",\n    "out', 'put_token": "NextToken",\n    "result_key"', "key-rest"),
        (JSON_LIST + '",\n    "output_token": "NextToken",\n    "result_key', '": "', "key-end"),
        (JSON_LIST + '",\n    "output_token":', ' "NextToken"', "value"),
        (JSON_LIST + '",\n', '    "output_token": "NextToken"', "indent+k"),
        ('{\n  "x": {\n    "type": "string"\n  },\n  "y": {', '\n    "type": "', "open+k"),
    ],
)
def test_json_predicts_keys_and_values_from_sibling_objects(text, expected, tier) -> None:
    model = WordModel()
    draft = ASTShadowSource(model).propose(context(model, text, "json", max_tokens=12))
    assert draft is not None
    assert (draft_text(model, draft), draft.tier) == (expected, tier)


def test_language_detected_from_content_without_language_id() -> None:
    model = WordModel()
    src = ASTShadowSource(model)
    text = '{\n  "name": "structspec",\n  "version": "0.1.0",\n  "name'
    assert draft_text(model, src.propose(context(model, text, None))) == '": "'


def test_caps_and_max_tokens() -> None:
    model = WordModel()
    src = ASTShadowSource(model)
    draft = src.propose(context(model, "class A:\n    def f(self, x):", "python", max_tokens=1))
    assert draft is not None and len(draft.tokens) == 1
    ctx = context(model, "class A:\n    def f(self, x):", "python", max_tokens=0)
    assert src.propose(ctx) is None


def test_incremental_state_equals_a_fresh_start() -> None:
    """Feeding tokens one by one gives the same proposals as starting from scratch."""
    model = WordModel()
    text = (
        "import os\n\nclass Store:\n    def __init__(self, root):\n        self.root = root\n"
        "        self.items = {}\n\n    def get(self, key, default=None):\n"
        "        if key in self.items:\n            return self.items[key]\n"
        "        return default\n"
    )
    toks = model.tokenize(text)
    inc = ASTShadowSource(model)
    ctx = DraftContext(
        model=model, tokens=toks[:2], n_prompt=2, max_tokens=8, language="python", generation=10_000
    )
    for n in range(2, len(toks)):
        got = inc.propose(ctx)
        fresh = ASTShadowSource(model).propose(
            DraftContext(
                model=model,
                tokens=toks[:n],
                n_prompt=n,
                max_tokens=8,
                language="python",
                generation=20_000 + n,
            )
        )
        assert got == fresh, (n, model.detokenize(toks[:n]))
        ctx.tokens.append(toks[n])
    assert inc._tree is not None and inc._tree.full_parses == 1


def test_window_cut_in_a_long_buffer() -> None:
    model = WordModel()
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(400))
    src = ASTShadowSource(model, window_bytes=1000)
    draft = src.propose(context(model, body + "def g(y):", "python"))
    assert draft_text(model, draft) == "\n    "
    assert src._tree is not None and len(src._tree.data) <= 1100


@pytest.mark.parametrize("language", ["python", "json", "html", "sql", "go", "javascript", "c"])
def test_never_raises_on_random_text(language: str) -> None:
    model = WordModel()
    src = ASTShadowSource(model)
    rng = random.Random(language)
    alphabet = [
        "a",
        "b",
        " ",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "<",
        ">",
        "/",
        "'",
        '"',
        "#",
        ":",
        ",",
        "=",
        "\n",
        "  ",
        "if",
        "def",
        "</",
        "--",
        "/*",
        "*/",
        "\t",
    ]
    for g in range(30):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))
        toks = model.tokenize(text)
        ctx = DraftContext(
            model=model,
            tokens=toks[:1],
            n_prompt=1,
            max_tokens=8,
            language=language,
            generation=30_000 + g,
        )
        for t in toks[1:]:
            ctx.tokens.append(t)
            draft = src.propose(ctx)
            assert draft is None or (0 < len(draft.tokens) <= 8)


def test_speculation_with_syntax_sources_is_exact_on_the_stand_in() -> None:
    """Whatever the sources draft, speculative output is the greedy output."""
    model = StandInModel(seed=3, n_ctx=2048)
    sources = build_sources(["ast", "motif"], model)
    engine = Engine(model, sources, make_planner(CostModel.linear(1.0, 0.05), sources))
    for prompt in [
        "def f(x):\n    if x",
        "for i in range(n):\n    total = total + i\n",
        '{"a": [1, 2], "b": "c',
        "select a from t order",
    ]:
        toks = model.tokenize(prompt)
        for language in ("python", "json", "sql", None):
            greedy = engine.generate(toks, GenerationOptions(max_tokens=40, speculative=False))
            spec = engine.generate(toks, GenerationOptions(max_tokens=40), language=language)
            assert spec.tokens == greedy.tokens
    assert sum(s.calls for s in sources) > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("language", "text", "expected", "tier"), CASES)
def test_default_source_keeps_to_precise_tiers(language, text, expected, tier) -> None:
    model = WordModel()
    draft = ASTShadowSource(model).propose(context(model, text, language, max_tokens=15))
    precise = tier not in LOW_PRECISION and not (tier == "header" and language == "python")
    precise = precise or (tier == "close-word" and language == "python")
    assert (draft is not None) == precise, (tier, draft)


def test_tier_gate_mutes_rejected_tiers_and_probes_again() -> None:
    gate = TierGate(floor=0.35, min_trials=4, decay=1.0, probe_every=5)
    for _ in range(4):
        gate.observe("bad", 0)
        gate.observe("good", 2)
    assert gate.allows("good")
    allowed = [gate.allows("bad") for _ in range(10)]
    assert allowed.count(True) == 2  # one probe in five
    for _ in range(6):
        gate.observe("bad", 3)  # the model follows it again
    assert gate.allows("bad")


def test_source_mutes_a_tier_through_observe() -> None:
    model = WordModel()
    src = ASTShadowSource(model)
    text = "def f(x):"
    first = src.propose(context(model, text, "python"))
    assert first is not None and first.tier == "block"
    for _ in range(10):
        src.observe(first, 0)
    assert src.propose(context(model, text, "python")) is None and src.state == "muted"


def test_prepare_makes_the_languages_tree_before_the_first_proposal() -> None:
    """Idle time loads the grammar and compiles its queries (tens of ms for a large
    one), so the first request in a language does not; without a language it does nothing."""
    model = WordModel()
    src = ASTShadowSource(model)
    src.prepare(context(model, "x = 1\n", None), lambda: False)
    assert src._trees == {}
    src.prepare(context(model, "x = 1\n", "python"), lambda: True)  # stopped
    assert src._trees == {}
    src.prepare(context(model, "x = 1\n", "python"), lambda: False)
    assert src._trees["python"] is not None

"""Post-processing of model text into a suggestion: exact expectations, no-op cases included."""

from __future__ import annotations

import pytest

from structspec.completion.suggest import BLOCK, LINE, CursorContext, clean, continuation_answer


def at(text: str, marker: str = "|") -> CursorContext:
    """The context of the cursor written as ``marker`` in ``text``."""
    offset = text.index(marker)
    return CursorContext.at(text[:offset] + text[offset + len(marker) :], offset)


# -- never repeat the text after the cursor ------------------------------------


@pytest.mark.parametrize(
    ("doc", "model", "shown"),
    [
        ("x = compute(|)\n", "a, b)", "a, b"),  # the closer the suffix already has
        ("x = compute(|)\n", "a, b)  ", "a, b"),
        ('print("hel|")\n', 'lo")', "lo"),  # closer and quote inside the suffix
        ("if ok(|):\n", "x):", "x"),  # the whole rest of the line
        ("value = |  # note\n", "1  # note", "1"),
        ("x = compute(|)\n", ")", None),  # nothing but the rest of the line
        ("x = |\n", "compute(1)", "compute(1)"),  # no suffix: no-op
        ("x = compute(|) + y\n", "a", "a"),  # no overlap: no-op
        ("x = [|] + y\n", "1, 2]", "1, 2"),
    ],
)
def test_tail_repeating_the_line_suffix_is_trimmed(doc, model, shown):
    assert clean(model, at(doc), LINE) == shown


# -- brackets balanced against the suffix -----------------------------------------


@pytest.mark.parametrize(
    ("doc", "model", "shown"),
    [
        # The suggestion's own bracket pair is kept, whatever follows.
        ("print(|)\n", "foo(bar)", "foo(bar)"),
        ("print(|)\n", "foo(bar))", "foo(bar)"),
        # A closer of print( followed by more: cut before it, the suffix closes print(.
        ("print(|)\n", "a) + len(b", "a"),
        ("items = [f(|)]\n", "x)]", "x"),
        # A different closer than the suffix starts with: left alone.
        ("call(|]\n", "a)", "a)"),
        # Brackets inside a string of the suggestion do not count.
        ("print(|)\n", '")" + s)', '")" + s'),
        # Suffix that is not a closer: brackets are not touched.
        ("f(|, y)\n", "x), g(", "x), g("),
    ],
)
def test_closers_balanced_against_the_suffix(doc, model, shown):
    assert clean(model, at(doc), LINE) == shown


# -- drop a suggestion that only repeats the following lines -----------------------


def test_a_line_that_is_the_next_line_is_dropped():
    doc = "def f():\n    |\n    return 1\n"
    assert clean("return 1", at(doc), LINE) is None
    assert clean("x = 1", at(doc), LINE) == "x = 1"  # different: shown
    # A prefix of the next line is not a repetition of it.
    assert clean("return", at(doc), LINE) == "return"


def test_a_line_at_another_indentation_than_the_next_is_not_a_repeat():
    """Closing an inner block before the outer one closes: the model's answer, shown."""
    doc = "func f() {\n\tif err != nil {\n\t\treturn\n\t\t|\n\t}\n}\n"
    assert clean("}", at(doc), LINE) == "}"
    assert clean("}", at(doc.replace("\t\t|", "\t|")), LINE) is None  # the next line again
    assert clean("return 1", at("def f():\n|\n    return 1\n"), LINE) == "return 1"


def test_a_block_that_is_the_following_lines_is_dropped():
    doc = "def f(x):\n    |\n    y = x + 1\n    return y\n"
    assert clean("y = x + 1\n    return y", at(doc), BLOCK) is None
    # A block that first adds a line, then repeats: cut where the repeat starts.
    assert clean("z = 0\n    y = x + 1\n    return y", at(doc), BLOCK) == "z = 0"


def test_after_an_opener_only_the_next_lines_count():
    doc = "def f(x):|\n    return x\n"
    assert clean("\n    return x", at(doc), BLOCK) is None
    assert clean("  # doc\n    return x", at(doc), BLOCK) == "  # doc"


# -- indent multi-line blocks to the cursor's block -----------------------------


def test_block_on_a_blank_line_is_indented_from_the_cursor():
    doc = "def f(x):\n    |\n"
    # The model repeated the indentation the line already has: removed once.
    assert clean("    y = 1\n        return y", at(doc), BLOCK) == "y = 1\n    return y"
    # Already right: no-op.
    assert clean("y = 1\n    if y:\n        return y", at(doc), BLOCK) == (
        "y = 1\n    if y:\n        return y"
    )


def test_block_follows_the_documents_tabs():
    doc = "def f(x):\n\t|\n"
    assert clean("y = 1\n    if y:\n        return y", at(doc), BLOCK) == (
        "y = 1\n\tif y:\n\t\treturn y"
    )


def test_block_after_an_opener_keeps_its_indentation():
    doc = "def f(x):|\n"
    assert clean("\n    y = 1\n    return y", at(doc), BLOCK) == "\n    y = 1\n    return y"


def test_single_line_and_whitespace_edge_cases():
    assert clean("   \n", at("print(x|)"), LINE) is None
    assert clean("a = 1   \nb", at("|"), LINE) == "a = 1"
    assert clean("", at("|"), BLOCK) is None
    assert clean("x", at("|"), BLOCK) == "x"


# -- loops ----------------------------------------------------------------------


def test_loop_start_finds_a_line_ending_in_a_repeated_pattern() -> None:
    from structspec.completion.suggest import LOOP_CHARS, LOOP_REPEATS, loop_start

    looping = 'ok\nx = "release", ' + '"release-only", ' * LOOP_REPEATS
    assert loop_start(looping) == 3
    assert loop_start(looping + '"release-') == 3  # mid-repeat (a streamed token's end)
    unit = "ab"
    assert loop_start(unit * (LOOP_CHARS // 2)) == 0
    assert loop_start(unit * (LOOP_CHARS // 2 - 1)) is None  # too short to be a loop
    from structspec.completion.suggest import LOOP_RUN_CHARS

    assert loop_start("x\n/" + "*" * LOOP_RUN_CHARS) == 2  # one character, on and on
    # Ordinary code that repeats: separators, short runs, a loop on an earlier line.
    for fine in (
        "# " + "-" * 78,
        "# " + "=" * (LOOP_RUN_CHARS - 1),
        "zeros = [0, 0, 0, 0, 0, 0]",
        'x = "bc", "bc", "bc"',
        '"bc", ' * 20 + "\nnext = 1",
        "",
        "\n\n",
    ):
        assert loop_start(fine) is None, fine


def test_clean_drops_a_looping_line_and_keeps_the_lines_before() -> None:
    text = "def f():\n    "
    ctx = CursorContext.at(text, len(text))
    assert ctx.mode == BLOCK
    block = "x = 1\n    y = [" + "'abc', " * 12
    assert clean(block, ctx, BLOCK) == "x = 1"
    line_ctx = CursorContext.at("v = ", 4)
    assert clean("[" + "'abc', " * 12, line_ctx, LINE) is None


def test_the_word_before_the_cursor() -> None:
    from structspec.completion.suggest import CursorContext

    assert CursorContext.at("x = self.na", 11).word_prefix == "na"
    assert CursorContext.at("let $el = é_1", 13).word_prefix == "é_1"
    assert CursorContext.at("$el", 3).word_prefix == "$el"
    assert CursorContext.at("f(a, ", 5).word_prefix == ""
    assert CursorContext.at("", 0).word_prefix == ""


def test_the_word_before_the_cursor_is_found_in_one_pass_of_a_minified_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search for the tail tried every start in a run of word characters: 1.9 s a
    keystroke after a '.' ending a 20,000-character line, 48 s at 100,000. Walked back
    instead: one look at each character of the word and the one before it."""
    from structspec.completion import suggest

    looked = 0
    char = suggest._WORD_CHAR

    class Counting:
        def match(self, text: str, pos: int) -> object:
            nonlocal looked
            looked += 1
            return char.match(text, pos)

    monkeypatch.setattr(suggest, "_WORD_CHAR", Counting())
    line = "x = " + "a" * 100_000
    assert CursorContext.at(line, len(line)).word_prefix == "a" * 100_000
    assert looked == 100_001
    looked = 0
    assert CursorContext.at(line + ".", len(line) + 1).word_prefix == ""
    assert looked == 1


# -- the middle of a line the model did not see ---------------------------------


@pytest.mark.parametrize(
    ("doc", "model", "shown"),
    [
        # The model's line ends with the code after the cursor: the insertion joins it.
        ("return s|._proxies\n", "elf._proxies", "elf"),
        ("x = f(a, |b=1)\n", "c=2, b=1)", "c=2, "),  # the space before b=1 is kept
        ("CODE = 0x|     # flags\n", "200      # flags", "200"),
        ("x = compute(|) + y\n", "a) + y", "a"),
        # A line written past the code after the cursor would push it right: dropped.
        ("x = compute(|) + y\n", "a", None),
        ("return s|._proxies\n", "elf.proxies", None),
        ("log.SetPre|fix(name)\n", 'fix("proxy: ")', None),
        # Only closers (and one terminator) after the cursor: the model's line is kept
        # as before, cut at the closer the rest of the line has.
        ("x = compute(|)\n", "a, b)", "a, b"),
        ('print("hel|")\n', "lo world", "lo world"),
        ("if ok(|):\n", "x) and y", "x"),
        ("call(|);\n", "a, b", "a, b"),
        ("foo(|) {\n", "bar", "bar"),
    ],
)
def test_mid_line_insertion_must_join_the_code_the_model_did_not_see(doc, model, shown):
    assert clean(model, at(doc), LINE, sees_rest=False) == shown


@pytest.mark.parametrize(
    ("doc", "model", "shown"),
    [
        ("x = compute(|) + y\n", "a", "a"),  # a FIM model chose it with the rest in view
        ("log.SetPre|fix(name)\n", "fix(name)", None),  # still only the rest: dropped
        ("x = f(a, |b=1)\n", "c=2, ", "c=2, "),
        ("x = f(a, | b=1)\n", "c=2, ", "c=2,"),  # the rest brings its own space
        ("x = |\n", "compute(1)   ", "compute(1)"),  # nothing after: no trailing space
        ("print(|)\n", "a ", "a"),  # no space kept before a closer
        ('f(a, |"b")\n', "c, ", "c, "),  # before a quote it is
    ],
)
def test_a_model_that_saw_the_rest_of_the_line_keeps_its_insertion(doc, model, shown):
    assert clean(model, at(doc), LINE) == shown


def test_pre_generated_text_in_the_middle_of_a_line_follows_the_same_rule():
    ctx = at("return s|._proxies\n")
    assert continuation_answer("elf._proxies\n", False, ctx, sees_rest=False) == (True, "elf")
    assert continuation_answer("elf.other\n", False, ctx, sees_rest=False) == (True, None)
    assert continuation_answer("elf.other\n", False, ctx) == (True, "elf.other")
    # An unfinished line is not judged yet: the model is asked.
    assert continuation_answer("elf", False, ctx, sees_rest=False) == (False, None)

"""The editor's draft sources: recycled suggestions, the text after the cursor, nearby lines.

The stand-in model tokenizes one character per token, so every expectation
below is spelled as text: ``draft("a, b)")`` is the exact draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.nearby import NearbySource
from structspec.drafts.recycle import RecycleSource
from structspec.drafts.suffix import SuffixSource
from structspec.model.standin import StandInModel

MODEL = StandInModel()


def toks(text: str) -> list[int]:
    return MODEL.tokenize(text, add_bos=False)


def text_of(d: Draft | None) -> str | None:
    return None if d is None else MODEL.detokenize(d.tokens)


def ctx(
    prompt: str,
    output: str = "",
    *,
    suffix: str = "",
    recent: Sequence[str] = (),
    max_tokens: int = 8,
    generation: int = 1,
) -> DraftContext:
    p = toks(prompt)
    return DraftContext(
        MODEL,
        p + toks(output),
        len(p),
        max_tokens=max_tokens,
        suffix_tokens=toks(suffix),
        recent_suggestions=[tuple(toks(r)) for r in recent],
        generation=generation,
    )


# -- recycle ------------------------------------------------------------------


def test_recycle_continues_the_suggestion_after_a_diverging_edit():
    # Shown: "x = foo(a, b)\n" after "x = "; the user typed "y" instead, then the
    # model wrote " = foo(": the suggestion's continuation follows.
    d = RecycleSource().propose(ctx("y", " = foo(", recent=["x = foo(a, b)\n"]))
    assert d is not None and d.source == "recycle" and d.tier == "m4"
    assert text_of(d) == "a, b)\n"


def test_recycle_realigns_after_a_deletion():
    # The generation came after "    ret" (its prompt tail is kept in front of it);
    # the user deleted back to "    r": the draft is the deleted text and the suggestion.
    d = RecycleSource().propose(
        ctx("def f(x):\n    r", recent=["def f(x):\n    return x\n"], max_tokens=16)
    )
    assert text_of(d) == "eturn x\n" and d is not None and d.tier == "m8"


def test_recycle_newest_wins_ties_and_longest_wins_over_newest():
    src = RecycleSource()
    assert text_of(src.propose(ctx("q = ab", recent=["ab1)", "ab2)"]))) == "1)"
    assert text_of(src.propose(ctx("q = ab", recent=["ab1)", " = ab2)"]))) == "2)"


def test_recycle_single_token_match_is_tier_m1_and_capped():
    d = RecycleSource().propose(ctx("zz(", recent=["f(abcdefghij"], max_tokens=4))
    assert d is not None and d.tier == "m1" and text_of(d) == "abcd"


def test_recycle_no_ops():
    src = RecycleSource()
    assert src.propose(ctx("x = ")) is None  # no previous suggestion
    assert src.propose(ctx("x = ", recent=["abc"])) is None  # nothing matches
    assert src.propose(ctx("ab", recent=["xab"])) is None  # nothing follows the match
    assert src.propose(ctx("", recent=["abc"])) is None  # empty buffer
    assert src.propose(ctx("ab", recent=["abc"], max_tokens=0)) is None


# -- suffix --------------------------------------------------------------------


def test_suffix_rest_of_the_line_after_one_token():
    # Cursor in "foo(|, b)": the model wrote "a,"; the line's rest follows the ",".
    d = SuffixSource().propose(ctx("x = foo(", "a,", suffix=", b)\nbar()\n", max_tokens=6))
    assert d is not None and d.tier == "m1l" and text_of(d) == " b)\nba"


def test_suffix_below_the_line_needs_two_tokens():
    src = SuffixSource()
    suffix = "\nq = z(1)\n"
    assert src.propose(ctx("w(", suffix=suffix)) is None  # one token, not in the line
    d = src.propose(ctx("z(", suffix=suffix, generation=2))
    assert d is not None and d.tier == "m2" and text_of(d) == "1)\n"


def test_suffix_nearest_of_equal_matches():
    d = SuffixSource().propose(ctx("ab", suffix="\nab1\nab2\n"))
    assert text_of(d) == "1\nab2\n"


def test_suffix_no_ops():
    src = SuffixSource()
    assert src.propose(ctx("x = foo(")) is None  # no suffix
    assert src.propose(ctx("", suffix="abc", generation=2)) is None  # empty buffer
    assert src.propose(ctx("x", suffix="yz", generation=3)) is None  # nothing matches
    assert src.propose(ctx("z", suffix="yz", generation=4)) is None  # nothing follows


# -- nearby --------------------------------------------------------------------


def test_nearby_copies_the_nearest_matching_line():
    prompt = "a.x = 1\nb.x = 2\nc.x"
    d = NearbySource().propose(ctx(prompt))
    assert d is not None and d.source == "nearby" and d.tier == "m2"
    assert text_of(d) == " = 2\nc.x"  # after the nearer ".x" (line b)


def test_nearby_marks_a_conflicting_occurrence():
    d = NearbySource().propose(ctx("a.x=1\nb.x+2\nc.x"))
    assert (
        d is not None and d.tier == "m2x" and text_of(d) == "+2\nc.x+2"
    )  # copied on past the present


def test_nearby_ignores_lines_beyond_its_window():
    far = "k.y = 7\n" + "\n" * 20
    assert NearbySource(lines=12).propose(ctx(far + "k.y")) is None
    d = NearbySource(lines=30).propose(ctx(far + "k.y"))
    assert text_of(d) == " = 7\n\n\n\n\n"[:8]


def test_nearby_after_the_cursor():
    d = NearbySource().propose(ctx("t = ", "sel", suffix="\nu = self.v\n"))
    assert d is not None and d.tier == "m4a" and text_of(d) == "f.v\n"
    far_below = "\n" * 20 + "u = self.v\n"
    assert NearbySource().propose(ctx("t = ", "sel", suffix=far_below)) is None


def test_nearby_no_ops():
    src = NearbySource()
    assert src.propose(ctx("")) is None  # empty buffer
    assert src.propose(ctx("a", generation=2)) is None
    assert src.propose(ctx("abcd", generation=3)) is None  # nothing repeats
    assert src.propose(ctx("xy xy", max_tokens=0, generation=4)) is None

"""The mid-line measurement: the points it types at, the line an answer makes, a stand-in run."""

from __future__ import annotations

from structspec.bench.infill import Case
from structspec.bench.midline import applied, midline_point, run_midline_benchmark


def case(target: str) -> Case:
    return Case("c", "files", "file:///a.py", "python", "x = 1\n    \n", 1, "    ", target)


def test_the_word_retyped_is_the_middle_one_that_code_follows():
    point = midline_point(case("total = compute(items, limit) + offset"))
    assert point is not None
    assert (point.before, point.word, point.rest) == (
        "    total = compute(",
        "items",
        ", limit) + offset",
    )
    # A word in quotes, or one only closers follow, is not taken.
    quoted = midline_point(case('print("some words here", value)'))
    assert quoted is not None and quoted.word == "print"
    assert midline_point(case("value")) is None  # nothing follows
    assert midline_point(case("f(a, value)")) is None  # only a closer follows


def test_the_line_an_answer_makes_carries_the_rest_or_keeps_it_after():
    assert applied("x = f(", "items, limit)", ", limit)") == "x = f(items, limit)"
    assert applied("x = f(", "items", ", limit)") == "x = f(items, limit)"


def test_the_measurement_asks_both_ways_through_the_language_server():
    lines: list[str] = []
    result = run_midline_benchmark("standin", 1, lines.append, limit=6, timeout_s=120)
    shown, before = result["as shown"], result["without the rule"]
    assert shown["asked"] == before["asked"] > 0
    assert before["shown"] > 0 and shown["shown"] <= before["shown"]
    # The rule only drops answers: one it keeps is the line the model wrote, cleaned alike.
    for mine, old in zip(shown["records"], before["records"], strict=True):
        assert mine["shown"] is None or mine["shown"] == old["shown"], (mine, old)
    assert any(line.startswith("as shown") for line in lines), lines

"""Stop strings: one Aho-Corasick pass, capped count and length (engine/stops.py)."""

import random

import pytest

from structspec.engine.stops import MAX_STOP_CHARS, MAX_STOPS, StopMatcher, TextStream


def test_overlapping_stops_first_complete_wins():
    s = TextStream(("abcd", "bc"))
    assert s.push(b"xabcd") == "xa" and s.stopped


def test_stop_found_against_naive_search():
    """Every cut equals the earliest-ending match a plain search finds, token by token."""
    rng = random.Random(7)
    for _ in range(300):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 4))) for _ in range(3)]
        text = "".join(rng.choice("abc") for _ in range(rng.randint(0, 30)))
        stream = TextStream(stops)
        out = ""
        pos = 0
        while pos < len(text):
            step = rng.randint(1, 4)
            out += stream.push(text[pos : pos + step].encode())
            pos += step
        out += stream.finish()
        ends = [(text.find(s) + len(s), -len(s)) for s in stops if s in text]
        if ends:
            end, neg = min(ends)
            assert stream.stopped and out == text[: end + neg]
        else:
            assert not stream.stopped and out == text


def test_stop_caps_and_linear_time():
    with pytest.raises(ValueError, match="at most"):
        TextStream(["x"] * (MAX_STOPS + 1))
    with pytest.raises(ValueError, match="characters"):
        TextStream(["x" * (MAX_STOP_CHARS + 1)])
    # The worst case of the old quadratic matcher: long stops that the text keeps
    # almost matching. Count automaton steps, not time: each character of text
    # moves the state forward once, and failure links cannot undo more than that.
    stops = ["a" * (MAX_STOP_CHARS - 1) + chr(ord("b") + i) for i in range(MAX_STOPS)]
    matcher = StopMatcher(stops)
    steps = 0
    original = matcher._fail

    class Counting(list[int]):
        def __getitem__(self, i):  # type: ignore[override]
            nonlocal steps
            steps += 1
            return original[i]

    matcher._fail = Counting(original)
    n = 20_000
    for _ in range(n):
        assert matcher.feed("a") == 0
    assert matcher.pending == MAX_STOP_CHARS - 1
    assert steps <= 2 * n

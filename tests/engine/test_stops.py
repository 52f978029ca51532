"""TextStream: UTF-8 held back until complete, stop strings across token boundaries."""

from structspec.engine.stops import TextStream


def test_utf8_split_across_tokens():
    s = TextStream()
    data = "é€😀".encode()
    out = "".join(s.push(data[i : i + 1]) for i in range(len(data)))
    assert out + s.finish() == "é€😀"


def test_stop_string_across_tokens_is_cut():
    s = TextStream(("\n\n",))
    out = s.push(b"abc\n") + s.push(b"\ndef")
    assert s.stopped and out + s.finish() == "abc"


def test_partial_stop_prefix_is_released_at_finish():
    s = TextStream(("END",))
    out = s.push(b"xx") + s.push(b"EN")
    assert out == "xx"
    assert s.finish() == "EN" and s.text == "xxEN"


def test_no_stop():
    s = TextStream()
    assert s.push(b"a") == "a" and s.text == "a"


def test_stop_at_finds_the_piece_that_would_end_the_text_and_changes_nothing():
    s = TextStream(("END", "\n"))
    assert s.push(b"xxE") == "xx"  # "E" held back: it may begin "END"
    assert s.stop_at([b"N", b"D", b"y"]) == 1  # the stop string spans the text and the pieces
    assert s.stop_at([b"a", b"b\nc"]) == 1
    assert s.stop_at([b"ab", b"cd"]) is None
    assert s.stop_at([b"\xc3", b"\xa9\n"]) == 1  # a character split across pieces
    assert s.push(b"Nx") == "ENx" and not s.stopped  # as if stop_at had never been asked
    assert s.stop_at([b"\n"]) == 0
    assert TextStream().stop_at([b"\n"]) is None  # no stop strings

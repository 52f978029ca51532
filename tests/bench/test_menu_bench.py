"""The completion-menu measurement: menus, what VS Code would show, and a stand-in run."""

from __future__ import annotations

from structspec.bench.infill import Case
from structspec.bench.menu import first_words, menu_item, run_menu_benchmark, shown_line

CASE = Case(
    "c", "files", "file:///a.py", "python", "parse = 1\npath = 2\n    \n", 2, "    ", "path.x"
)


def test_the_menus_select_the_right_word_or_the_first_word_of_the_document():
    assert menu_item("right", CASE, "pa") == "path"
    assert menu_item("words", CASE, "pa") == "parse"  # alphabetically first, not the right one
    assert menu_item("words", CASE, "pat") == "path"
    assert menu_item("words", CASE, "zz") is None  # no such word: no menu


def test_vs_code_shows_ghost_text_at_the_cursor_only_where_it_continues_the_item():
    assert shown_line("at cursor", "pa", "path", "th.x") == "path.x"
    assert shown_line("at cursor", "pa", "parse", "th.x") is None
    assert shown_line("after item", "pa", "parse", "parse(x)") == "parse(x)"
    assert shown_line("after item", "pa", "path", "") is None
    assert first_words("  path.x = 1") == ("path", ".")


def test_the_measurement_asks_both_ways_through_the_language_server():
    lines: list[str] = []
    result = run_menu_benchmark("standin", 1, lines.append, limit=4, timeout_s=120)
    right = result["right"]
    assert right["at cursor"]["asked"] == right["after item"]["asked"] > 0
    assert right["after item"]["right_item"] == right["after item"]["asked"]
    # The stand-in always writes: after the item every keystroke shows ghost text.
    assert right["after item"]["shown"] == right["after item"]["asked"]
    assert any(line.startswith("right   after item") for line in lines), lines

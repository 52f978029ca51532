"""``grammars/languages.toml`` is the one home of language data: every consumer reads it."""

from __future__ import annotations

from structspec.completion.prompt import header_for
from structspec.completion.suggest import CursorContext
from structspec.drafts.rules import LANGUAGE_OF_SUFFIX
from structspec.syntax.table import load_table


def test_file_suffixes_name_one_language_everywhere() -> None:
    table = load_table()
    for suffix, language_id in LANGUAGE_OF_SUFFIX.items():
        lang = table.for_path("x" + suffix)
        assert lang is not None and lang.language_ids[0] == language_id
    assert LANGUAGE_OF_SUFFIX[".jsx"] == table.for_path("a.jsx").language_ids[0]


def test_comment_leaders_come_from_the_table() -> None:
    table = load_table()
    assert table.comment_leader("python") == "#"
    assert table.comment_leader("rust") == "//"
    assert table.comment_leader("sql") == "--"
    assert table.comment_leader("ruby") == "#"  # no language entry: [generic.line_comments]
    assert table.comment_leader("clojure") == ";;"
    assert table.comment_leader("json") == ""  # JSON has no comments
    assert table.comment_leader("no-such-language") == ""
    assert header_for("file:///w/a.rb", "ruby") == "# Path: a.rb\n"
    assert header_for("file:///w/a.json", "json") == ""


def test_generic_facts() -> None:
    generic = load_table().generic
    assert {"def", "function", "self"} <= generic.keywords
    assert ":" in generic.block_endings and "{" in generic.block_endings
    # Block mode follows the table's line endings, and a comment line opens nothing.
    text = "def f():\n    "
    assert CursorContext.at(text, len(text)).mode == "block"
    assert CursorContext.at("# note:\n", 8).mode == "line"
    assert CursorContext.at("fn main() {\n", 12).mode == "block"

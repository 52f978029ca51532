"""Cursor points in real files and the simulated editor's edits (``bench/points.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from structspec.bench.points import (
    accept_edit,
    default_files,
    enter_text,
    language_id,
    line_continuation,
    offset_at,
    plan_points,
    repository_root,
)

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30))


def test_plan_points_clears_and_types_real_lines(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text(SOURCE)
    points = plan_points([str(src)], 4, 10)
    assert len(points) == 4
    for p in points:
        lines = p.text.split("\n")
        assert lines[p.line] == p.indent  # the line is cleared to its indentation
        assert p.typed and len(p.typed) <= 10
        assert SOURCE.split("\n")[p.line].startswith(p.indent + p.typed)  # the real text
        assert p.language == "python"


def test_default_files_leave_out_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    inside, outside = repo / "pkg" / "a.py", tmp_path / "lib" / "b.py"
    outside.parent.mkdir()
    for path in (inside, outside):
        path.write_text(SOURCE)

    def fake_collect(language: str, limit: int) -> list[dict[str, str]]:
        return [{"source": str(inside)}, {"source": str(outside)}] if language == "python" else []

    monkeypatch.setattr("structspec.bench.points.collect", fake_collect)
    assert default_files(exclude=repo) == [str(outside.resolve())]


def test_default_files_are_not_this_project():
    root = repository_root()
    for name in default_files():
        assert not Path(name).resolve().is_relative_to(root)


def test_accept_inserts_exactly_the_insert_text():
    text = "def f(x):\n    \n    return x\n"
    cursor = offset_at(text, 1, 4)
    item = {
        "insertText": "y = x * 2",
        "range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 4}},
    }
    new_text, change, after = accept_edit(text, item, cursor)
    assert new_text == "def f(x):\n    y = x * 2\n    return x\n"
    assert change == {"range": item["range"], "text": "y = x * 2"}
    assert new_text[cursor:after] == "y = x * 2"


def test_accept_replaces_the_item_range_in_utf16_columns():
    text = "s = '😀ab'  # c\n"
    item = {  # replace "ab'  # c" (the emoji is two UTF-16 units)
        "insertText": "xy'",
        "range": {"start": {"line": 0, "character": 7}, "end": {"line": 0, "character": 15}},
    }
    new_text, _, after = accept_edit(text, item, offset_at(text, 0, 7))
    assert new_text == "s = '😀xy'\n"
    assert new_text[:after] == "s = '😀xy'"


def test_enter_keeps_the_indentation_and_indents_after_an_opener():
    text = "    if x:\n"
    assert enter_text(text, len("    if x:")) == "\n        "
    text = "    y = 1\n"
    assert enter_text(text, len("    y = 1")) == "\n    "
    text = "\tfor (;;) {\n"
    assert enter_text(text, len("\tfor (;;) {")) == "\n\t\t"


def test_the_user_accepts_again_while_the_suggestion_goes_on_with_the_line():
    text = "def f(x):\n    y = x\n"
    cursor = offset_at(text, 1, 9)

    def answer(insert: str) -> dict[str, object]:
        return {"items": [{"insertText": insert}]}

    assert line_continuation(text, answer(" * 2"), cursor) == {"insertText": " * 2"}
    assert line_continuation(text, answer(" * 2\n    return y"), cursor) is not None
    assert line_continuation(text, answer("\n    return y"), cursor) is None  # the next line
    assert line_continuation(text, answer("   "), cursor) is None
    assert line_continuation(text, {"items": []}, cursor) is None
    assert line_continuation(text, None, cursor) is None


def test_language_ids_come_from_the_language_table():
    assert language_id("/x/app.jsx") == "javascript"  # grammars/languages.toml: extensions
    assert language_id("/x/lib.rs") == "rust"
    assert language_id("/x/page.HTM") == "html"
    assert language_id("/x/notes.xyz") == "xyz"  # no language claims it: its suffix
    assert language_id("/x/README") == "plaintext"

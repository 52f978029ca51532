"""Cursor points in real files, and the edits a simulated editor makes there.

The editor benchmark (``bench/editor.py``) and the infill suite type at cursor
points of real source files of other projects: ``default_files`` chooses
them as the mixed suite does (``bench/mixed.py``), never under this
repository; ``plan_points`` clears a line of each to its indentation and
keeps its real text to type. Positions are LSP positions (UTF-16 columns),
and an accepted suggestion or an Enter with auto-indent is applied to the
text as VS Code would (``accept_edit``, ``enter_text``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structspec.bench.mixed import collect
from structspec.completion.suggest import CursorContext
from structspec.syntax.table import load_table

#: Default files per language (fewer where the machine has fewer).
DEFAULT_LANGUAGES: dict[str, int] = {"python": 2, "javascript": 2, "go": 2, "sql": 1, "html": 1}
#: Cursor points per file and characters typed at most per point.
POINTS_PER_FILE = 2
MAX_CHARS = 24
#: One indentation unit of the simulated editor's auto-indent (tabs stay tabs).
INDENT_UNIT = "    "


def repository_root() -> Path:
    """The checkout this module runs from (its files are never typed by default)."""
    return Path(__file__).resolve().parents[3]


def default_files(exclude: Path | None = None) -> list[str]:
    """Real files of several languages on this machine, none under ``exclude``.

    ``exclude`` defaults to the repository root. Languages with no file on the
    machine are left out.
    """
    root = (exclude or repository_root()).resolve()
    files: list[str] = []
    for language, wanted in DEFAULT_LANGUAGES.items():
        found = 0
        for item in collect(language, wanted + 4):  # a few spare for excluded ones
            path = Path(item["source"]).resolve()
            if found >= wanted or path.is_relative_to(root):
                continue
            files.append(str(path))
            found += 1
    return files


def language_id(path: str) -> str:
    """The LSP languageId of a file: its language's first in the language table.

    A file no language claims is named by its suffix (``plaintext`` without one).
    """
    spec = load_table().for_path(path)
    if spec is not None and spec.language_ids:
        return spec.language_ids[0]
    return Path(path).suffix.lower().lstrip(".") or "plaintext"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def offset_at(text: str, line: int, character: int) -> int:
    """The string offset of an LSP position (UTF-16 columns), clamped to the line."""
    start = 0
    for _ in range(line):
        newline = text.find("\n", start)
        if newline < 0:
            return len(text)
        start = newline + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    units, i = 0, start
    while i < end and units < character:
        units += 2 if ord(text[i]) > 0xFFFF else 1
        i += 1
    return i


def position_at(text: str, offset: int) -> dict[str, int]:
    """The LSP position of a string offset."""
    start = text.rfind("\n", 0, offset) + 1
    return {"line": text.count("\n", 0, offset), "character": utf16_len(text[start:offset])}


def accept_edit(text: str, item: dict[str, Any], cursor: int) -> tuple[str, dict[str, Any], int]:
    """Accept an inline completion item as VS Code does.

    Returns the new text, the ``didChange`` content change (the item's
    ``insertText`` over its ``range``; at the cursor when it has none) and the
    cursor after the inserted text.
    """
    insert = str(item.get("insertText", ""))
    rng = item.get("range")
    if rng:
        start = offset_at(text, rng["start"]["line"], rng["start"]["character"])
        end = offset_at(text, rng["end"]["line"], rng["end"]["character"])
    else:
        start = end = cursor
        rng = {"start": position_at(text, cursor), "end": position_at(text, cursor)}
    new_text = text[:start] + insert + text[end:]
    return new_text, {"range": rng, "text": insert}, start + len(insert)


def line_continuation(text: str, answer: Any, cursor: int) -> dict[str, Any] | None:
    """The answer's first item when it goes on with the cursor's line, else ``None``.

    An item goes on with the line when what it inserts after ``cursor`` has
    more than blanks before its first newline (one that starts with a newline
    is the next line's: the user presses Enter instead).
    """
    items = answer.get("items") if isinstance(answer, dict) else None
    item = items[0] if items and isinstance(items[0], dict) else None
    if item is None:
        return None
    new_text, _, end = accept_edit(text, item, cursor)
    inserted = new_text[cursor:end] if end >= cursor else ""
    return item if inserted.split("\n", 1)[0].strip() else None


def enter_text(text: str, offset: int) -> str:
    """What Enter inserts at ``offset`` with auto-indent: a newline and an indentation.

    The line's indentation, one unit deeper when the line ends with a block
    opener (``grammars/languages.toml``, as the completion layer decides it).
    """
    start = text.rfind("\n", 0, offset) + 1
    line = text[start:offset]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    if CursorContext.at(text, offset).opener_line:
        indent += "\t" if indent.startswith("\t") else INDENT_UNIT
    return "\n" + indent


@dataclass(frozen=True)
class Point:
    """One cursor point: ``line`` of ``uri`` is cleared to ``indent`` and ``typed`` is typed."""

    uri: str
    language: str
    text: str  # the document with the line cleared
    line: int
    indent: str
    typed: str
    #: The rest of the line's real text after ``typed`` (cut at ``max_chars``).
    rest: str = ""


def plan_points(files: Sequence[str], points_per_file: int, max_chars: int) -> list[Point]:
    """Cursor points spread evenly over each file (lines with at least 8 characters of code)."""
    points: list[Point] = []
    for name in files:
        path = Path(name)
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {name}: {exc}") from None
        lines = source.splitlines(keepends=True)
        candidates = [
            i
            for i, ln in enumerate(lines)
            if len(ln.strip()) >= 8 and i >= max(3, len(lines) // 10)
        ]
        if not candidates:
            continue
        step = max(1, len(candidates) // max(1, points_per_file))
        chosen = candidates[::step][:points_per_file]
        uri = path.resolve().as_uri()
        for i in chosen:
            body = lines[i].rstrip("\r\n")
            indent = body[: len(body) - len(body.lstrip())]
            ending = lines[i][len(body) :] or "\n"
            text = "".join(lines[:i]) + indent + ending + "".join(lines[i + 1 :])
            code = body[len(indent) :]
            typed, rest = code[:max_chars], code[max_chars:]
            points.append(Point(uri, language_id(name), text, i, indent, typed, rest))
    return points


def first_points(points: Sequence[Point], limit: int) -> list[Point]:
    """``limit`` points: the first of every file in turn, then the second, and so on."""
    by_file: dict[str, list[Point]] = {}
    for point in points:
        by_file.setdefault(point.uri, []).append(point)
    turns = itertools.zip_longest(*by_file.values())
    return [p for turn in turns for p in turn if p is not None][:limit]

"""Incremental lexical state of a buffer: brackets, strings, comments, lines, tags.

The shadow engine needs the state *at the cursor* of code that is usually half
typed, where a parser's tree is full of ERROR nodes. This scanner follows the
text character by character (a pass appends a few characters, so an update
costs microseconds) and keeps what the language table says matters:

- the bracket stack, each entry with the line it opened on and that line's
  indentation;
- whether the cursor is inside a string (and which delimiter closes it) or a
  comment;
- the current line, its indentation, the bracket depth at its start, and the
  last non-blank line;
- the indentation unit the buffer itself uses (tabs or a number of spaces);
- JSON (a language with ``object_notation``): what each open object or array
  expects next (key, colon, value, more);
- HTML: the stack of open elements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from structspec.syntax.table import LanguageSpec

# JSON expectations of an open container.
KEY, COLON, VALUE, AFTER = "key", "colon", "value", "after"


@dataclass(slots=True)
class Open:
    """An open bracket (or HTML element): what closes it and where it opened."""

    closer: str
    line: int
    indent: str
    expect: str = VALUE  # JSON: what the container expects next
    string_values: bool = False  # JSON: the last value in it was a string
    last_key: str = ""  # JSON: the last key of the object ("" before the first)


@dataclass
class LexState:
    """See the module docstring. Feed text with ``feed``; read the fields."""

    lang: LanguageSpec
    stack: list[Open] = field(default_factory=list)
    string: str | None = None  # the delimiter that closes the open string
    string_role: str = ""  # JSON: KEY or VALUE for the open string
    comment: str | None = None  # "\n" for a line comment, else the block closer
    line: str = ""  # text of the current line so far
    line_no: int = 0
    line_depth: int = 0  # bracket depth at the start of the current line
    prev_line: str = ""  # last non-blank line before the current one
    prev_depth: int = 0
    tags: list[Open] = field(default_factory=list)  # HTML open elements
    chars: int = 0
    _escape: bool = False
    _tag: str | None = None  # HTML: text of the tag being read
    _tag_quote: str = ""
    _recent: str = ""
    _empty_close: int = -1  # position of a just-closed empty string ("" -> maybe """)
    _string_start: int = 0
    _string_col: int = 0  # where the open string's text starts in ``line``
    strings: set[str] = field(default_factory=set)  # JSON: texts of finished strings
    #: JSON: key -> the key that followed it in the last object that had it ("" is the
    #: start of an object), and key -> (its last string value, how often in a row).
    key_next: dict[str, str] = field(default_factory=dict)
    key_value: dict[str, tuple[str, int]] = field(default_factory=dict)
    _indent_votes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._openers = {o: c for o, c in self.lang.brackets}
        self._closers = {c for _, c in self.lang.brackets}
        self._json = self.lang.object_notation  # JSON's key/value structure is followed
        self._html = self.lang.block_style == "tag"
        self._quote_chars = {q[0] for q in self.lang.quotes}
        self._line_markers = self.lang.line_comment
        self._block = self.lang.block_comment
        # Characters that can change the state; runs of other characters are taken whole.
        special = set("\n\\") | set(self._openers) | self._closers
        for q in self.lang.quotes:
            special |= set(q)
        for marker in (*self._line_markers, *(self._block or ())):
            special |= set(marker)
        if self._json:
            special |= set(":,")
        if self._html:
            special |= set("<>\"'=!-")
        self._special = re.compile("[" + re.escape("".join(sorted(special))) + "]")

    # -- reading ------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.stack)

    @property
    def in_code(self) -> bool:
        """Neither in a string nor in a comment (nor inside an HTML tag)."""
        return self.string is None and self.comment is None and self._tag is None

    @property
    def string_text(self) -> str:
        """Text of the open string so far (on its line)."""
        return self.line[self._string_col :] if self.string is not None else ""

    @property
    def in_tag(self) -> bool:
        return self._tag is not None

    @property
    def line_indent(self) -> str:
        body = self.line.lstrip(" \t")
        return self.line[: len(self.line) - len(body)]

    @property
    def indent_unit(self) -> str:
        """The indentation step the buffer uses (the table's default until it shows one)."""
        if not self._indent_votes:
            return self.lang.indent
        return max(self._indent_votes.items(), key=lambda kv: kv[1])[0]

    # -- feeding ------------------------------------------------------------
    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        search = self._special.search
        while i < n:
            m = search(text, i)
            j = m.start() if m else n
            if j > i:
                self._plain(text[i:j])
            if m is None:
                break
            self._char(text[j])
            i = j + 1

    def _plain(self, run: str) -> None:
        """A run of characters none of which can change the state (by construction)."""
        self.chars += len(run)
        self._recent = (self._recent + run)[-4:]
        self.line += run
        if self._escape:
            self._escape = False
        if (
            self._json
            and self.string is None
            and self.comment is None
            and self.stack
            and self.stack[-1].expect == VALUE
            and not run.isspace()
        ):
            self.stack[-1].expect = AFTER
            self.stack[-1].string_values = False
        if self._tag is not None:
            self._tag += run

    def _newline(self) -> None:
        if self.line.strip():
            old = _indent_of(self.prev_line) if self.prev_line else ""
            new = self.line_indent
            if new.startswith(old) and len(new) > len(old):
                step = new[len(old) :]
                if step.strip() == "" and len(step) <= 8:
                    self._indent_votes[step] = self._indent_votes.get(step, 0) + 1
            self.prev_line = self.line
            self.prev_depth = self.line_depth
        self.line = ""
        self.line_no += 1
        self.line_depth = len(self.stack)

    def _char(self, ch: str) -> None:
        self.chars += 1
        recent = (self._recent + ch)[-4:]
        self._recent = recent
        if ch == "\n":
            if self.comment == "\n":
                self.comment = None
            one_line = self.string is not None and len(self.string) == 1 and self.string != "`"
            if one_line and not self._json:
                self.string = None  # an unterminated one-line string: recover at the line end
            self._newline()
            return
        self.line += ch
        if self.comment is not None:
            if self.comment != "\n" and recent.endswith(self.comment):
                self.comment = None
            return
        if self._html:
            self._html_char(ch, recent)
            return
        if self.string is not None:
            self._string_char(ch, recent)
            return
        for marker in self._line_markers:
            if recent.endswith(marker):
                self.comment = "\n"
                return
        if self._block and recent.endswith(self._block[0]):
            self.comment = self._block[1]
            return
        if ch in self._quote_chars:
            self._open_string(ch, recent)
            return
        top = self.stack[-1] if self.stack else None
        if ch in self._openers:
            if top is not None and self._json:
                if top.line < 0 and top.expect == KEY:
                    top.closer = "]"  # the implicit container holds values: an array
                top.expect = AFTER
            self.stack.append(
                Open(self._openers[ch], self.line_no, self.line_indent, KEY if ch == "{" else VALUE)
            )
        elif ch in self._closers:
            # Pop to the matching opener; a stray closer is ignored.
            implicit_closed = False
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i].closer == ch:
                    implicit_closed = self.stack[i].line < 0
                    del self.stack[i:]
                    break
            else:
                implicit_closed = True
            if implicit_closed and self._json and not self.stack:
                # The text started inside a container that just closed: the one
                # around it is not in view either; assume an object (checked below).
                self.stack.append(Open("}", -1, "", AFTER))
            if self._json and self.stack:
                self.stack[-1].expect = AFTER
                self.stack[-1].string_values = False
        elif self._json and top is not None:
            if ch == ":":
                top.expect = VALUE
            elif ch == "," and top.line < 0 and top.expect == COLON:
                top.closer, top.expect = "]", VALUE  # "a", "b": an implicit array
            elif ch == ",":
                top.expect = KEY if top.closer == "}" else VALUE
            elif not ch.isspace() and top.expect == VALUE:
                top.expect = AFTER
                top.string_values = False

    def _open_string(self, ch: str, recent: str) -> None:
        for q in self.lang.quotes:
            just_emptied = self._empty_close == self.chars - 1
            if len(q) == 3 and q[0] == ch and recent.endswith(q) and just_emptied:
                self.string = q  # the "" just closed was the start of a """
                return
        self.string = ch
        if self._json and not self.stack:
            # The text started inside a container: a string at the top is most likely a key.
            self.stack.append(Open("}", -1, "", KEY))
        top = self.stack[-1] if self.stack else None
        if self._json:
            self.string_role = KEY if top is not None and top.expect == KEY else VALUE
        self._string_start = self.chars
        self._string_col = len(self.line)

    def _string_char(self, ch: str, recent: str) -> None:
        if self._escape:
            self._escape = False
            return
        if ch == "\\" and self.string != "`":
            self._escape = True
            return
        delim = self.string
        assert delim is not None
        if not recent.endswith(delim):
            return
        if len(delim) == 1 and self.chars == self._string_start + 1:
            self._empty_close = self.chars  # "" : maybe the start of a """
        text = self.line[self._string_col : -1] if self._json else ""
        if self._json:
            if len(self.strings) > 20_000:
                self.strings.clear()
                self.key_next.clear()
                self.key_value.clear()
            self.strings.add(text)
        self.string = None
        if self._json and self.stack:
            top = self.stack[-1]
            if self.string_role == KEY:
                top.expect = COLON
                if top.closer == "}":
                    if top.line >= 0 or top.last_key:  # an implicit object's start is unseen
                        self.key_next[top.last_key] = text
                    top.last_key = text
            else:
                top.expect = AFTER
                top.string_values = True
                if top.closer == "}" and top.last_key:
                    old = self.key_value.get(top.last_key)
                    run = old[1] + 1 if old is not None and old[0] == text else 1
                    self.key_value[top.last_key] = (text, run)

    def _html_char(self, ch: str, recent: str) -> None:
        if self._tag is None:
            if ch == "<":
                self._tag = ""
            return
        if self._tag_quote:
            if ch == self._tag_quote:
                self._tag_quote = ""
            self._tag += ch
            return
        if ch in "\"'" and "=" in self._tag:
            self._tag_quote = ch
            self._tag += ch
            return
        if ch == ">":
            self._close_tag(self._tag)
            self._tag = None
            return
        self._tag += ch
        if self._tag == "!--":
            self._tag = None
            self.comment = "-->"

    def _close_tag(self, body: str) -> None:
        body = body.strip()
        if not body or body[0] in "!?":
            return
        closing = body.startswith("/")
        name = body.lstrip("/").split(None, 1)[0].rstrip("/").lower() if body.lstrip("/") else ""
        if not name:
            return
        if closing:
            for i in range(len(self.tags) - 1, -1, -1):
                if self.tags[i].closer == name:
                    del self.tags[i:]
                    break
        elif not body.endswith("/") and name not in self.lang.void_elements:
            self.tags.append(Open(name, self.line_no, self.line_indent))


def _indent_of(line: str) -> str:
    body = line.lstrip(" \t")
    return line[: len(line) - len(body)]

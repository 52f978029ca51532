"""What to suggest at a cursor: single line or block, and the clean-up of model text.

- **Mode.** Mid-line (code before the cursor on its line, or a blank line that
  does not open a block) gets a single line: generation stops at the first
  newline. At the start of a block (a blank line after a line that opens one,
  or the end of such a line) a block is suggested: lines are kept until one
  dedents below the block's first line.
- **Clean-up** (what Tabby and llama.vim users expect):

  - *no repeat of the rest of the line*: a single-line suggestion whose tail
    repeats the text after the cursor loses that tail;
  - *in the middle of a line the model did not see*: with code after the
    cursor on its line (more than closing brackets, quotes and one ``:``,
    ``{``, ``;`` or ``,``: ``CursorContext.code_follows``) and a prompt
    without it (a model without fill-in-the-middle tokens), the model's line
    is kept only when it ends with that code: the insertion then joins what
    follows, where a line written past it would be shown with that code
    pushed after it (``docs/MEASUREMENTS.md`` §20: on real-file lines this
    kept every right insertion and dropped nine in ten wrong ones);
  - *brackets balanced against the suffix*: a suggestion that closes a bracket
    opened before the cursor, when the text after the cursor starts with that
    same closer, is cut before it (the line keeps one closer, not two); a
    bracket the suggestion opened itself is never cut away;
  - *no repeat of the following lines*: a suggestion whose lines are the lines
    that already follow the cursor is dropped, and a block is cut where it
    starts repeating them;
  - *indented to the cursor's block*: the lines of a multi-line block keep
    their indentation relative to its first line, measured from the cursor's
    column, in the document's indentation character (tabs or spaces);
  - *no loop*: a line that ends in a pattern repeated over and over (a model
    stuck in a loop, ``"a", "b", "b", "b", ...``) is dropped (Tabby drops
    them too); the generation stops as soon as one appears, so a loop costs
    a few tokens, not ``maxTokens``;
  - no trailing whitespace (but the space between an insertion and a word, a
    quote or an opener right after the cursor: ``f(a, |b)`` takes ``c, ``),
    and never only whitespace (then there is no suggestion at all).
- **From pre-generated text** (``continuation_answer``): what the model wrote
  past a suggestion answers a cursor further along it, with the same rules,
  once the lines the answer needs are complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from structspec.syntax.table import GenericSpec, GrammarTableError, load_table

LINE = "line"
BLOCK = "block"


def _generic() -> GenericSpec:
    try:
        return load_table().generic
    except GrammarTableError:
        return GenericSpec()


#: Line endings that open an indented block in common languages (``languages.toml``
#: ``[generic]``). An open parenthesis or bracket is not one: the arguments usually
#: follow on the line.
_OPENERS = _generic().block_endings
_COMMENT_STARTS = _generic().comment_starts
_WORD_CHAR = re.compile(r"[\w$]")
#: A rest of the line that only closes what the cursor is inside: closing
#: brackets and quotes, then at most one ``:``, ``{``, ``;`` or ``,`` (``)``,
#: ``") {``, ``]);``). Typing inside brackets or quotes an editor closed ends
#: there; anything else after the cursor is code the suggestion must fit.
_CLOSING_REST = re.compile(r"\s*[)\]}\"'`]*\s*[:{;,]?\s*")


def indent_width(line: str, tab: int = 4) -> int:
    """Width of the leading whitespace, tabs counted as ``tab`` columns."""
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += tab - width % tab
        else:
            break
    return width


def _opens_block(line: str) -> bool:
    stripped = line.rstrip()
    if not stripped:
        return False
    # A comment that ends with ':' is not a block opener.
    if stripped.lstrip().startswith(_COMMENT_STARTS):
        return False
    return stripped.endswith(_OPENERS)


def _line_start(text: str, offset: int) -> int:
    """Where the line holding ``offset`` starts: after the last line break before it."""
    return max(text.rfind("\n", 0, offset), text.rfind("\r", 0, offset)) + 1


def _line_end(text: str, offset: int) -> int:
    """Where the line holding ``offset`` ends: at the first line break from it (or the end)."""
    ends = [i for i in (text.find("\n", offset), text.find("\r", offset)) if i >= 0]
    return min(ends, default=len(text))


@dataclass(frozen=True)
class CursorContext:
    """The text around a cursor that decides what to suggest.

    ``line_prefix``/``line_suffix``: the cursor's line before/after it;
    ``previous_line``: the nearest non-blank line above; ``after``: a window of
    the document after the cursor (rest of the line included).
    """

    line_prefix: str
    line_suffix: str
    previous_line: str = ""
    after: str = ""

    @classmethod
    def at(cls, text: str, offset: int, window: int = 2000) -> CursorContext:
        """The context of ``offset`` in ``text`` (line breaks: ``\\n``, ``\\r\\n``, ``\\r``)."""
        offset = max(0, min(offset, len(text)))
        start = _line_start(text, offset)
        prefix = text[start:offset]
        suffix = text[offset : _line_end(text, offset)]
        previous = ""
        pos = start
        # Walk up at most a few hundred lines to find a non-blank one.
        for _ in range(200):
            if pos <= 0:
                break
            end = pos - 1  # the line break before ``pos``, one character of it
            if text[end] == "\n" and text.startswith("\r", end - 1) and end > 0:
                end -= 1
            ls = _line_start(text, end)
            candidate = text[ls:end]
            if candidate.strip():
                previous = candidate
                break
            pos = ls
        return cls(prefix, suffix, previous, text[offset : offset + window])

    @property
    def mode(self) -> str:
        """``line`` or ``block`` (see the module docstring)."""
        if self.line_suffix.strip():
            return LINE
        if not self.line_prefix.strip():
            return BLOCK if _opens_block(self.previous_line) else LINE
        return BLOCK if _opens_block(self.line_prefix) else LINE

    @property
    def code_follows(self) -> bool:
        """The rest of the line holds code, not only what closes the cursor's brackets."""
        return _CLOSING_REST.fullmatch(self.line_suffix) is None

    @property
    def opener_line(self) -> bool:
        """The cursor ends a line that opens a block (the block starts on the next line)."""
        return bool(self.line_prefix.strip()) and self.mode == BLOCK

    @property
    def word_prefix(self) -> str:
        """The identifier characters just before the cursor (for completion menus)."""
        # Walked back from the end, one character at a time: a search for the
        # tail (``[\w$]*\Z``) tried every start in a run of word characters,
        # quadratic in it (a 20,000-character minified line took 1.9 s a keystroke).
        line = self.line_prefix
        start = len(line)
        while start and _WORD_CHAR.match(line, start - 1):
            start -= 1
        return line[start:]


def cut_block(text: str, ctx: CursorContext) -> tuple[str, bool]:
    """Cut ``text`` before its first line that dedents below the block.

    The block's indentation is that of its first non-blank line (counting the
    text before the cursor on the cursor's line). Returns ``(text, cut)``;
    ``cut`` is true when a dedent was found, so generation can stop. A line
    still made only of whitespace is not judged yet.
    """
    lines = (ctx.line_prefix + text).split("\n")
    first = 1 if ctx.opener_line else 0
    # After an opener on the cursor's line, the block must be indented deeper than it.
    floor = indent_width(ctx.line_prefix) + 1 if ctx.opener_line else 0
    block_indent: int | None = None
    for i in range(first, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        width = indent_width(line)
        if block_indent is None and width >= floor:
            block_indent = width
        elif block_indent is None or width < block_indent:
            kept = "\n".join(lines[:i])
            return kept[len(ctx.line_prefix) :], True
    return text, False


_OPEN_CLOSE = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPEN_CLOSE.values())
_QUOTES = frozenset("\"'`")


def _bracket_scan(text: str) -> tuple[int | None, int]:
    """Brackets of ``text``, ignoring those inside quotes on a line.

    Returns ``(first_unmatched_closer, still_open)``: the index of the first
    closer whose opener lies before ``text`` (``None`` if none), and how many
    brackets ``text`` opens and leaves open.
    """
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    first: int | None = None
    for i, ch in enumerate(text):
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote or ch == "\n":
                quote = None
            continue
        if ch in _QUOTES:
            quote = ch
        elif ch in _OPEN_CLOSE:
            stack.append(_OPEN_CLOSE[ch])
        elif ch in _CLOSERS:
            if stack and stack[-1] == ch:
                stack.pop()
            elif not stack and first is None:
                first = i
    return first, len(stack)


def _balance_against_suffix(text: str, suffix: str) -> str:
    """Cut ``text`` before a closer of a bracket opened before the cursor that the suffix has."""
    head = suffix.lstrip()
    if not head or head[0] not in _CLOSERS:
        return text
    first, _ = _bracket_scan(text)
    if first is not None and text[first] == head[0]:
        return text[:first].rstrip()
    return text


def _strip_line_overlap(text: str, suffix: str) -> str:
    """Remove the end of ``text`` that repeats the start of ``suffix`` (the rest of the line).

    A cut that would leave a bracket of the suggestion's own open (``foo(bar)``
    before a suffix ``)``) is not made: that closer is the suggestion's.
    """
    suffix = suffix.rstrip()
    if not suffix.strip():
        return text
    body = text.rstrip()
    for k in range(min(len(body), len(suffix)), 0, -1):
        piece = suffix[:k]
        if piece.strip() and body.endswith(piece) and _bracket_scan(body[:-k])[1] == 0:
            return body[:-k]
    return text


def _indent_unit(ctx: CursorContext) -> str:
    """The document's indentation character near the cursor (a tab or a space)."""
    for line in (ctx.line_prefix, ctx.previous_line):
        lead = line[: len(line) - len(line.lstrip())]
        if lead:
            return "\t" if lead[0] == "\t" else " "
    return " "


def _reindent(text: str, ctx: CursorContext) -> str:
    """Indent a multi-line block to the cursor's block (see the module docstring).

    On a blank line the cursor's column is the block's indentation: whitespace
    the model put before the first line is dropped and the following lines move
    left by as much. Leading whitespace is rewritten in the document's
    indentation character (tab width 4).
    """
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    shift = 0
    if not ctx.line_prefix.strip():
        first = lines[0]
        shift = indent_width(ctx.line_prefix + first) - indent_width(ctx.line_prefix)
        lines[0] = first.lstrip(" \t")
    tab = _indent_unit(ctx) == "\t"
    out = [lines[0]]
    for line in lines[1:]:
        if not line.strip():
            out.append("")
            continue
        width = max(0, indent_width(line) - shift)
        lead = "\t" * (width // 4) + " " * (width % 4) if tab else " " * width
        out.append(lead + line.lstrip(" \t"))
    return "\n".join(out)


def _following_lines(ctx: CursorContext, n: int) -> list[str]:
    """The next ``n`` non-blank lines after the cursor's line, their indentation kept."""
    found: list[str] = []
    for line in ctx.after.split("\n")[1:]:
        if line.strip():
            found.append(line.rstrip())
            if len(found) == n:
                break
    return found


def _repeats_following(text: str, ctx: CursorContext) -> bool:
    """The suggestion only restates what already follows the cursor."""
    if ctx.line_suffix.strip():
        return text.strip() == ctx.line_suffix.strip()
    if ctx.line_prefix.strip():
        # The cursor ends a line: text on it completes that line (new), so only
        # a suggestion that starts on the next line can repeat what follows.
        first, _, text = text.partition("\n")
        if first.strip():
            return False
    else:
        # In the line's indentation the suggestion's first line starts there. Lines
        # are compared with their indentation: a line at another one is another
        # line (a Go block's ``\t\t}`` before its function's ``\t}``), not a repeat.
        text = ctx.line_prefix + text
    lines = [ln.rstrip() for ln in text.split("\n") if ln.strip()]
    return bool(lines) and _following_lines(ctx, len(lines)) == lines


#: A loop: a unit of at least two different characters repeated at least
#: ``LOOP_REPEATS`` times in a row at the end of a line, covering at least
#: ``LOOP_CHARS`` characters, or one character repeated ``LOOP_RUN_CHARS``
#: times (longer than any separator line, ``# -----``, of a 120-column file).
#: Short runs (``0, 0, 0``) are ordinary code.
LOOP_REPEATS = 4
LOOP_CHARS = 40
LOOP_RUN_CHARS = 121
#: Characters at the end of a line looked at (bounds the work of each check).
_LOOP_WINDOW = 480


def loop_start(text: str) -> int | None:
    """Start of ``text``'s last line when that line ends in a loop (see above), else ``None``."""
    start = text.rfind("\n") + 1
    line = text[max(start, len(text) - _LOOP_WINDOW) :].rstrip()
    if len(line) >= LOOP_RUN_CHARS and line.endswith(line[-1] * LOOP_RUN_CHARS):
        return start
    for period in range(2, len(line) // LOOP_REPEATS + 1):
        unit = line[-period:]
        repeats = max(LOOP_REPEATS, -(-LOOP_CHARS // period))
        if period * repeats > len(line):
            continue
        if len(set(unit)) >= 2 and line.endswith(unit * repeats):
            return start
    return None


def _strip_repeated_lines(text: str, after: str) -> str:
    """Cut a block where it starts repeating the lines that follow the cursor's line."""
    following = [ln.strip() for ln in after.split("\n")[1:] if ln.strip()]
    if not following:
        return text
    anchor = following[0]
    if len(anchor) < 3:
        return text
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if lines[i].strip() == anchor:
            return "\n".join(lines[:i])
    return text


#: Characters that attach to the text before them: no space is kept before them.
_ATTACHED = frozenset(")]},;:.")


def _needs_gap(rest: str) -> bool:
    """The rest of the line starts right at the cursor with a word, a quote or an opener:
    the space an insertion ends with separates it from that (``f(a, |b)`` takes ``c, ``)."""
    return bool(rest[:1].strip()) and rest[0] not in _ATTACHED


def _joins_rest(line: str, ctx: CursorContext) -> bool:
    """The model's ``line`` from the cursor ends with the code that follows it there."""
    return line.rstrip().endswith(ctx.line_suffix.strip())


def clean(text: str, ctx: CursorContext, mode: str, *, sees_rest: bool = True) -> str | None:
    """The suggestion to show for model ``text``, or ``None`` when nothing is worth showing.

    ``sees_rest``: the model's prompt held the text after the cursor (a
    fill-in-the-middle prompt); without it, in the middle of a line only a
    line that joins the code after the cursor is kept (module docstring).
    """
    loop = loop_start(text)
    if loop is not None:
        text = text[:loop]
    gap = ""
    if mode == LINE:
        text = text.split("\n", 1)[0]
        if not sees_rest and ctx.code_follows and not _joins_rest(text, ctx):
            return None
        text = _balance_against_suffix(text, ctx.line_suffix)
        text = _strip_line_overlap(text, ctx.line_suffix)
        if _needs_gap(ctx.line_suffix):
            gap = text[len(text.rstrip()) :]
    else:
        text, _ = cut_block(text, ctx)
        text = _strip_repeated_lines(text, ctx.after)
        text = _reindent(text, ctx)
    # No trailing whitespace on any line (but the gap before the rest of the
    # line), no trailing blank lines.
    text = "\n".join(line.rstrip() for line in text.split("\n")).rstrip()
    if not text.strip() or _repeats_following(text, ctx):
        return None
    return text + gap


def continuation_answer(
    follow: str, ended: bool, ctx: CursorContext, *, sees_rest: bool = True
) -> tuple[bool, str | None]:
    """The suggestion at ``ctx`` from the model's pre-generated output ``follow``.

    Returns ``(ready, text)``: ``ready`` is false while the lines the answer
    needs are not complete yet (then the model is asked; ``ended``: the model
    ended its output, so its last line is complete); ``text`` is ``None`` when
    the model's answer is to show nothing (a single line that ends here).
    Mode as for a request, except that at the end of a line the continuation's
    next lines are offered as a block. ``sees_rest`` as for ``clean``.
    """
    mode = ctx.mode
    if mode == LINE and not ctx.line_suffix.strip() and follow.lstrip(" \t").startswith("\n"):
        mode = BLOCK
    if mode == LINE:
        return ended or "\n" in follow, clean(follow, ctx, LINE, sees_rest=sees_rest)
    complete = follow if ended else follow[: max(0, follow.rfind("\n"))]
    if not complete.strip():
        return ended, None  # nothing complete yet, or the model's answer is nothing
    return True, clean(complete, ctx, BLOCK)

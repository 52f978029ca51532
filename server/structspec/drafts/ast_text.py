"""Text helpers of the syntax-tree shadow's rule families (lines, words, header tiers)."""

from __future__ import annotations

from structspec.syntax.lexer import LexState

#: Python words after which a block header cannot end yet.
OPEN_ENDINGS = frozenset(
    {
        "in",
        "not",
        "and",
        "or",
        "is",
        "if",
        "for",
        "lambda",
        "await",
        "as",
        "import",
        "from",
        "with",
        "while",
        "elif",
        "return",
        "yield",
    }
)
#: Characters after which an expression is certainly not finished.
CONTINUING = set(",([{=+-*/%<>!&|^~\\.@:;?")


def indent_of(line: str) -> str:
    body = line.lstrip(" \t")
    return line[: len(line) - len(body)]


def first_word(body: str) -> str:
    body = body.lstrip("} \t")
    word = ""
    for ch in body:
        if ch.isalnum() or ch == "_":
            word += ch
        else:
            break
    return word


#: Block keywords that stand alone on a header line (``else:``, ``try {``).
BARE_HEADERS = frozenset({"else", "try", "finally", "do", "loop"})


def header_tier(body: str, word: str, closers: str) -> str:
    """How sure a block header's end is: a bare keyword (``else``) is certain; after a
    closed bracket (``def f(x)``) likely; after a word (``if x > 0``) the condition may
    go on; with brackets still open (``def f(x``) more arguments may come."""
    if closers:
        return "header-close"
    if body == word and word in BARE_HEADERS:
        return "header-kw"
    return "header" if body[-1] in ")]" else "header-cond"


def value_start(lex: LexState, key: str) -> str:
    """The start of ``key``'s value: ``"`` if its last value was a string, the whole
    string if the same value came twice in a row; empty when unknown."""
    seen = lex.key_value.get(key)
    if seen is None:
        return ""
    return '"' + seen[0] + '"' if seen[1] >= 2 else '"'


def last_word(body: str) -> str:
    i = len(body)
    while i > 0 and (body[i - 1].isalnum() or body[i - 1] == "_"):
        i -= 1
    return body[i:]

"""The code rule family of the syntax-tree shadow: blocks, headers, indentation, closures.

Tiers (the draft's ``tier``): ``block``, ``header-kw``, ``header``,
``header-cond``/``header-close``/``close`` (only with ``all_tiers``),
``close-word``, ``indent`` and ``kw`` (keyword continuations of the table);
see ``ast_shadow`` for what each proposes.
"""

from __future__ import annotations

from structspec.drafts.ast_text import (
    BARE_HEADERS,
    CONTINUING,
    OPEN_ENDINGS,
    first_word,
    header_tier,
    indent_of,
    last_word,
)
from structspec.syntax.lexer import LexState


def code_candidate(lex: LexState, all_tiers: bool) -> tuple[str, str] | None:
    """``(text, tier)`` the lexical state of code implies, or ``None``."""
    lang = lex.lang
    if not lex.in_code:
        return None
    line = lex.line
    body = line.strip()
    kw = keyword_continuation(lex, body)
    if kw is not None:
        return kw
    unit = lex.indent_unit
    if not body:
        if line or lex.depth != lex.line_depth:
            return None  # indentation already typed, or inside a multi-line bracket
        prev = lex.prev_line.rstrip()
        if not prev:
            return None
        base = indent_of(prev)
        opener = ":" if lang.block_style == "colon" else "{"
        if prev.endswith(opener) and lex.depth == lex.prev_depth + (opener == "{"):
            base += unit
        return (base, "indent") if base else None
    last = body[-1]
    if body.endswith(("++", "--")) and lang.block_style == "brace":
        last = "_"  # i++ ends an operand
    above = lex.stack[lex.line_depth :]
    on_line = all(e.line == lex.line_no for e in above)
    closers = "".join(e.closer for e in reversed(above))
    word = first_word(body)
    if lang.block_style == "colon":
        if last == ":" and lex.depth == lex.line_depth == 0 and word in lang.block_openers:
            return "\n" + indent_of(line) + unit, "block"
        if word in lang.block_openers and last not in CONTINUING and line[-1] != " ":
            if last_word(body) in OPEN_ENDINGS and word not in BARE_HEADERS:
                return None
            if not on_line and above:
                return None
            tier = header_tier(body, word, closers)
            if tier == "header-kw" or all_tiers:
                return closers + ":\n" + indent_of(line) + unit, tier
            return None  # a header line never just closes its brackets
    elif lang.block_style == "brace":
        if last == "{" and lex.depth == lex.line_depth + 1 and above[-1].closer == "}":
            return "\n" + indent_of(line) + unit, "block"
        if (
            word in lang.block_openers
            and last not in CONTINUING
            and last != "}"
            and line[-1] != " "
            and on_line
            and all(e.closer != "}" for e in above)
        ):
            tier = header_tier(body.lstrip("} \t"), word, closers)
            if tier in ("header-kw", "header") or all_tiers:
                return closers + " {\n" + indent_of(line) + unit, tier
    if above and on_line and all(e.closer != "}" for e in above):
        end = closers + lang.statement_end + "\n" + indent_of(line)
        if last in ")]}\"'`" and all_tiers:
            return end, "close"
        if (last.isalnum() or last == "_") and (lang.block_style == "colon" or all_tiers):
            return end, "close-word"
    return None


def keyword_continuation(lex: LexState, body: str) -> tuple[str, str] | None:
    """The table's keyword continuation (SQL ``ORDER`` -> `` BY``) the line ends with."""
    if not lex.lang.continuations or not body or not body[-1].isalpha():
        return None
    low = body.lower()
    for key, text in lex.lang.continuations.items():
        if low.endswith(key) and (len(low) == len(key) or not low[-len(key) - 1].isalnum()):
            trigger = body[-len(key) :]
            return (text.upper() if trigger.isupper() else text), "kw"
    return None

"""The HTML rule family of the syntax-tree shadow: end tags, inline closes, block content.

Tiers: ``end-tag`` (after ``</``), ``close-inline`` (``</code>`` after one word
of content), ``open`` (after the start tag of a block element), ``indent``.
"""

from __future__ import annotations

from structspec.drafts.ast_text import indent_of
from structspec.syntax.lexer import LexState


def html_candidate(lex: LexState) -> tuple[str, str] | None:
    """``(text, tier)`` the lexical state of an HTML buffer implies, or ``None``."""
    if lex.comment is not None:
        return None
    top = lex.tags[-1] if lex.tags else None
    if lex.in_tag:
        tag = lex._tag or ""
        if tag == "/" and top is not None:
            return top.closer + ">", "end-tag"
        return None
    line = lex.line
    body = line.strip()
    unit = lex.indent_unit
    if not body:
        if line or not lex.prev_line.strip():
            return None
        prev = lex.prev_line.rstrip()
        base = indent_of(prev)
        if top is not None and top.line == lex.line_no - 1 and prev.endswith(">"):
            base += unit
        return (base, "indent") if base else None
    if top is None:
        return None
    content = body[body.rfind(">") + 1 :]
    if body[-1] != ">" and top.line == lex.line_no and "<" in body and " " not in content:
        # One word of content (``<code>name``, ``<td>42``): likely closed right away.
        text = "</" + top.closer + ">"
        if body.startswith("<" + top.closer) or body.startswith("<" + top.closer.upper()):
            text += "\n" + indent_of(line)
        return text, "close-inline"
    starts_top = body.lower().startswith("<" + top.closer)
    block = top.closer in lex.lang.block_elements and body.count("<") == 1
    if body[-1] == ">" and top.line == lex.line_no and starts_top and block:
        return "\n" + indent_of(line) + unit, "open"
    return None

"""The JSON rule family of the syntax-tree shadow: keys, values and separators.

Tiers: ``key-end`` (``": "``), ``value-end``/``next`` (``,`` + newline + indent +
``"``), ``open``, ``colon``, ``indent``; from the structure of the sibling
objects (suffix ``+k``, and ``key-rest``/``value-rest``/``value``): the rest of
a key or value being typed, the key that followed this one before, and a value
that repeated (``"type": "string"``).
"""

from __future__ import annotations

from structspec.drafts.ast_text import indent_of, value_start
from structspec.syntax.lexer import AFTER, COLON, KEY, VALUE, LexState


def json_candidate(lex: LexState) -> tuple[str, str] | None:
    """``(text, tier)`` the lexical state of a JSON buffer implies, or ``None``."""
    if lex.comment is not None or not lex.stack:
        return None
    top = lex.stack[-1]
    obj = top.closer == "}"
    line = lex.line
    body = line.strip()
    unit = lex.indent_unit
    quote = '"' if obj else ""

    def then(key: str, indent: str, depth: int = 1) -> str:
        """After ``key``'s name: ``": "``, its value when it repeats, and if the value
        is complete the pair that followed it in the objects before."""
        value = value_start(lex, key)
        text = '": ' + value
        following = lex.key_next.get(key)
        if depth > 0 and len(value) > 1 and following is not None:
            text += ",\n" + indent + '"' + following + then(following, indent, depth - 1)
        return text

    def next_key(after: str, indent: str) -> tuple[str, str]:
        """The opening quote of the next key, plus the key and what follows it as
        predicted from the objects before (tier suffix ``+k``)."""
        if not obj:
            return quote, ""
        key = lex.key_next.get(after)
        if key is None:
            return '"', ""
        return '"' + key + then(key, indent, 0), "+k"

    if lex.string is not None:
        typed = lex.string_text
        # The string the structure predicts here (the next key, or this key's value),
        # when what is typed so far is its beginning: draft the rest of it.
        if lex.string_role == KEY:
            expected = lex.key_next.get(top.last_key) if obj else None
        else:
            seen = lex.key_value.get(top.last_key) if obj else None
            expected = seen[0] if seen else None
        rest = ""
        if expected and len(expected) > len(typed) and expected.startswith(typed):
            rest = expected[len(typed) :]
        # Otherwise only a string already seen in the document is likely complete.
        elif typed not in lex.strings:
            return None
        done = typed + rest
        if lex.string_role == KEY:
            tier = "key-rest" if rest else "key-end"
            text = then(done, indent_of(line))
            if len(text) <= 3 and top.string_values:
                text += '"'  # value unknown: a string like the others in this object
            return rest + text, tier
        text, more = next_key(top.last_key, indent_of(line))
        tier = ("value-rest" if rest else "value-end") + more
        return rest + '",\n' + indent_of(line) + text, tier
    if not body:
        if line or not lex.prev_line.strip():
            return None
        prev = lex.prev_line.rstrip()
        base = indent_of(prev) + (unit if prev[-1] in "{[" else "")
        if top.expect == KEY:
            text, more = next_key(top.last_key, base)
            return base + text, "indent" + more
        if not obj and top.expect != AFTER and prev[-1] in ",[":
            return base + ('"' if top.string_values else ""), "indent"
        return None
    last = body[-1]
    if top.expect == COLON:
        value = value_start(lex, top.last_key)
        return ": " + (value or ('"' if top.string_values else "")), "colon"
    if last == ":" and top.expect == VALUE and obj:
        value = value_start(lex, top.last_key)
        return (" " + value, "value") if value else None
    if last in "{[" and top.line == lex.line_no and last == ("{" if obj else "["):
        text, more = next_key("", indent_of(line) + unit)
        return "\n" + indent_of(line) + unit + text, "open" + more
    if last == "," and top.expect != AFTER:
        text, more = next_key(top.last_key, indent_of(line))
        return "\n" + indent_of(line) + text, "next" + more
    if top.expect == AFTER and last != ",":
        text, more = next_key(top.last_key, indent_of(line))
        return ",\n" + indent_of(line) + text, "next" + more
    return None

"""A small regular-expression compiler: patterns to one Thompson NFA over bytes.

Why not ``re``: the Python syntax source advances an automaton token by token
on the decode hot path and caches every (state, token) transition, which needs
the automaton's states; ``re`` does not expose them. This compiles the subset
of regular-expression syntax the syntax rules use (literals, escapes, ``.``,
character classes, groups, alternation, ``*``, ``+``, ``?``) into one NFA
whose accepting states name the pattern that matched.
"""

from __future__ import annotations

from collections.abc import Sequence


class NFA:
    """Thompson NFA over bytes: ``eps[s]`` epsilon targets, ``edges[s]`` (byte set, target)."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.final: dict[int, int] = {}  # accepting state -> rule index

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1


_ANY = frozenset(range(256)) - {10}


class _Parser:
    """Parses the regex subset the rules use into NFA fragments ``(start, end)``.

    Supported: literals, ``\\`` escapes of punctuation, ``.``, classes ``[...]``
    and ``[^...]`` with ranges, groups ``(...)`` and ``(?:...)``, ``|``, and the
    quantifiers ``*``, ``+``, ``?``. Anything else is rejected, so a rule cannot
    silently mean something else to the two engines.
    """

    def __init__(self, nfa: NFA, pattern: str) -> None:
        self.nfa, self.p, self.i = nfa, pattern.encode(), 0

    def error(self, msg: str) -> ValueError:
        return ValueError(f"pattern {self.p.decode()!r} at {self.i}: {msg}")

    def parse(self) -> tuple[int, int]:
        frag = self.alt()
        if self.i != len(self.p):
            raise self.error("unbalanced ')'")
        return frag

    def alt(self) -> tuple[int, int]:
        options = [self.seq()]
        while self.i < len(self.p) and self.p[self.i] == ord("|"):
            self.i += 1
            options.append(self.seq())
        if len(options) == 1:
            return options[0]
        s, e = self.nfa.state(), self.nfa.state()
        for a, b in options:
            self.nfa.eps[s].append(a)
            self.nfa.eps[b].append(e)
        return s, e

    def seq(self) -> tuple[int, int]:
        s = self.nfa.state()
        cur = s
        while self.i < len(self.p) and self.p[self.i] not in b"|)":
            a, b = self.quantified()
            self.nfa.eps[cur].append(a)
            cur = b
        return s, cur

    def quantified(self) -> tuple[int, int]:
        a, b = self.atom()
        if self.i < len(self.p) and self.p[self.i] in b"*+?":
            q = self.p[self.i]
            self.i += 1
            s, e = self.nfa.state(), self.nfa.state()
            self.nfa.eps[s].append(a)
            self.nfa.eps[b].append(e)
            if q in b"*?":
                self.nfa.eps[s].append(e)
            if q in b"*+":
                self.nfa.eps[b].append(a)
            return s, e
        return a, b

    def atom(self) -> tuple[int, int]:
        c = self.p[self.i]
        if c == ord("("):
            self.i += 1
            if self.p[self.i : self.i + 2] == b"?:":
                self.i += 2
            frag = self.alt()
            if self.i >= len(self.p) or self.p[self.i] != ord(")"):
                raise self.error("missing ')'")
            self.i += 1
            return frag
        if c == ord("["):
            chars = self.char_class()
        elif c == ord("."):
            self.i += 1
            chars = _ANY
        elif c == ord("\\"):
            chars = frozenset([self.escaped()])
        elif c in b"*+?{}":
            raise self.error(f"unsupported {chr(c)!r}")
        else:
            self.i += 1
            chars = frozenset([c])
        s, e = self.nfa.state(), self.nfa.state()
        self.nfa.edges[s].append((chars, e))
        return s, e

    def escaped(self) -> int:
        c = self.p[self.i + 1] if self.i + 1 < len(self.p) else -1
        if c < 0 or chr(c).isalnum():
            raise self.error("only punctuation may be escaped")
        self.i += 2
        return c

    def char_class(self) -> frozenset[int]:
        self.i += 1
        negate = self.p[self.i : self.i + 1] == b"^"
        if negate:
            self.i += 1
        chars: set[int] = set()
        first = True
        while self.i < len(self.p) and (first or self.p[self.i] != ord("]")):
            first = False
            lo = self.escaped() if self.p[self.i] == ord("\\") else self.take()
            if self.p[self.i : self.i + 1] == b"-" and self.p[self.i + 1 : self.i + 2] != b"]":
                self.i += 1
                hi = self.escaped() if self.p[self.i] == ord("\\") else self.take()
                chars.update(range(lo, hi + 1))
            else:
                chars.add(lo)
        if self.i >= len(self.p):
            raise self.error("missing ']'")
        self.i += 1
        return frozenset(range(256)) - chars if negate else frozenset(chars)

    def take(self) -> int:
        c = self.p[self.i]
        self.i += 1
        return c


def compile_patterns(patterns: Sequence[str]) -> tuple[NFA, int]:
    """One NFA for all ``patterns``; ``nfa.final`` maps accepting states to pattern indexes."""
    nfa = NFA()
    start = nfa.state()
    for i, pattern in enumerate(patterns):
        a, b = _Parser(nfa, pattern).parse()
        nfa.eps[start].append(a)
        final = nfa.state()
        nfa.eps[b].append(final)
        nfa.final[final] = i
    return nfa, start

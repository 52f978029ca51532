"""Suffix matching over token sequences, shared by the editor's draft sources.

``TokenIndex`` keeps the positions of every token of a sequence, extended as
the sequence grows; ``longest_match`` finds where the end of the current
context last occurred in it (the longest match, ties to the preferred
position), so a source can draft what followed there. Unlike the lookup
source's bigram index this matches from a single token: the sequences the
editor's sources search (a suggestion, the lines around the cursor) are short
and specific, so one matching token already means something, and the tiers
let the planner learn how much.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from structspec.model.base import Model

#: Match-length buckets of the tiers (``m1``, ``m2``, ``m4``, ``m8``).
_BUCKETS = (8, 4, 2, 1)


def length_tier(length: int, buckets: Sequence[int] = _BUCKETS) -> str:
    """``m<b>`` for the largest of ``buckets`` (descending) at most ``length``; ``m0`` below all."""
    for b in buckets:
        if length >= b:
            return f"m{b}"
    return "m0"


class TokenIndex:
    """Positions of every token of a sequence, extended as it grows."""

    __slots__ = ("positions", "indexed")

    def __init__(self) -> None:
        self.positions: dict[int, list[int]] = {}
        self.indexed = 0

    def extend(self, seq: Sequence[int]) -> TokenIndex:
        pos = self.positions
        for p in range(self.indexed, len(seq)):
            bucket = pos.get(seq[p])
            if bucket is None:
                pos[seq[p]] = [p]
            else:
                bucket.append(p)
        self.indexed = len(seq)
        return self


@dataclass(frozen=True, slots=True)
class Match:
    """``length`` tokens of the context end at ``seq[end]``; the draft starts at ``end + 1``."""

    length: int
    end: int


def longest_match(
    tail: Sequence[int],
    seq: Sequence[int],
    index: TokenIndex,
    *,
    lo: int = 0,
    hi: int | None = None,
    max_match: int = 16,
    latest: bool = True,
    max_candidates: int = 64,
    followers: list[tuple[int, int]] | None = None,
) -> Match | None:
    """The longest match of the end of ``tail`` ending at some ``seq[p]``, ``lo <= p < hi - 1``.

    Something must follow the match (``p + 1 < hi``; ``hi`` defaults to
    ``len(seq)``). Among equally long matches the latest position wins when
    ``latest``, else the earliest. Only ``max_candidates`` positions of the
    last token are looked at (the nearest to the preferred end).
    ``followers``, when given, receives ``(match length, next token)`` of
    every position looked at (a source's test for a conflicting occurrence).
    """
    if not tail:
        return None
    hi = len(seq) if hi is None else min(hi, len(seq))
    cands = index.positions.get(tail[-1])
    if not cands:
        return None
    ordered = reversed(cands) if latest else iter(cands)
    best: Match | None = None
    seen = 0
    n = len(tail)
    for p in ordered:
        if p < lo or p + 1 >= hi:
            continue
        seen += 1
        if seen > max_candidates:
            break
        length = 1
        limit = min(max_match, n, p + 1)
        while length < limit and seq[p - length] == tail[n - 1 - length]:
            length += 1
        if followers is not None:
            followers.append((length, seq[p + 1]))
        if best is None or length > best.length:
            best = Match(length, p)
            if length >= max_match:
                break
    return best


def newline_tokens(model: Model, tokens: Sequence[int]) -> list[int]:
    """Indices of the tokens of ``tokens`` whose text holds a line break."""
    return [i for i, t in enumerate(tokens) if b"\n" in model.token_bytes(t)]

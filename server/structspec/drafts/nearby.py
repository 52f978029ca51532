"""The lines around the cursor: the nearest repetition is the best guess.

Code repeats most where it is being written: the line above with another
index, the sibling branch, the call a few lines down. This source searches
only the ``LINES`` lines before the cursor (with the output so far) and the
``LINES`` lines after it (``DraftContext.suffix_tokens``), drafts what
followed the longest match of the context's end (at least two tokens), and
among equally long matches takes the one nearest the cursor. A copy that runs
into the present continues from its own draft, as in the lookup source, so a
repeating line is drafted past the end of the text.

It overlaps the lookup source, which searches everything; it is a separate
source so that its acceptance is learnt separately, and its priors are the
highest of the lookups': a match near the cursor is the one most often right.
Tiers: the match-length bucket (``m2``, ``m4``, ``m8``), ``x`` when another
occurrence in the window (matching at least 3 tokens, or 2 for ``m2``)
continued differently, ``a`` for a match after the cursor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.token_match import (
    Match,
    TokenIndex,
    length_tier,
    longest_match,
    newline_tokens,
)

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
    from structspec.model.base import Model

#: Lines searched on each side of the cursor.
LINES = 12

#: First-token acceptance per tier. Before the cursor: measured on the
#: HumanEval greedy outputs of the default model (teacher-forced proposals
#: over the recording in ``tests/data``); after it (``a``): from the small
#: editor experiment in ``docs/EDITOR-SOURCES.md`` (few samples: rounded down).
PRIORS: Mapping[str, float] = {
    "nearby": 0.75,
    "nearby:m2": 0.75,
    "nearby:m4": 0.9,
    "nearby:m8": 0.97,
    "nearby:m2x": 0.35,
    "nearby:m4x": 0.65,
    "nearby:m8x": 0.65,
    "nearby:m2a": 0.65,
    "nearby:m4a": 0.75,
    "nearby:m8a": 0.9,
    "nearby:m2xa": 0.3,
    "nearby:m4xa": 0.5,
    "nearby:m8xa": 0.6,
}


def _window_start(model: Model, tokens: Sequence[int], end: int, lines: int) -> int:
    """Index in ``tokens`` of the start of the ``lines``-th line before ``end``."""
    lo = max(0, end - lines * 48)  # a line is rarely longer than 48 tokens
    breaks = newline_tokens(model, tokens[lo:end])
    if len(breaks) <= lines:
        return lo
    return lo + breaks[-lines - 1] + 1


class NearbySource:
    """Lookup over the lines around the cursor (see the module docstring)."""

    name = "nearby"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> NearbySource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls()

    def __init__(self, *, lines: int = LINES, min_match: int = 2, max_match: int = 16) -> None:
        self.lines = lines
        self.min_match = max(2, min_match)
        self.max_match = max_match
        self._generation = -1
        self._start = 0  # where the window before the cursor starts in ctx.tokens
        self._own = TokenIndex()
        self._after: tuple[int, ...] = ()
        self._after_index = TokenIndex()

    def _prepare(self, ctx: DraftContext) -> None:
        self._generation = ctx.generation
        self._start = _window_start(ctx.model, ctx.tokens, ctx.n_prompt, self.lines)
        self._own = TokenIndex()
        self._own.indexed = self._start  # positions before the window are never indexed
        head = tuple(ctx.suffix_tokens[: self.lines * 48])
        breaks = newline_tokens(ctx.model, head)
        after = head[: breaks[self.lines - 1] + 1] if len(breaks) >= self.lines else head
        if after != self._after:
            self._after = after
            self._after_index = TokenIndex().extend(after)

    def propose(self, ctx: DraftContext) -> Draft | None:
        toks = ctx.tokens
        n = len(toks)
        if n < 2 or ctx.max_tokens <= 0:
            return None
        if ctx.generation != self._generation:
            self._prepare(ctx)
        self._own.extend(toks)
        # Before the cursor: the nearest is the latest; the context's own end is excluded.
        followers: list[tuple[int, int]] = []
        before = longest_match(
            toks, toks, self._own, lo=self._start, max_match=self.max_match, followers=followers
        )
        after = longest_match(
            toks,
            self._after,
            self._after_index,
            max_match=self.max_match,
            latest=False,
            followers=followers,
        )
        best: Match | None = before
        seq: Sequence[int] = toks
        if after is not None and (best is None or after.length > best.length):
            best, seq = after, self._after
        if best is None or best.length < self.min_match:
            return None
        start = best.end + 1
        draft = list(seq[start : start + ctx.max_tokens])
        if seq is toks:
            # An overlapping copy (LZ77): a repeating line drafts past the end of the text.
            while draft and len(draft) < ctx.max_tokens:
                draft.append(draft[len(draft) - (n - start)])
        if not draft:
            return None
        floor = min(3, best.length)
        conflict = any(f != draft[0] for length, f in followers if length >= floor)
        tier = length_tier(best.length) + ("x" if conflict else "") + ("" if seq is toks else "a")
        return Draft(tuple(draft), self.name, tier)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass

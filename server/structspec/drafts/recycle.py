"""Suggestion recycling: what the model said a keystroke ago, re-aligned to the new cursor.

When the user types something the suggestion on screen did not predict (or
deletes, or the generation was cut short by the keystroke), the next
suggestion is usually most of the previous one again: the model picks up where
the edit leaves it. An editor keeps the document's latest generations
(``DraftContext.recent_suggestions``, newest first: the tail of each prompt
followed by the tokens the model generated), and this source looks the end of
the current context up in them and drafts what followed the longest match, the
newest generation winning ties. The prompt tail in front of each generation
lets a deletion re-align too: the context then ends inside the old prompt and
the draft is the deleted text followed by the old suggestion.

Tiers are the match length bucket (``m1``, ``m2``, ``m4``, ``m8``); a match of
one token is accepted far less often than a long one, and the planner learns
each. ``PRIORS`` below come from a small experiment on the default model
(``docs/EDITOR-SOURCES.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.token_match import Match, TokenIndex, length_tier, longest_match

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
    from structspec.model.base import Model

#: First-token acceptance per tier (see the module docstring).
PRIORS: Mapping[str, float] = {
    "recycle": 0.6,
    "recycle:m1": 0.45,
    "recycle:m2": 0.6,
    "recycle:m4": 0.7,
    "recycle:m8": 0.95,
}

#: Indexes of sequences kept (an editor passes a handful per document).
_INDEX_CACHE = 32


class RecycleSource:
    """Drafts the continuation of the document's latest suggestions (see the module docstring)."""

    name = "recycle"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> RecycleSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls()

    def __init__(self, *, max_match: int = 16) -> None:
        self.max_match = max_match
        # Keyed by the sequence's content: an editor hands the same tuples over
        # again and again, and their indexes are reused.
        self._indexes: dict[tuple[int, ...], TokenIndex] = {}

    def _index(self, seq: tuple[int, ...]) -> TokenIndex:
        index = self._indexes.get(seq)
        if index is None:
            if len(self._indexes) >= _INDEX_CACHE:
                self._indexes.clear()
            index = self._indexes[seq] = TokenIndex().extend(seq)
        return index

    def propose(self, ctx: DraftContext) -> Draft | None:
        if ctx.max_tokens <= 0 or not ctx.recent_suggestions:
            return None
        best: Match | None = None
        best_seq: Sequence[int] = ()
        for raw in ctx.recent_suggestions:  # newest first: it keeps ties
            seq = tuple(raw)
            match = longest_match(ctx.tokens, seq, self._index(seq), max_match=self.max_match)
            if match is not None and (best is None or match.length > best.length):
                best, best_seq = match, seq
        if best is None:
            return None
        draft = tuple(best_seq[best.end + 1 : best.end + 1 + ctx.max_tokens])
        return Draft(draft, self.name, length_tier(best.length)) if draft else None

    def observe(self, draft: Draft, accepted: int) -> None:
        pass

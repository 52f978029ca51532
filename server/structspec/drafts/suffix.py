"""The text after the cursor as drafts: editing inside code, what follows often reappears.

Completing in the middle of a line (``foo(|, b)``) the model without
fill-in-the-middle rewrites the rest of the line; inserting a line above
existing code it often writes what comes below. This source looks the last
tokens of the context up in ``DraftContext.suffix_tokens`` (the text after
the cursor, as the editor tokenized it) and drafts what followed the longest
match, the match nearest the cursor winning ties.

A match inside the suffix's first line (the rest of the cursor's line) may be
a single token: there the next token is usually the rest of the line again.
Further down it needs two. Tiers: the match-length bucket (``m1`` .. ``m8``),
``l`` for a match in the first line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.token_match import TokenIndex, length_tier, longest_match, newline_tokens

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
    from structspec.model.base import Model

#: First-token acceptance per tier (``l``: in the cursor's line), from a small
#: experiment on the default model (``docs/EDITOR-SOURCES.md``).
PRIORS: Mapping[str, float] = {
    "suffix": 0.5,
    "suffix:m1l": 0.6,
    "suffix:m2l": 0.7,
    "suffix:m4l": 0.8,
    "suffix:m8l": 0.9,
    "suffix:m2": 0.45,
    "suffix:m4": 0.65,
    "suffix:m8": 0.8,
}

#: Suffix tokens searched at most (the nearest to the cursor).
MAX_SUFFIX_TOKENS = 2048


class SuffixSource:
    """Drafts from the text after the cursor (see the module docstring)."""

    name = "suffix"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> SuffixSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls()

    def __init__(self, *, max_match: int = 16) -> None:
        self.max_match = max_match
        self._generation = -1
        self._seq: tuple[int, ...] = ()
        self._index = TokenIndex()
        self._line_end = 0  # index just past the first line of the suffix

    def _prepare(self, ctx: DraftContext) -> None:
        self._generation = ctx.generation
        seq = tuple(ctx.suffix_tokens[:MAX_SUFFIX_TOKENS])
        if seq != self._seq:
            self._seq = seq
            self._index = TokenIndex().extend(seq)
            breaks = newline_tokens(ctx.model, seq)
            self._line_end = breaks[0] + 1 if breaks else len(seq)

    def propose(self, ctx: DraftContext) -> Draft | None:
        if ctx.max_tokens <= 0 or not ctx.suffix_tokens:
            return None
        if ctx.generation != self._generation:
            self._prepare(ctx)
        seq = self._seq
        # The cursor's line first, where one token is enough; then the rest.
        match = longest_match(
            ctx.tokens,
            seq,
            self._index,
            hi=self._line_end + 1,
            max_match=self.max_match,
            latest=False,
        )
        in_line = match is not None
        further = longest_match(
            ctx.tokens, seq, self._index, lo=self._line_end, max_match=self.max_match, latest=False
        )
        if (
            further is not None
            and further.length >= 2
            and (match is None or further.length > match.length)
        ):
            match, in_line = further, False
        if match is None:
            return None
        draft = tuple(seq[match.end + 1 : match.end + 1 + ctx.max_tokens])
        if not draft:
            return None
        return Draft(draft, self.name, length_tier(match.length) + ("l" if in_line else ""))

    def observe(self, draft: Draft, accepted: int) -> None:
        pass

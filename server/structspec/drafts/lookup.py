"""Lookup drafting: continue the current text the way it continued before.

The draft is what followed the longest earlier occurrence of the context's
suffix, found in the context itself (prompt and output so far) or in the
corpus (the other open buffers in an editor). A bigram index makes a query a
dictionary hit plus a short backward extension per candidate; it is updated
incrementally as the output grows. A copy of the recent past that runs into
the present continues from its own draft (an overlapping copy, as in LZ77),
so a repeating line is drafted beyond the end of the text.

The tier of a draft says how far to trust it, and the planner learns each
tier's acceptance separately:

- the match length bucket (``m2``, ``m3``, ``m4``, ``m6``, ``m8``, ``m12``,
  ``m16``, ``m32``): how long the copy has been running. The long buckets let
  the planner learn apart a copy that has held for a few lines from one that
  has held for a few words (what splitting ``m8`` into ``m8``..``m32`` gained
  on the replay recordings is in ``docs/BENCHMARKS-replay.md``);
- ``x`` when another earlier occurrence of the suffix (matching at least 3
  tokens, or 2 for an ``m2`` match) continued differently;
- ``o`` when the match lies in the output so far rather than the prompt or
  the corpus: the model repeating itself is a better bet for short matches.

Each draft token carries its ``provenance`` (``drafts.base.PROVENANCE``): how
the copied token came about, judged by the longest match of the text before it
earlier still, as if the lookup had drafted it when it was written. A token
that an earlier copy predicted is copied again faithfully more often than the
rest, one that broke an earlier copy is likely to break this one too, and a
copy running into its own draft rarely breaks; the planner's
``ProvenanceGate`` learns how often each holds (``docs/BENCHMARKS-replay.md``).

A draft without ``x`` may carry a ``fork``: the first later token where
another occurrence that matches at least 6 tokens (or as many as the best)
continued differently. The copy is likely to break there (the planner's
``TokenClassGate`` learns how likely), and is rarely wrong before it.

On HumanEval greedy outputs of Gemma 3 270M the first token of an ``m8`` draft
is right 94% of the time and 57% with ``xo``; ``m2o`` 83% against 58% for a
plain ``m2`` (``PRIORS`` below).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.token_match import length_tier

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions
    from structspec.model.base import Model

_TIERS = (32, 16, 12, 8, 6, 4, 3, 2)

#: The shortest earlier match that judges a copied token's provenance, and the
#: length from which the judgement is the stronger ("C", "X").
PROVENANCE_MATCH = 3
PROVENANCE_LONG = 6

#: Corpus tokens one generation indexes at most (about 0.3 µs each on a 2-core
#: EPYC, ``docs/MEASUREMENTS.md`` §17: a new corpus of five 40,000-character
#: files is 60,000 tokens). A corpus sequence is searched once it is indexed
#: whole; the rest of a new corpus is indexed by later generations or at idle
#: time (``prepare``).
CORPUS_INDEX_PER_GENERATION = 16384
#: Tokens ``prepare`` indexes between two looks at its ``stop``.
PREPARE_SLICE = 8192

#: Acceptance priors of the tiers for the planner: first-token acceptance
#: measured on HumanEval greedy outputs of the default model ("x": conflict,
#: "o": matched in the output). A prior too low is never corrected, since a
#: tier that is not drafted is not observed.
PRIORS = {
    "lookup": 0.7,
    "lookup:m2": 0.6,
    "lookup:m3": 0.75,
    "lookup:m4": 0.8,
    "lookup:m6": 0.9,
    "lookup:m8": 0.95,
    "lookup:m2x": 0.2,
    "lookup:m3x": 0.2,
    "lookup:m4x": 0.55,
    "lookup:m6x": 0.6,
    "lookup:m8x": 0.85,
    "lookup:m2o": 0.8,
    "lookup:m3o": 0.8,
    "lookup:m4o": 0.8,
    "lookup:m6o": 0.9,
    "lookup:m8o": 0.9,
    "lookup:m2xo": 0.4,
    "lookup:m3xo": 0.6,
    "lookup:m4xo": 0.65,
    "lookup:m6xo": 0.85,
    "lookup:m8xo": 0.55,
    # Longer matches start from m8's priors and learn apart from it.
    **{
        f"lookup:m{n}{suffix}": p
        for n in (12, 16, 32)
        for suffix, p in (("", 0.95), ("x", 0.85), ("o", 0.9), ("xo", 0.55))
    },
}


class _BigramIndex:
    """Positions ``p`` (of the second token) of every bigram of a token sequence."""

    def __init__(self) -> None:
        self.positions: dict[tuple[int, int], list[int]] = {}
        self.indexed = 0  # tokens covered so far
        #: ``provenance`` of each position asked so far: it depends only on
        #: the text up to that position, which does not change.
        self._provenance: dict[int, str] = {}

    def extend(self, seq: Sequence[int], end: int | None = None) -> int:
        """Index ``seq`` up to ``end`` (its end by default); how many tokens were indexed."""
        end = len(seq) if end is None else min(end, len(seq))
        start = self.indexed
        pos = self.positions
        for p in range(max(1, start), end):
            key = (seq[p - 1], seq[p])
            bucket = pos.get(key)
            if bucket is None:
                pos[key] = [p]
            else:
                bucket.append(p)
        self.indexed = max(start, end)
        return self.indexed - start

    def provenance(self, seq: Sequence[int], q: int, max_candidates: int, max_match: int) -> str:
        """The ``Draft.provenance`` letter of ``seq[q]`` (``q`` indexed already)."""
        letter = self._provenance.get(q)
        if letter is not None:
            return letter
        best_len, best_next = 0, -1
        if q >= 2:
            cands = self.positions.get((seq[q - 2], seq[q - 1]), [])
            end = bisect_left(cands, q - 1)  # occurrences that end before q - 1
            for p in reversed(cands[max(0, end - max_candidates) : end]):
                length = 2
                while (
                    length < max_match
                    and p - length >= 0
                    and seq[p - length] == seq[q - 1 - length]
                ):
                    length += 1
                if length > best_len:
                    best_len, best_next = length, seq[p + 1]
        if best_len < PROVENANCE_MATCH:
            letter = "-"
        else:
            letter = "c" if best_next == seq[q] else "x"
            if best_len >= PROVENANCE_LONG:
                letter = letter.upper()
        self._provenance[q] = letter
        return letter


class LookupSource:
    """Longest-suffix-match drafting over the context and a corpus."""

    name = "lookup"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Model, options: SourceOptions) -> LookupSource:
        """The registry's constructor (``structspec.drafts.registry``)."""
        return cls()

    def __init__(self, *, min_match: int = 2, max_match: int = 48, max_candidates: int = 24):
        self.min_match = max(2, min_match)
        self.max_match = max_match
        self.max_candidates = max_candidates
        self._own = _BigramIndex()
        self._generation = -1
        self._corpus: dict[int, tuple[Sequence[int], _BigramIndex]] = {}
        #: Corpus tokens this generation may still index (``CORPUS_INDEX_PER_GENERATION``).
        self._budget = 0

    def _index_for(self, seq: Sequence[int], most: int) -> tuple[_BigramIndex, int]:
        """``seq``'s index with at most ``most`` more of its tokens indexed; how many were."""
        entry = self._corpus.get(id(seq))
        if entry is None or entry[0] is not seq or len(seq) < entry[1].indexed:
            if len(self._corpus) > 64:
                self._corpus.clear()
            entry = (seq, _BigramIndex())
            self._corpus[id(seq)] = entry
        index = entry[1]
        return index, index.extend(seq, index.indexed + most)

    def _searchable(self, seq: Sequence[int]) -> _BigramIndex | None:
        """``seq``'s index once it is whole, indexed within this generation's budget."""
        index, done = self._index_for(seq, self._budget)
        self._budget -= done
        return index if index.indexed >= len(seq) else None

    def prepare(self, ctx: DraftContext, stop: Callable[[], bool]) -> None:
        """Idle time: index the corpus that generations index a slice each, until ``stop()``."""
        for seq in ctx.corpus:
            while len(seq) > 2 and not stop() and self._index_for(seq, PREPARE_SLICE)[1]:
                pass

    def propose(self, ctx: DraftContext) -> Draft | None:
        toks = ctx.tokens
        n = len(toks)
        if n < 2 or ctx.max_tokens <= 0:
            return None
        if ctx.generation != self._generation:
            self._own = _BigramIndex()
            self._generation = ctx.generation
            self._budget = CORPUS_INDEX_PER_GENERATION
        self._own.extend(toks)
        best_len, best_pos = 0, -1
        best_seq: Sequence[int] = toks
        best_index = self._own
        # (match length, sequence, position) of every occurrence looked at
        occurrences: list[tuple[int, Sequence[int], int]] = []
        key = (toks[-2], toks[-1])
        searches: list[tuple[Sequence[int], _BigramIndex]] = [(toks, self._own)]
        for seq in ctx.corpus:
            index = self._searchable(seq) if len(seq) > 2 else None
            if index is not None:
                searches.append((seq, index))
        for seq, index in searches:
            cands = index.positions.get(key)
            if not cands:
                continue
            for p in reversed(cands[-self.max_candidates :]):
                if seq is toks and p >= n - 1:
                    continue  # the suffix itself
                if p + 1 >= len(seq):
                    continue  # nothing follows
                length = 2
                while (
                    length < self.max_match
                    and p - length >= 0
                    and seq[p - length] == toks[n - 1 - length]
                ):
                    length += 1
                occurrences.append((length, seq, p))
                if length > best_len:
                    best_len, best_seq, best_pos, best_index = length, seq, p, index
        if best_len < self.min_match or best_pos < 0:
            return None
        start = best_pos + 1
        draft = list(best_seq[start : start + ctx.max_tokens])
        if best_seq is toks:
            # A copy of the recent past may run into the present: continue it
            # from what it has just drafted (an overlapping copy, as in LZ77),
            # so a repeating line drafts past the end of the text.
            while len(draft) < ctx.max_tokens:
                draft.append(draft[len(draft) - (n - start)])
        if not draft:
            return None
        # The conflict ``x``: another occurrence (matching at least 3 tokens,
        # or 2 for an m2 match) continues differently at once. The ``fork``:
        # the first later token where one that matches at least 6 tokens (or
        # as many as the best) continues differently; shorter matches are too
        # weak a witness that far out.
        floor = min(3, best_len)
        witness = min(6, best_len)
        conflict = False
        fork = len(draft)
        for length, seq, p in occurrences:
            if length < floor or (seq is best_seq and p == best_pos):
                continue
            if seq[p + 1] != draft[0]:
                conflict = True
            elif length >= witness:
                j, end = 1, min(fork, len(seq) - p - 1)
                while j < end and seq[p + 1 + j] == draft[j]:
                    j += 1
                if j < end:
                    fork = j
        in_output = best_seq is toks and best_pos >= ctx.n_prompt
        tier = (
            length_tier(best_len, _TIERS) + ("x" if conflict else "") + ("o" if in_output else "")
        )
        forked = not conflict and fork < len(draft)
        end = len(best_seq)
        provenance = "".join(
            "o"
            if q >= end
            else best_index.provenance(best_seq, q, self.max_candidates, self.max_match)
            for q in range(start, start + len(draft))
        )
        return Draft(tuple(draft), self.name, tier, fork if forked else None, provenance)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass

"""The draft-source interface.

A draft source guesses the tokens that follow the current context, cheaply and
without the model. The engine verifies every guess, so a source may be wrong
as often as it likes; it only costs time. A source is::

    class MySource:
        name = "mysource"
        def propose(self, ctx: DraftContext) -> Draft | None: ...
        def observe(self, draft: Draft, accepted: int) -> None: ...   # feedback

``propose`` must be fast (micro- to sub-millisecond): it runs once per
verification pass, on the decode hot path. A source whose inputs take longer
to digest (a corpus to index, a grammar to load) digests a bounded slice of
them per generation and offers the rest for idle time::

        def prepare(self, ctx: DraftContext, stop: Callable[[], bool]) -> None: ...

which digests what ``ctx`` holds until done or ``stop()`` (``Engine.prepare``
calls it while no request waits: ``prepare_source`` below).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from structspec.model.base import Model
from structspec.syntax.domains import resolve_language
from structspec.syntax.table import LanguageSpec

#: Tokens of text before the cursor that decide an unnamed buffer's language.
SNIFF_TOKENS = 2048


class SourceError(ValueError):
    """A draft source cannot be built from what the user gave it (one line)."""


@dataclass(frozen=True, slots=True)
class Draft:
    """Proposed continuation tokens.

    ``tier`` refines the acceptance statistics the planner keeps for the
    source (for example the match length of a lookup, or a rule's confidence
    tier), so that it can learn how far to trust each kind of guess.
    ``fork``, when set, is the index of a token past the first that the
    source itself doubts: the lookup's other matches agree with the draft up
    to it and continue differently there (the planner learns how often such
    a token holds).
    ``provenance``, when set, has one letter per token saying how the text a
    copy was taken from came about (``PROVENANCE``); the planner learns how
    often a copied token holds by it.
    """

    tokens: tuple[int, ...]
    source: str
    tier: str = ""
    fork: int | None = None
    provenance: str = ""

    @property
    def key(self) -> str:
        """The statistics key: ``source`` or ``source:tier``."""
        return f"{self.source}:{self.tier}" if self.tier else self.source

    def head(self, n: int) -> Draft:
        """The draft of its first ``n`` tokens (the fork kept if they reach it)."""
        fork = self.fork if self.fork is not None and self.fork < n else None
        return Draft(self.tokens[:n], self.source, self.tier, fork, self.provenance[:n])


#: The letters of ``Draft.provenance``: how the copied token came about, judged
#: by the longest earlier match (at least 3 tokens) of the text before it, as
#: if it had been drafted by copying when it was written.
PROVENANCE = {
    "c": "that match continued with the same token (a copy of a copy)",
    "C": "the same, after a match of at least 6 tokens",
    "x": "that match continued differently (the token broke a copy)",
    "X": "the same, after a match of at least 6 tokens",
    "-": "no earlier match of 3 tokens",
    "o": "the token lies past the text: a copy running into its own draft",
}


@dataclass(frozen=True)
class SourcePolicy:
    """Which sources may draft in a generation, and at most how many tokens each per pass.

    A buffer's domain decides it (``structspec.drafts.domain``): JSON gets no
    Python syntax rules, and the ast source drafts at most 6 tokens in Python.
    ``sources`` ``None`` allows every source; a source absent from ``caps`` is
    bounded by the pass limit alone.
    """

    sources: frozenset[str] | None = None
    caps: Mapping[str, int] = field(default_factory=dict)

    def allows(self, source: str) -> bool:
        return self.sources is None or source in self.sources

    def cap(self, source: str, limit: int) -> int:
        """Most tokens ``source`` may draft when the pass allows ``limit``."""
        return min(limit, self.caps.get(source, limit))


@dataclass
class DraftContext:
    """What a source sees when asked to draft.

    ``tokens`` is the prompt followed by the output so far; its last token is
    the pending one, whose successors are drafted. It grows in place during a
    generation (sources may index it incrementally: ``generation`` changes when
    a new generation starts). ``corpus`` holds other token sequences worth
    looking in (the open buffers of an editor). ``language`` is an LSP
    languageId when known; ``language_spec()`` is the language table's entry
    for the buffer, resolved once per generation (from ``language``, else from
    the text) so that no source resolves it again. ``max_tokens`` is the most a
    source may draft now: the planner sets it per source from the pass limit
    and ``policy``.

    Two more come from an editor (empty elsewhere): ``suffix_tokens``, the
    text after the cursor (the prompt ends at the cursor, at ``n_prompt``);
    ``recent_suggestions``, the document's latest generations, newest first,
    each the tail of its prompt followed by what the model generated.
    """

    model: Model
    tokens: list[int]
    n_prompt: int
    max_tokens: int = 16
    corpus: Sequence[Sequence[int]] = ()
    language: str | None = None
    suffix_tokens: Sequence[int] = ()
    recent_suggestions: Sequence[Sequence[int]] = ()
    generation: int = 0
    policy: SourcePolicy = field(default_factory=SourcePolicy)
    _text_cache: dict[tuple[int, int], str] = field(default_factory=dict, repr=False)
    _language_spec: LanguageSpec | None = field(default=None, repr=False)
    _language_resolved: bool = field(default=False, repr=False)

    def language_spec(self) -> LanguageSpec | None:
        """The language table's entry for the buffer (resolved on first use, then kept)."""
        if not self._language_resolved:
            self._language_spec = resolve_language(self.language, self.text_tail(SNIFF_TOKENS))
            self._language_resolved = True
        return self._language_spec

    def text_tail(self, n_tokens: int = 48) -> str:
        """Decoded text of the last ``n_tokens`` tokens (cached per context length)."""
        key = (len(self.tokens), n_tokens)
        text = self._text_cache.get(key)
        if text is None:
            self._text_cache.clear()
            tail = self.tokens[-n_tokens:]
            raw = b"".join(self.model.token_bytes(t) for t in tail)
            text = raw.decode("utf-8", "ignore")
            self._text_cache[key] = text
        return text


class TimedPropose:
    """Profiles a source: counts ``propose`` calls and the seconds spent in them.

    A subclass implements ``_propose``; ``calls`` and ``seconds`` show what the
    source costs on the decode hot path.
    """

    calls: int = 0
    seconds: float = 0.0

    def propose(self, ctx: DraftContext) -> Draft | None:
        t0 = time.perf_counter()
        try:
            return self._propose(ctx)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - t0

    def _propose(self, ctx: DraftContext) -> Draft | None:
        raise NotImplementedError


def prepare_source(source: object, ctx: DraftContext, stop: Callable[[], bool]) -> None:
    """``source.prepare(ctx, stop)`` where the source has idle-time work (see the docstring)."""
    prepare = getattr(source, "prepare", None)
    if callable(prepare):
        prepare(ctx, stop)


@runtime_checkable
class DraftSource(Protocol):
    """A cheap guesser of the next tokens; see the module docstring."""

    name: str

    def propose(self, ctx: DraftContext) -> Draft | None: ...

    def observe(self, draft: Draft, accepted: int) -> None: ...

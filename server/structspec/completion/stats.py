"""Local acceptance statistics: what was shown, what the user took, how fast.

Nothing leaves the machine: the numbers feed the ``structspec/status``
notification and the editor benchmark.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from structspec.completion.types import EmptyReason
from structspec.engine.stats import SourceStats

#: Suggestions remembered for ``structspec.accept`` (older ids are forgotten).
_REMEMBERED = 512


@dataclass
class AcceptanceStats:
    """Counters of one server session."""

    requests: int = 0
    shown: int = 0  # suggestions the model produced
    served_from_cache: int = 0  # answers without the model: typing-through, pre-generated
    served_from_pregeneration: int = 0  # of those, continuations written in the background
    #: of those, typed through a generation that was still running at the keystroke
    served_from_generation_in_flight: int = 0
    pregenerated_tokens: int = 0  # tokens pre-generation wrote
    empty: int = 0  # requests answered with nothing
    #: ``empty`` by reason (``types.EmptyReason``).
    empty_reasons: Counter[EmptyReason] = field(default_factory=Counter)
    cancelled: int = 0
    prewarmed: int = 0  # documents whose prompt window was evaluated in the background
    accepted: int = 0
    accepted_chars: int = 0
    generated_tokens: int = 0
    generation_seconds: float = 0.0
    decode_seconds: float = 0.0  # of those, after the prompt's evaluation (the passes)
    last_latency_ms: float | None = None
    last_tokens_per_second: float | None = None
    _latencies: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    _prefill_ms: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    _decode_ms: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    _shown_ids: OrderedDict[str, int] = field(default_factory=OrderedDict)
    #: Drafting per source over the session's generations (tiers folded).
    sources: dict[str, SourceStats] = field(default_factory=dict)

    def record_latency(self, ms: float) -> None:
        self.last_latency_ms = ms
        self._latencies.append(ms)

    def record_empty(self, reason: EmptyReason) -> None:
        """A request answered with nothing, for ``reason``."""
        self.empty += 1
        self.empty_reasons[reason] += 1

    def is_shown(self, suggestion_id: str) -> bool:
        return suggestion_id in self._shown_ids

    def record_shown(self, suggestion_id: str, chars: int) -> None:
        self.shown += 1
        self._shown_ids[suggestion_id] = chars
        while len(self._shown_ids) > _REMEMBERED:
            self._shown_ids.popitem(last=False)

    def record_generation(
        self, tokens: int, seconds: float, prefill_ms: float = 0.0, decode_ms: float = 0.0
    ) -> None:
        """One finished generation: its tokens, total time, and prompt/decode split."""
        self.generated_tokens += tokens
        self.generation_seconds += seconds
        self.decode_seconds += decode_ms / 1000.0
        self._prefill_ms.append(prefill_ms)
        self._decode_ms.append(decode_ms)
        if seconds > 0 and tokens:
            self.last_tokens_per_second = tokens / seconds

    def record_sources(self, by_source: dict[str, SourceStats]) -> None:
        """Add one generation's drafting per source (``GenerationStats.by_source()``)."""
        for name, s in by_source.items():
            total = self.sources.setdefault(name, SourceStats())
            total.passes += s.passes
            total.drafted += s.drafted
            total.accepted += s.accepted

    def record_accept(self, suggestion_id: str) -> bool:
        """Count an acceptance once per shown suggestion; ``False`` for unknown ids."""
        chars = self._shown_ids.pop(suggestion_id, None)
        if chars is None:
            return False
        self.accepted += 1
        self.accepted_chars += chars
        return True

    @property
    def acceptance(self) -> float:
        return self.accepted / self.shown if self.shown else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generation_seconds if self.generation_seconds else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens per second of the verification passes alone (the prompt's evaluation left out)."""
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0

    @property
    def median_latency_ms(self) -> float | None:
        return median(self._latencies) if self._latencies else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "shown": self.shown,
            "servedFromCache": self.served_from_cache,
            "servedFromPregeneration": self.served_from_pregeneration,
            "servedFromGenerationInFlight": self.served_from_generation_in_flight,
            "pregeneratedTokens": self.pregenerated_tokens,
            "empty": self.empty,
            "emptyReasons": {str(r): n for r, n in sorted(self.empty_reasons.items())},
            "cancelled": self.cancelled,
            "prewarmed": self.prewarmed,
            "accepted": self.accepted,
            "acceptedChars": self.accepted_chars,
            "acceptance": round(self.acceptance, 4),
            "tokensPerSecond": round(self.tokens_per_second, 2),
            "decodeTokensPerSecond": round(self.decode_tokens_per_second, 2),
            "medianLatencyMs": self.median_latency_ms,
            "medianPrefillMs": median(self._prefill_ms) if self._prefill_ms else None,
            "medianDecodeMs": median(self._decode_ms) if self._decode_ms else None,
            "sources": {
                name: {"passes": s.passes, "drafted": s.drafted, "accepted": s.accepted}
                for name, s in sorted(self.sources.items())
            },
        }

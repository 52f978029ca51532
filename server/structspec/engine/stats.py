"""Statistics every generation returns: what was drafted, accepted, and how long it took."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(slots=True)
class SourceStats:
    """Drafting record of one source (or one ``source:tier`` key)."""

    passes: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass(frozen=True, slots=True)
class PassTrace:
    """One verification pass: ``rows = 1 + drafted``; ``accepted`` drafts kept."""

    index: int
    source: str
    drafted: int
    accepted: int
    ms: float


@dataclass
class GenerationStats:
    """Counts and timings of one generation (times in milliseconds)."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    tokens: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    draft_ms: float = 0.0
    stop_reason: str = ""
    truncated_prompt_tokens: int = 0
    healed_tokens: int = 0  # prompt tokens backed up over by token healing
    sources: dict[str, SourceStats] = field(default_factory=dict)
    trace: list[PassTrace] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Generation time: prefill of the new prompt tokens plus decoding."""
        return (self.prefill_ms + self.decode_ms) / 1000.0

    @property
    def tokens_per_pass(self) -> float:
        return self.tokens / self.passes if self.passes else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def record_pass(self, key: str, drafted: int, accepted: int, ms: float) -> None:
        self.passes += 1
        self.drafted += drafted
        self.accepted += accepted
        self.decode_ms += ms
        if drafted:
            s = self.sources.setdefault(key, SourceStats())
            s.passes += 1
            s.drafted += drafted
            s.accepted += accepted
        self.trace.append(PassTrace(self.passes, key if drafted else "", drafted, accepted, ms))

    def by_source(self) -> dict[str, SourceStats]:
        """Statistics merged per source name (tiers folded together)."""
        merged: dict[str, SourceStats] = {}
        for key, s in self.sources.items():
            m = merged.setdefault(key.split(":", 1)[0], SourceStats())
            m.passes += s.passes
            m.drafted += s.drafted
            m.accepted += s.accepted
        return merged

    def to_dict(self, *, trace: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not trace:
            d.pop("trace")
        d["seconds"] = self.seconds
        d["tokens_per_pass"] = self.tokens_per_pass
        d["acceptance"] = self.acceptance
        return d

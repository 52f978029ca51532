"""What the editor benchmark measures per configuration, and its summaries.

``Answer``: one timed answer of a sequential user; ``PacedPoint``: one point
typed by the paced user; ``ConfigResult``: a configuration's answers and its
server's final status, summarized by ``ConfigResult.summary`` and
``paced_summary`` into the numbers the report prints and the JSON holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from structspec.bench.harness import percentile

#: Per-answer status counters of answers served without the model.
WITHOUT_MODEL_PREFIX = "servedFrom"


class Answer(NamedTuple):
    """One timed answer: milliseconds, served without the model, a suggestion shown."""

    ms: float
    cached: bool
    shown: bool
    #: Characters of the suggestion's ``insertText`` (0 when none was shown).
    chars: int = 0


def split_answers(answers: Sequence[Answer]) -> dict[str, dict[str, float]]:
    """p50/p95 and counts over all answers, the model-computed ones and the cached ones."""

    def stats(ms: list[float]) -> dict[str, float]:
        return {
            "n": len(ms),
            "p50_ms": round(percentile(ms, 50), 1),
            "p95_ms": round(percentile(ms, 95), 1),
        }

    return {
        "all": stats([a.ms for a in answers]),
        "model": stats([a.ms for a in answers if not a.cached]),
        "cache": stats([a.ms for a in answers if a.cached]),
    }


@dataclass
class PacedPoint:
    """One point typed at ``PACE_MS``: each keystroke's answer, if it came before the next key.

    ``keys[i]``: milliseconds from keystroke ``i`` to its answer, ``None`` when
    the next keystroke came first (the request was cancelled); the last
    keystroke's answer is always waited for. ``shown[i]``: that answer held a
    suggestion. ``first_shown_ms``: from the first keystroke to the first
    suggestion on screen (``None``: none while the line was typed).
    """

    keys: list[float | None] = field(default_factory=list)
    shown: list[bool] = field(default_factory=list)
    first_shown_ms: float | None = None


def paced_summary(points: Sequence[PacedPoint]) -> dict[str, Any]:
    """What the paced user saw: answers in time, suggestions, the wait for the first one."""
    answered = [ms for p in points for ms in p.keys if ms is not None]
    firsts = [p.first_shown_ms for p in points if p.first_shown_ms is not None]
    return {
        "keystrokes": sum(len(p.keys) for p in points),
        "answered": len(answered),
        "shown": sum(sum(p.shown) for p in points),
        "answered_p50_ms": round(percentile(answered, 50), 1),
        "answered_p95_ms": round(percentile(answered, 95), 1),
        "points": len(points),
        "points_without": len(points) - len(firsts),
        "first_shown_p50_ms": round(percentile(firsts, 50), 1),
        "first_shown_p95_ms": round(percentile(firsts, 95), 1),
        "first_shown_max_ms": round(max(firsts, default=0.0), 1),
    }


@dataclass
class ConfigResult:
    """Measurements of one configuration."""

    name: str
    first_ms: float = 0.0  # the run's first request (at the first point, before typing)
    keys: list[Answer] = field(default_factory=list)
    after_accept: list[Answer] = field(default_factory=list)
    next_line: list[Answer] = field(default_factory=list)
    no_suggestion_points: int = 0  # points where nothing came back to accept
    status: dict[str, Any] = field(default_factory=dict)
    paced: list[PacedPoint] = field(default_factory=list)  # a paced configuration's points
    jumped: list[JumpPlace] = field(default_factory=list)  # the "jump and type" user's places

    def summary(self) -> dict[str, Any]:
        stats = self.status.get("stats", {}) if isinstance(self.status, dict) else {}
        return {
            "keystrokes": len(self.keys),
            "first_ms": round(self.first_ms, 1),
            "keys": split_answers(self.keys),
            "after_accept": split_answers(self.after_accept),
            "next_line": split_answers(self.next_line),
            "no_suggestion_points": self.no_suggestion_points,
            "suggestions": sum(a.shown for a in self.keys),
            "suggestion_chars_p50": percentile([a.chars for a in self.keys if a.shown], 50),
            "tokens_per_second": stats.get("tokensPerSecond", 0.0),
            "decode_tokens_per_second": stats.get("decodeTokensPerSecond", 0.0),
            "model_suggestions": stats.get("shown", 0),
            "served_without_model": without_model(stats),
            "model": self.status.get("model", "") if isinstance(self.status, dict) else "",
        }


def without_model(stats: dict[str, Any]) -> int:
    """Answers the server gave without the model (its ``servedFrom*`` counters)."""
    return sum(
        v
        for k, v in stats.items()
        if k.startswith(WITHOUT_MODEL_PREFIX) and isinstance(v, int) and not isinstance(v, bool)
    )


#: Empty reasons that are the model's own choice (``completion/types.py``: ``EmptyReason``).
MODEL_CHOICE = ("model-empty", "stop-rule")
#: An empty answer the server's ``emptyReasons`` did not count.
UNCOUNTED = "uncounted"


@dataclass
class JumpPlace:
    """One new place of the "jump and type" user (``bench/jump.py``).

    ``opened``: the file was opened there (else: a jump within a file already
    open). ``keys[i]``: keystroke ``i``'s answer; ``reasons[i]``: the server's
    empty reason for it (``None``: a suggestion was shown).
    ``first_shown_ms``: from arriving to the first suggestion shown (``None``:
    none while the line was typed).
    """

    opened: bool
    keys: list[Answer] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)
    first_shown_ms: float | None = None


def jump_summary(places: Sequence[JumpPlace]) -> dict[str, Any]:
    """The "jump and type" numbers: first suggestion at a new place, keystrokes, empty answers."""

    def firsts(kind: Sequence[JumpPlace]) -> dict[str, float]:
        ms = [p.first_shown_ms for p in kind if p.first_shown_ms is not None]
        return {
            "n": len(kind),
            "without": len(kind) - len(ms),
            "p50_ms": round(percentile(ms, 50), 1),
            "p95_ms": round(percentile(ms, 95), 1),
            "max_ms": round(max(ms, default=0.0), 1),
        }

    keys = [a for p in places for a in p.keys]
    reasons: dict[str, int] = {}
    for p in places:
        for reason in p.reasons:
            if reason is not None:
                reasons[reason] = reasons.get(reason, 0) + 1
    empty = sum(reasons.values())
    model_choice = sum(n for r, n in reasons.items() if r in MODEL_CHOICE)
    return {
        "first_shown": firsts(places),
        "first_shown_opened": firsts([p for p in places if p.opened]),
        "first_shown_jumped": firsts([p for p in places if not p.opened]),
        "keys": split_answers(keys),
        "first_keys": split_answers([p.keys[0] for p in places if p.keys]),
        "empty": empty,
        "empty_fraction": round(empty / len(keys), 4) if keys else 0.0,
        "empty_model_choice": model_choice,
        "empty_other": empty - model_choice,
        "empty_reasons": dict(sorted(reasons.items())),
    }

"""``AcceptanceStats``: what the status reports, from the generations it was told about."""

from __future__ import annotations

import pytest

from structspec.completion.stats import AcceptanceStats


def test_decode_speed_leaves_the_prompt_evaluation_out() -> None:
    stats = AcceptanceStats()
    stats.record_generation(10, 0.5, prefill_ms=300.0, decode_ms=200.0)
    stats.record_generation(30, 0.5, prefill_ms=0.0, decode_ms=500.0)
    assert stats.tokens_per_second == pytest.approx(40 / 1.0)
    assert stats.decode_tokens_per_second == pytest.approx(40 / 0.7)
    shown = stats.to_dict()
    assert shown["tokensPerSecond"] == 40.0 and shown["decodeTokensPerSecond"] == 57.14


def test_no_generation_is_no_speed() -> None:
    assert AcceptanceStats().to_dict()["decodeTokensPerSecond"] == 0.0

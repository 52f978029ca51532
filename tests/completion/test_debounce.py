"""Adaptive debounce: wait only while the user types faster than the model answers."""

from __future__ import annotations

from structspec.completion.debounce import SLACK, TYPING_GAP_S, AdaptiveDebounce


def typed(debounce: AdaptiveDebounce, interval_s: float, keys: int = 6) -> None:
    for i in range(keys):
        debounce.keystroke(100.0 + i * interval_s)


def test_until_both_speeds_are_known_the_setting_is_the_wait() -> None:
    d = AdaptiveDebounce()
    assert d.wait_ms(60) == 60
    typed(d, 0.05)
    assert d.wait_ms(60) == 60  # the model's speed is not known yet
    assert d.wait_ms(0) == 0


def test_fast_typing_against_a_slow_model_waits_a_little_more_than_a_keystroke() -> None:
    d = AdaptiveDebounce()
    typed(d, 0.08)
    d.model_answered(300.0)
    assert abs(d.wait_ms(500) - SLACK * 80.0) < 1e-6
    assert d.wait_ms(60) == 60  # never more than the setting


def test_slow_typing_or_a_fast_model_asks_at_once() -> None:
    d = AdaptiveDebounce()
    typed(d, 0.4)
    d.model_answered(150.0)
    assert d.wait_ms(500) == 0.0
    fast = AdaptiveDebounce()
    typed(fast, 0.08)
    fast.model_answered(40.0)
    assert fast.wait_ms(500) == 0.0


def test_pauses_are_not_typing_speed_and_model_time_is_averaged() -> None:
    d = AdaptiveDebounce()
    d.keystroke(0.0)
    d.keystroke(TYPING_GAP_S + 5.0)  # a pause
    d.keystroke(TYPING_GAP_S + 5.1)
    d.model_answered(1000.0)
    assert d.wait_ms(500) == 500  # one interval known: not enough
    d.keystroke(TYPING_GAP_S + 5.2)
    assert abs(d.wait_ms(500) - SLACK * 100.0) < 1e-6
    for _ in range(30):
        d.model_answered(50.0)  # the model became fast (a warm cache)
    assert d.wait_ms(500) == 0.0
    d.model_answered(-1.0)  # ignored
    d.keystroke(0.0)  # a clock that went back: not an interval
    assert d.wait_ms(500) == 0.0

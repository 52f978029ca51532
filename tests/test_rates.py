"""The adaptive defaults (``structspec.rates``): rates in, settings out, on numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from structspec.config import Settings
from structspec.rates import (
    ADAPTIVE,
    FIRST_WINDOW_FLOOR,
    KEYSTROKE_S,
    MAX_TOKENS_MIN,
    MIN_PASSES,
    WARM_S,
    WINDOW_MIN,
    Rates,
    adapt,
    adaptive_defaults,
    first_suggestion_s,
    first_window_cap,
)

SHAPES_JSON = Path(__file__).parent.parent / "docs" / "BENCHMARKS-shapes.json"


def test_the_adaptive_settings_are_settings():
    assert set(adaptive_defaults(Rates(100.0, 10.0))) == set(ADAPTIVE)
    assert set(ADAPTIVE) <= set(vars(Settings()))


def test_a_1_5b_code_model_on_2_cores():
    # Qwen2.5-Coder-1.5B Q4_K_M in docs/BENCHMARKS-shapes.md: 163.1 prompt, 11.6 decode tokens/s.
    chosen = adaptive_defaults(Rates(163.1, 11.6))
    assert chosen == {"window_tokens": 326, "max_generation_ms": 173, "max_tokens": 23}


def test_the_default_model_keeps_about_the_static_defaults():
    chosen = adaptive_defaults(Rates(669.0, 61.7))
    # 669 * 2 s; 250 ms less one 16.2 ms pass; 61.7 * 2 s.
    assert chosen == {"window_tokens": 1338, "max_generation_ms": 234, "max_tokens": 123}


def test_a_fast_machine_is_capped_at_the_static_defaults():
    static = Settings()
    chosen = adaptive_defaults(Rates(50_000.0, 5_000.0))
    assert chosen["window_tokens"] == static.window_tokens
    assert chosen["max_tokens"] == static.max_tokens
    assert chosen["max_generation_ms"] == 250  # 250 less a 0.2 ms pass, rounded up


def test_a_very_slow_machine_gets_the_floors():
    chosen = adaptive_defaults(Rates(10.0, 2.0))
    assert chosen["window_tokens"] == WINDOW_MIN
    assert chosen["max_tokens"] == MAX_TOKENS_MIN
    # two passes of 500 ms: an answer still holds a token or two
    assert chosen["max_generation_ms"] == MIN_PASSES * 500


@pytest.mark.parametrize("prompt_tps", [64.0, 81.3, 147.6, 400.0, 767.9])
def test_the_window_evaluates_within_the_warm_target(prompt_tps: float):
    window = adaptive_defaults(Rates(prompt_tps, 10.0))["window_tokens"]
    assert window / prompt_tps <= WARM_S


@pytest.mark.parametrize("decode_tps", [12.5, 25.1, 61.7, 300.0])
def test_a_keystroke_generation_stays_near_the_target(decode_tps: float):
    generation_ms = adaptive_defaults(Rates(500.0, decode_tps))["max_generation_ms"]
    pass_ms = 1000.0 / decode_tps
    # the budget and the one pass past it that finishes the word: the keystroke target
    assert generation_ms + pass_ms == pytest.approx(KEYSTROKE_S * 1000.0, abs=1.0)


@pytest.mark.parametrize("decode_tps", [2.0, 8.0, 11.6])
def test_a_slow_decoder_gets_its_passes(decode_tps: float):
    generation_ms = adaptive_defaults(Rates(500.0, decode_tps))["max_generation_ms"]
    assert generation_ms == math.ceil(MIN_PASSES * 1000.0 / decode_tps)


def test_every_measured_shape_is_warm_within_2_s_or_gets_the_smallest_window():
    """Each shape of the committed report, at its measured rates: its window is evaluated
    within 2 s, or the machine is too slow for any useful window to be (below
    ``WINDOW_MIN / WARM_S`` prompt tokens/s) and it gets ``WINDOW_MIN``, whose wait the
    status reports. The report's rates vary with the machine's load; the policy's
    promise does not."""
    shapes = json.loads(SHAPES_JSON.read_text())["shapes"]
    assert "Qwen2.5-Coder-1.5B" in shapes
    for name, row in shapes.items():
        window = adaptive_defaults(Rates(row["prompt_tps"], row["decode_tps"]))["window_tokens"]
        if row["prompt_tps"] * WARM_S >= WINDOW_MIN:
            assert window / row["prompt_tps"] <= WARM_S, name
        else:
            assert window == WINDOW_MIN, name


def test_explicit_settings_win():
    rates = Rates(163.1, 11.6)
    given = Settings(max_tokens=64, window_tokens=1536)
    adapted = adapt(given, rates, explicit={"max_tokens", "window_tokens"})
    assert adapted.max_tokens == 64
    assert adapted.window_tokens == 1536  # set to the static default's value: still the user's
    assert adapted.max_generation_ms == 173  # not set: chosen


def test_without_rates_the_settings_stay():
    given = Settings(max_tokens=64)
    assert adapt(given, None, explicit=()) is given


def test_other_settings_are_untouched():
    given = Settings(model="m.gguf", threads=3, debounce_ms=40)
    adapted = adapt(given, Rates(163.1, 11.6), explicit=())
    assert (adapted.model, adapted.threads, adapted.debounce_ms) == ("m.gguf", 3, 40)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "fast"])
def test_rates_must_be_positive_numbers(bad):
    with pytest.raises(ValueError):
        Rates(bad, 10.0)
    with pytest.raises(ValueError):
        Rates(10.0, bad)


def test_first_suggestion_time():
    # 326 tokens at 163 tokens/s, then 173 ms of generation
    assert first_suggestion_s(Rates(163.0, 11.6), 326, 173) == pytest.approx(2.173)


def test_the_first_window_cap_is_what_the_prompt_rate_evaluates_in_two_seconds():
    assert first_window_cap(42.9) == 85  # Qwen2.5-Coder-7B Q4_K_M on 2 cores: not 128
    assert first_window_cap(163.1) == 326  # the 1.5B, whatever windowTokens says
    assert first_window_cap(669.0) == 1338  # the default model: above its first window
    assert first_window_cap(5.0) == FIRST_WINDOW_FLOOR
    for bad in (0.0, -3.0, float("nan")):
        assert first_window_cap(bad) == FIRST_WINDOW_FLOOR
    assert first_window_cap(float("inf")) >= 2**30


@pytest.mark.parametrize("prompt_tps", [16.0, 31.6, 42.9, 88.9, 163.1, 800.6])
def test_the_first_window_evaluates_within_the_warm_target(prompt_tps: float):
    assert first_window_cap(prompt_tps) / prompt_tps <= WARM_S

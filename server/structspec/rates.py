"""What the model costs on this machine, and the defaults those rates choose.

The static defaults (``config.Settings``: ``window_tokens`` 1,536,
``max_generation_ms`` 250, ``max_tokens`` 128) were tuned on the embedded
270M model, which evaluates 450-960 prompt tokens/s and decodes about 60
tokens/s on 2 cores. A 1.5B code model on the same cores evaluates about 160
and decodes about 12 (``docs/BENCHMARKS-shapes.md``): with those defaults a
new place would wait 9 s for its window. So, once a model is loaded, its
measured ``Rates`` (``runtime.model_rates``: measured at the first loads of a
model on a machine, the fastest kept, then cached) choose the defaults of those three settings
(``adaptive_defaults``); a value the user set anywhere (config file,
environment, flag, LSP / VS Code setting) is kept (``adapt``).

A set value does not lift the 2 s promise at a new place, though: the first
answer there comes from a window no longer than the prompt rate evaluates in
``WARM_S`` (``first_window_cap``), whatever ``windowTokens`` says, and below
``WINDOW_MIN`` too (a 7B model at 43 prompt tokens/s would take 3 s for 128
tokens); pre-warm then grows it to the window in effect while the user reads.

Pure: rates in, settings out, nothing measured or read here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from structspec.config import Settings

#: A new place (a window no KV slot holds) should be warm, its whole window
#: evaluated, within this many seconds: what a user takes to read the code
#: there before typing.
WARM_S = 2.0
#: A keystroke's answer should come within about this many seconds.
KEYSTROKE_S = 0.25
#: A whole suggestion should be written within this many seconds at the decode
#: rate (the pre-generation finishes it while the user reads the start).
SUGGESTION_S = 2.0
#: The smallest window chosen: less than a screen of code leaves the model
#: little to go on. On a machine that slow pre-warm fills it in the background
#: while the first answer at a new place comes from fewer (``first_window_cap``).
WINDOW_MIN = 128
#: The fewest tokens a first answer's window at a new place holds, however slow
#: the model (``first_window_cap``): a few lines before the cursor.
FIRST_WINDOW_FLOOR = 32
#: The fewest decode passes a keystroke's generation budget allows, so that a
#: slow model still writes something before the budget ends.
MIN_PASSES = 2
#: The shortest suggestion chosen.
MAX_TOKENS_MIN = 16
#: The settings this module chooses (the names of ``config.Settings``).
ADAPTIVE = ("window_tokens", "max_generation_ms", "max_tokens")


@dataclass(frozen=True)
class Rates:
    """Tokens per second of one model on this machine, on all its threads.

    ``prompt_tps``: prompt tokens evaluated per second in prefill chunks of
    128 (as pre-warm evaluates them); ``decode_tps``: tokens decoded per
    second, one row per pass (greedy, no drafts).
    """

    prompt_tps: float
    decode_tps: float

    def __post_init__(self) -> None:
        for name in ("prompt_tps", "decode_tps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, not {value!r}")


def adaptive_defaults(rates: Rates) -> dict[str, int]:
    """The defaults of ``ADAPTIVE`` for a model that runs at ``rates``.

    - ``window_tokens``: what is evaluated in ``WARM_S`` at the prompt rate,
      so a new place is warm within about 2 s; at most the static default
      (1,536: longer windows were not measured to complete better), at least
      ``WINDOW_MIN`` (below 64 prompt tokens/s the window takes longer than
      2 s: pre-warm evaluates it in the background, and the first answer at a
      new place comes from ``first_window_cap``'s tokens).
    - ``max_generation_ms``: ``KEYSTROKE_S`` less one decode pass, the pass
      the model takes past the budget to finish its word (so the answer comes
      near 250 ms); at least ``MIN_PASSES`` passes, so that a slow model's
      answer holds a word or two (12 tokens/s: 167 ms).
    - ``max_tokens``: what is decoded in ``SUGGESTION_S`` (speculation only
      adds to it), between ``MAX_TOKENS_MIN`` and the static default (128).

    The default model on 2 AVX-512 cores (669 prompt, 62 decode tokens/s) gets
    1,338 / 234 / 123; Qwen2.5-Coder-1.5B at Q4_K_M (163 / 11.6) 326 / 173 / 23.
    """
    static = Settings()
    window = int(rates.prompt_tps * WARM_S)
    pass_ms = 1000.0 / rates.decode_tps
    generation_ms = max(KEYSTROKE_S * 1000.0 - pass_ms, MIN_PASSES * pass_ms)
    tokens = int(rates.decode_tps * SUGGESTION_S)
    return {
        "window_tokens": max(WINDOW_MIN, min(static.window_tokens, window)),
        "max_generation_ms": math.ceil(generation_ms),
        "max_tokens": max(MAX_TOKENS_MIN, min(static.max_tokens, tokens)),
    }


def adapt(settings: Settings, rates: Rates | None, explicit: Collection[str]) -> Settings:
    """``settings`` with the adaptive defaults of ``rates`` for the settings not in ``explicit``.

    ``explicit``: the names of the settings some layer set (``config.LoadedSettings
    .explicit``, ``config.apply``'s ``changed``): those win. ``rates`` ``None``
    (no model loaded yet, or a remote backend): ``settings`` as they are.
    """
    if rates is None:
        return settings
    chosen: dict[str, Any] = {
        k: v for k, v in adaptive_defaults(rates).items() if k not in explicit
    }
    return dataclasses.replace(settings, **chosen) if chosen else settings


def first_window_cap(prompt_tps: float) -> int:
    """Most window tokens of a first answer at a new place: what is evaluated in ``WARM_S``.

    The window in effect (``windowTokens``, set or adaptive) is what pre-warm
    keeps warm; the first answer at a place no KV slot holds waits for its
    window's evaluation, so that window is at most this many tokens, whatever
    ``windowTokens`` says and below the first window's quality floor
    (``completion.prompt.FIRST_WINDOW_MIN``, 512): Qwen2.5-Coder-1.5B at 163
    prompt tokens/s with ``windowTokens`` 1,536 answers from 326 tokens in 2 s
    instead of 512 in 3.1 s, and the 7B at 43 tokens/s from 85 instead of the
    adaptive floor's 128 (3 s). At least ``FIRST_WINDOW_FLOOR``; a rate that
    is not a positive number gives the floor.
    """
    if not prompt_tps > 0.0:  # also NaN
        return FIRST_WINDOW_FLOOR
    if math.isinf(prompt_tps):
        return 2**31 - 1
    return max(FIRST_WINDOW_FLOOR, int(prompt_tps * WARM_S))


def first_suggestion_s(rates: Rates, window: int, max_generation_ms: int) -> float:
    """Seconds a first suggestion at a new place takes: ``window`` tokens, then the generation.

    An estimate for the status: the window's evaluation at the prompt rate,
    then the generation budget (the model then finishes its word). ``window``
    is the first window (``completion.prompt.first_window_tokens``: at most
    ``first_window_cap``).
    """
    return window / rates.prompt_tps + max_generation_ms / 1000.0

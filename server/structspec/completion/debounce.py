"""Adaptive debounce: wait for the next keystroke only when it is likely to beat the model.

A request the next keystroke cancels is wasted work, and its verification
pass in progress delays the next request by up to one pass. Waiting before
asking the model avoids that, but every millisecond of waiting is added to the
latency of the request that is *not* followed by a keystroke, which is the one
the user sees. So the wait follows the user and the model (as Tabby's agent
adapts its debounce to typing speed):

- while the user types faster than the model answers (the median of the
  recent keystroke intervals is below the model's recent answer time), wait
  a little longer than that interval, to see whether the next key comes;
- otherwise (a pause, slow typing, a fast model) ask at once.

``debounceMs`` bounds the wait. Until both speeds are known, the wait is
``debounceMs`` itself. Keystroke gaps longer than ``TYPING_GAP_S`` are pauses,
not typing speed.
"""

from __future__ import annotations

import statistics
from collections import deque

#: A gap between keystrokes longer than this (seconds) is a pause, not typing.
TYPING_GAP_S = 1.0
#: Keystroke intervals remembered.
INTERVALS = 8
#: The wait, as a multiple of the typical keystroke interval.
SLACK = 1.25
#: Weight of the newest answer time in its running average.
MODEL_WEIGHT = 0.3


class AdaptiveDebounce:
    """Typing speed and model speed, and the wait they call for (see the module docstring)."""

    def __init__(self) -> None:
        self._last_key: float | None = None
        self._intervals: deque[float] = deque(maxlen=INTERVALS)
        self._model_ms: float | None = None

    def keystroke(self, now: float) -> None:
        """An edit at ``now`` (seconds, a monotonic clock)."""
        if self._last_key is not None and 0.0 <= now - self._last_key <= TYPING_GAP_S:
            self._intervals.append(now - self._last_key)
        self._last_key = now

    def model_answered(self, ms: float) -> None:
        """The model took ``ms`` to answer a request (debounce not included)."""
        if ms < 0:
            return
        avg = self._model_ms
        self._model_ms = ms if avg is None else (1 - MODEL_WEIGHT) * avg + MODEL_WEIGHT * ms

    def wait_ms(self, most: float) -> float:
        """Milliseconds to wait before asking the model, at most ``most``."""
        if most <= 0:
            return 0.0
        if len(self._intervals) < 2 or self._model_ms is None:
            return most
        typical = statistics.median(self._intervals) * 1000.0
        if typical >= self._model_ms:
            return 0.0
        return min(most, SLACK * typical)

"""Stop conditions on the decoded text, shared by greedy and speculative decoding.

``TextStream`` turns emitted tokens into text deltas that are safe to show:
an incomplete UTF-8 sequence is held back until it completes, and so is any
tail that could still become the start of a stop string. When a stop string
appears, the text ends right before it.
"""

from __future__ import annotations

from collections.abc import Sequence


class TextStream:
    """Incremental detokenizer with stop strings. See the module docstring."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self.stop = tuple(s for s in stop if s)
        self._raw = bytearray()
        self._text = ""  # all decoded text so far (complete UTF-8 only)
        self._emitted = 0  # characters of _text already handed out
        self.stopped = False

    @property
    def text(self) -> str:
        """The text handed out so far plus what is held back (after ``finish``: all of it)."""
        return self._text[: self._emitted]

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the new safe text (possibly empty)."""
        if self.stopped:
            return ""
        self._raw += piece
        # Decode only complete UTF-8 sequences; keep an incomplete tail raw.
        cut = _complete_utf8_prefix(self._raw)
        if cut:
            self._text += self._raw[:cut].decode("utf-8", "replace")
            del self._raw[:cut]
        return self._release()

    def finish(self) -> str:
        """End of generation: release everything still held back."""
        if not self.stopped and self._raw:
            self._text += self._raw.decode("utf-8", "replace")
            self._raw.clear()
        if self.stopped:
            return ""
        delta = self._text[self._emitted :]
        self._emitted = len(self._text)
        return delta

    def _release(self) -> str:
        start = max(0, self._emitted - max((len(s) for s in self.stop), default=0))
        for s in self.stop:
            idx = self._text.find(s, start)
            if idx >= 0:
                self._text = self._text[:idx]
                self.stopped = True
        if self.stopped:
            delta = self._text[self._emitted :]
            self._emitted = len(self._text)
            return delta
        hold = _stop_prefix_overlap(self._text, self.stop)
        safe_end = len(self._text) - hold
        if safe_end <= self._emitted:
            return ""
        delta = self._text[self._emitted : safe_end]
        self._emitted = safe_end
        return delta


def _complete_utf8_prefix(raw: bytes | bytearray) -> int:
    """Length of the longest prefix of ``raw`` that does not end inside a UTF-8 character."""
    n = len(raw)
    # Look back at most 3 bytes for the lead byte of an unfinished sequence.
    for back in range(1, min(4, n) + 1):
        b = raw[n - back]
        if b & 0xC0 == 0x80:  # continuation byte: keep looking for the lead
            continue
        if b & 0x80 == 0:  # ASCII: complete
            return n
        need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
        return n if back >= need else n - back
    return n


def _stop_prefix_overlap(text: str, stops: Sequence[str]) -> int:
    """Longest suffix of ``text`` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best

"""Stop conditions on the decoded text, shared by greedy and speculative decoding.

``TextStream`` turns emitted tokens into text deltas that are safe to show:
an incomplete UTF-8 sequence is held back until it completes, and so is any
tail that could still become the start of a stop string. When a stop string
appears, the text ends right before it; when two stop strings overlap, the one
that is complete first wins (as a streaming reader would see it).

Stop strings are matched with one Aho-Corasick automaton over all of them:
each character of output is looked at once (amortised constant work), and the
automaton's state is also the longest tail that could still grow into a stop
string, which is what has to be held back. Request-controlled stop strings are
capped (``MAX_STOPS`` strings of at most ``MAX_STOP_CHARS`` characters), so
building the automaton is bounded too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

#: At most this many stop strings per generation.
MAX_STOPS = 16
#: A stop string has at most this many characters.
MAX_STOP_CHARS = 1024


def check_stops(stop: Sequence[str]) -> tuple[str, ...]:
    """The non-empty stop strings of ``stop``; ``ValueError`` past the caps."""
    stops = tuple(s for s in stop if s)
    if len(stops) > MAX_STOPS:
        raise ValueError(f"at most {MAX_STOPS} stop strings are allowed, not {len(stops)}")
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise ValueError(
            f"a stop string may have at most {MAX_STOP_CHARS} characters, not {longest}"
        )
    return stops


class StopMatcher:
    """Aho-Corasick automaton over the stop strings, fed one character at a time."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._goto: list[dict[str, int]] = [{}]
        depth = [0]
        ends = [0]  # length of the stop string ending exactly at this state (0: none)
        for s in stops:
            state = 0
            for ch in s:
                nxt = self._goto[state].get(ch)
                if nxt is None:
                    nxt = len(self._goto)
                    self._goto[state][ch] = nxt
                    self._goto.append({})
                    depth.append(depth[state] + 1)
                    ends.append(0)
                state = nxt
            ends[state] = len(s)
        # Failure links, breadth first; ``match`` folds in the output links: the
        # longest stop string that ends at this state or at a suffix of it.
        self._fail = [0] * len(self._goto)
        self._match = list(ends)
        queue = deque(self._goto[0].values())
        while queue:
            state = queue.popleft()
            for ch, nxt in self._goto[state].items():
                f = self._fail[state]
                while f and ch not in self._goto[f]:
                    f = self._fail[f]
                back = self._goto[f].get(ch, 0)
                self._fail[nxt] = back if back != nxt else 0
                self._match[nxt] = self._match[nxt] or self._match[self._fail[nxt]]
                queue.append(nxt)
        self._depth = depth
        self.state = 0

    def feed(self, ch: str) -> int:
        """Advance by one character; the length of a stop string ending here, else 0."""
        state = self.state
        while state and ch not in self._goto[state]:
            state = self._fail[state]
        state = self._goto[state].get(ch, 0)
        self.state = state
        return self._match[state]

    @property
    def pending(self) -> int:
        """Characters at the end of the text that could still begin a stop string."""
        return self._depth[self.state]


class TextStream:
    """Incremental detokenizer with stop strings. See the module docstring."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self.stop = check_stops(stop)
        self._matcher = StopMatcher(self.stop) if self.stop else None
        self._raw = bytearray()
        self._text = ""  # all decoded text so far (complete UTF-8 only)
        self._scanned = 0  # characters of _text already fed to the matcher
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
        if self.stopped:
            return ""
        delta = ""
        if self._raw:
            self._text += self._raw.decode("utf-8", "replace")
            self._raw.clear()
            delta = self._release()  # a stop string may end in the last bytes
        if not self.stopped:
            delta += self._text[self._emitted :]
            self._emitted = len(self._text)
        return delta

    def stop_at(self, pieces: Sequence[bytes]) -> int | None:
        """Index of the first of ``pieces`` that, pushed after the text so far, ends it.

        ``None`` when none does. Nothing changes: the text and the matcher are
        as they were (the decode loop asks it of a draft before verifying it).
        """
        if self._matcher is None or self.stopped:
            return None
        state = self._matcher.state
        raw = bytearray(self._raw)
        try:
            for i, piece in enumerate(pieces):
                raw += piece
                cut = _complete_utf8_prefix(raw)
                if not cut:
                    continue
                text = raw[:cut].decode("utf-8", "replace")
                del raw[:cut]
                if any(self._matcher.feed(ch) for ch in text):
                    return i
            return None
        finally:
            self._matcher.state = state

    def _release(self) -> str:
        hold = 0
        if self._matcher is not None:
            for i in range(self._scanned, len(self._text)):
                found = self._matcher.feed(self._text[i])
                if found:
                    self._text = self._text[: i + 1 - found]
                    self.stopped = True
                    break
            self._scanned = len(self._text)
            hold = 0 if self.stopped else self._matcher.pending
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

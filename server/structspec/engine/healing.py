"""Token healing: a prompt that ends mid-word is backed up to a token boundary.

A prompt cut at the cursor inside a word (``    ret``) ends in a token the
tokenizer chose because the text stops there (``ret``); the model then reads
the word as finished and continues it as one (`` = 0``). Healing removes the
last token(s) covering the partial word from the prompt and constrains the
first generated tokens to reproduce the removed bytes: a token is allowed when
its bytes are a prefix of the bytes still to reproduce (the word continues in
a later token) or start with them (the token finishes the removed part and
goes on: ``return``). Once the removed bytes are reproduced the constraint
lifts. The caller's text starts at the cursor: the reproduced bytes are not
emitted again (``Generation`` strips them).

Which tokens are removed (``plan_healing``):

- only when the prompt ends in a word character (letters, digits, ``_``, any
  script), and never in the middle of a UTF-8 character (bytes that do not
  decode end the word: no healing there);
- the fewest trailing tokens whose bytes cover the partial word, at most
  ``MAX_HEAL_TOKENS`` and never the first token (a BOS stays; a one-token prompt
  is not healed);
- then the longest of those spans that some vocabulary entry strictly extends;
  when none is extended, nothing is healed (healing could only re-emit the same
  text).

The constraint is checked against a byte-prefix index of the vocabulary
(``VocabIndex``: token bytes sorted once, ranges found by bisection), built once
per model and cached with it (``vocab_index``).
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from structspec.model.base import Model

#: At most this many prompt tokens are backed up over (a partial word spans few).
MAX_HEAL_TOKENS = 4


def _successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    head = prefix.rstrip(b"\xff")
    if not head:
        return None
    return head[:-1] + bytes([head[-1] + 1])


class VocabIndex:
    """A byte-prefix index over a vocabulary (tokens with empty bytes are left out).

    ``starting_with(p)``: ids of the tokens whose bytes start with ``p`` (one
    bisection pair over the sorted bytes); ``exact(b)``: ids whose bytes are ``b``.
    """

    def __init__(self, pieces: Sequence[bytes]) -> None:
        order = sorted((i for i, p in enumerate(pieces) if p), key=pieces.__getitem__)
        self._keys = [pieces[i] for i in order]
        self._ids = np.array(order, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._keys)

    def _range(self, prefix: bytes) -> tuple[int, int]:
        lo = bisect_left(self._keys, prefix)
        succ = _successor(prefix)
        hi = len(self._keys) if succ is None else bisect_left(self._keys, succ, lo)
        return lo, hi

    def starting_with(self, prefix: bytes) -> np.ndarray:
        lo, hi = self._range(prefix)
        return self._ids[lo:hi]

    def extends(self, prefix: bytes) -> bool:
        """Whether some token's bytes start with ``prefix`` and are longer."""
        lo, hi = self._range(prefix)
        # Keys equal to ``prefix`` sort first in the range: a longer one, if any, is last.
        return hi > lo and len(self._keys[hi - 1]) > len(prefix)

    def exact(self, piece: bytes) -> list[int]:
        if not piece:
            return []
        lo = bisect_left(self._keys, piece)
        hi = lo
        while hi < len(self._keys) and self._keys[hi] == piece:
            hi += 1
        return self._ids[lo:hi].tolist()


_indexes: weakref.WeakKeyDictionary[object, VocabIndex] = weakref.WeakKeyDictionary()


def vocab_index(model: Model) -> VocabIndex:
    """The model's ``VocabIndex``, built on first use and kept as long as the model."""
    try:
        index = _indexes.get(model)
    except TypeError:  # a model object that cannot be weakly referenced: no cache
        return VocabIndex([model.token_bytes(t) for t in range(model.n_vocab)])
    if index is None:
        index = VocabIndex([model.token_bytes(t) for t in range(model.n_vocab)])
        _indexes[model] = index
    return index


def _char_start(data: bytes, end: int) -> int:
    """Start of the UTF-8 character ending at ``end`` (continuation bytes skipped)."""
    i = end - 1
    while i > 0 and end - i < 4 and data[i] & 0xC0 == 0x80:
        i -= 1
    return i


def trailing_word_bytes(data: bytes) -> int:
    """Bytes of the word characters that ``data`` ends with (0 if it does not end mid-word).

    A word character is alphanumeric in any script, or ``_``. Bytes that do not
    decode (``data`` ends inside a multi-byte character, or holds invalid
    UTF-8) end the word there.
    """
    end = len(data)
    while end > 0:
        start = _char_start(data, end)
        try:
            ch = data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            break
        if len(ch) != 1 or not (ch.isalnum() or ch == "_"):
            break
        end = start
    return len(data) - end


@dataclass
class Healing:
    """A planned heal: the last ``n_tokens`` prompt tokens, holding ``removed``, are backed up.

    Generation state is ``done``: how many bytes of ``removed`` the output has
    reproduced; the constraint holds while ``done < len(removed)``.
    """

    removed: bytes
    n_tokens: int
    index: VocabIndex
    #: ``reachable[i]``: ``removed[i:]`` can still be produced from the vocabulary.
    reachable: list[bool] = field(default_factory=list)
    _allowed: dict[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.removed)
        reach = [False] * (n + 1)
        reach[n] = True
        for i in range(n - 1, -1, -1):
            rest = self.removed[i:]
            reach[i] = len(self.index.starting_with(rest)) > 0 or any(
                reach[i + k] and self.index.exact(rest[:k]) for k in range(1, n - i)
            )
        self.reachable = reach

    def active(self, done: int) -> bool:
        return done < len(self.removed)

    def allowed(self, done: int) -> np.ndarray:
        """Sorted ids allowed after ``done`` bytes were reproduced (never empty while active)."""
        ids = self._allowed.get(done)
        if ids is None:
            rest = self.removed[done:]
            parts = [self.index.starting_with(rest)]
            for k in range(1, len(rest)):
                if self.reachable[done + k]:
                    parts.append(np.asarray(self.index.exact(rest[:k]), dtype=np.int64))
            ids = np.unique(np.concatenate(parts))
            self._allowed[done] = ids
        return ids

    def advance(self, done: int, piece: bytes) -> int | None:
        """``done`` after a token with bytes ``piece``, or ``None`` if the token is not allowed."""
        if not self.active(done):
            return done
        rest = self.removed[done:]
        if not piece:
            return None
        if piece.startswith(rest):
            return len(self.removed)
        if rest.startswith(piece) and self.reachable[done + len(piece)]:
            return done + len(piece)
        return None


def plan_healing(
    prompt: Sequence[int], model: Model, index: VocabIndex | None = None
) -> Healing | None:
    """How to heal ``prompt`` (see the module docstring), or ``None`` to generate plainly."""
    limit = min(MAX_HEAL_TOKENS, len(prompt) - 1)  # the first token (BOS) always stays
    if limit <= 0:
        return None
    pieces = [model.token_bytes(t) for t in prompt[len(prompt) - limit :]]
    word = trailing_word_bytes(b"".join(pieces))
    if word == 0:
        return None
    cover, size = 0, 0
    while cover < limit and size < word:
        cover += 1
        size += len(pieces[-cover])
    index = index or vocab_index(model)
    for k in range(cover, 0, -1):
        removed = b"".join(pieces[-k:])
        if index.extends(removed):
            return Healing(removed, k, index)
    return None

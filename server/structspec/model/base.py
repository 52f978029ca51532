"""The model protocol the engine decodes with.

A model holds a KV cache of ``cached_tokens``. The engine only ever:

- ``prefill(tokens)``: make the cache hold exactly ``tokens``, reusing the
  longest common prefix with what is cached (no logits are needed);
- ``verify(tokens)``: append ``tokens`` to the cache and return, for every
  appended row ``i``, the greedy choice ``argmax(logits_i)``, the top-1/top-2
  margin of that row and the row's logits themselves (read lazily: only
  constrained or sampled rows need them). Row ``i``'s logits predict the token
  after ``cached + tokens[: i + 1]``;
- ``truncate(n)``: roll the cache back to its first ``n`` tokens.

A decode that another thread stops part-way (``Interrupt``, for models that
offer it: ``model/extras.py``) raises ``Interrupted`` and leaves the cache as
it was before that decode.

Everything above this protocol is deterministic given what ``verify`` returns,
which is what lets the tests prove the speculative loop exact on a stand-in.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


class ModelError(Exception):
    """A model could not be loaded or used; the message is one line for the user."""


class Interrupted(ModelError):
    """A decode was stopped part-way by its ``Interrupt``; the cache is as before it."""


class Interrupt:
    """A flag any thread sets to stop decodes part-way (``InterruptibleModel.interrupted_by``).

    The flag is one byte followed by a NUL in memory that native code reads
    between the steps of a decode without taking Python's GIL: ``address``.
    Once set it stays set; a new piece of work takes a new ``Interrupt``.
    """

    __slots__ = ("_flag",)

    def __init__(self) -> None:
        self._flag = ctypes.create_string_buffer(2)

    def set(self) -> None:
        self._flag[0] = b"\x01"

    def is_set(self) -> bool:
        return self._flag[0] != b"\x00"

    @property
    def address(self) -> int:
        """Where the flag byte lives (valid as long as this object)."""
        return ctypes.addressof(self._flag)


@dataclass(frozen=True, slots=True)
class Rows:
    """Verified rows: ``argmax[i]``, ``margin[i]`` (top1 - top2 logit) and ``logits[i]``.

    ``logits[i]`` is row ``i``'s full logit vector (``n_vocab`` floats, not to
    be modified). ``margin`` and ``logits`` may be read lazily from the
    model's own buffer and are only valid until the model's next decode: read
    what you need right after ``verify`` (a stale read raises).
    """

    argmax: list[int]
    margin: Sequence[float]
    logits: Sequence[np.ndarray]


@dataclass(frozen=True, slots=True)
class TokenCheck:
    """Teacher-forced check of one emitted token.

    ``gap`` is ``max(logits) - logits[token]`` of the row that chose ``token``:
    0 when the token is the row's argmax.
    """

    token: int
    argmax: int
    gap: float


@dataclass(frozen=True, slots=True)
class FimTokens:
    """Fill-in-the-middle special tokens of a vocabulary."""

    prefix: int
    suffix: int
    middle: int


@runtime_checkable
class Model(Protocol):
    """What the engine needs from a model. See the module docstring for the contract."""

    name: str
    n_ctx: int
    n_vocab: int

    @property
    def cached_tokens(self) -> Sequence[int]: ...

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]: ...

    def token_bytes(self, token: int) -> bytes: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def is_eog(self, token: int) -> bool: ...

    def bos_token(self) -> int | None: ...

    def fim_tokens(self) -> FimTokens | None: ...

    def prefill(self, tokens: Sequence[int]) -> int:
        """Make the cache hold exactly ``tokens``; return how many were reused."""
        ...

    def verify(self, tokens: Sequence[int]) -> Rows: ...

    def truncate(self, n: int) -> None: ...

    def teacher_forced(self, prompt: Sequence[int], output: Sequence[int]) -> list[TokenCheck]:
        """Evaluate ``prompt + output`` in batches and check each output token."""
        ...


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i

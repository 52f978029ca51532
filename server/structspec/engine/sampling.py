"""Choosing a row's token: greedy, or sampled so that speculation stays exact.

The sampling distribution of a row, in llama.cpp's order (so the same
parameters mean the same thing as in llama-server):

1. candidates: every token, or the ones token healing allows;
2. ``top_k`` (> 0): the ``k`` highest logits;
3. ``top_p`` (< 1): the fewest most likely candidates whose probability
   (softmax at temperature 1 over the candidates left) reaches ``top_p``;
4. ``min_p`` (> 0): candidates with probability >= ``min_p`` x the largest;
5. ``p = softmax(logits / temperature)`` over what is left.

``temperature == 0`` is greedy (the argmax of the candidates); the truncation
parameters then change nothing.

Exactness with drafts. Output position ``j`` has its own uniform number
``u_j``, the ``j``-th draw of a ``numpy`` Generator seeded once per
generation; the row's token is the inverse CDF of ``p`` at ``u_j``, the
candidates taken in token-id order. The decode loop accepts a draft token ``d``
when it equals the row's token, which happens with probability exactly
``p(d)``; when it does not, the row's token is distributed as ``p`` with ``d``
removed and renormalised. That is the speculative-sampling rule for a
deterministic draft, so the output distribution is plain sampling's. And
because ``u_j`` depends only on the seed and the position, never on how many
rows a pass verified, the same seed gives the same tokens with speculation on
or off (on a model whose rows do not depend on the batch shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# numpy imports its random module on first use: 28 ms, which the first
# generation after a start would pay (every generation makes a ``Sampler``).
from numpy.random import default_rng

#: ``top_p`` first looks only at tokens within this factor of the most likely
#: one, and widens the look only when they hold less than ``top_p`` (a full
#: sort of a 262k vocabulary per row is what this avoids).
_TOP_P_FIRST_LOOK = 1e-3


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters (validated on construction: ``ValueError`` names the bad one)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a number >= 0, not {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), not {self.top_k}")
        if not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be between 0 and 1, not {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be between 0 and 1, not {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def distribution(
    logits: np.ndarray, sampling: Sampling, candidates: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, probs)``: the sampling distribution of one row, ids ascending.

    ``candidates`` (sorted ids) restricts the row first; ``None`` is every token.
    Needs ``sampling.temperature > 0``.
    """
    ids, weights = _weights(logits, sampling, candidates)
    return ids, weights / weights.sum()


def _weights(
    logits: np.ndarray, sampling: Sampling, candidates: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ids and unnormalised probabilities of the sampling distribution."""
    if candidates is None:
        ids = np.arange(len(logits))
        x = np.asarray(logits, dtype=np.float64)
    else:
        ids = np.asarray(candidates)
        x = np.asarray(logits, dtype=np.float64)[ids]
    if 0 < sampling.top_k < len(x):
        keep = np.sort(np.argpartition(-x, sampling.top_k - 1)[: sampling.top_k])
        ids, x = ids[keep], x[keep]
    if sampling.top_p < 1 and len(x) > 1:
        keep = _nucleus(x, sampling.top_p)
        ids, x = ids[keep], x[keep]
    if sampling.min_p > 0 and len(x) > 1:
        floor = x.max() + math.log(sampling.min_p) if sampling.min_p < 1 else x.max()
        keep = np.flatnonzero(x >= floor)
        ids, x = ids[keep], x[keep]
    return ids, np.exp((x - x.max()) / sampling.temperature)


def _nucleus(x: np.ndarray, top_p: float) -> np.ndarray:
    """Sorted positions of the fewest largest ``x`` whose softmax mass reaches ``top_p``."""
    z = np.exp(x - x.max())
    need = top_p * z.sum()
    look = np.flatnonzero(z >= _TOP_P_FIRST_LOOK)
    size = len(look)
    while z[look].sum() < need and size < len(z):
        # Widen to the ``size`` likeliest (a partition, not a sort, of the row).
        size = min(len(z), max(256, size * 8))
        look = np.argpartition(-z, size - 1)[:size] if size < len(z) else np.arange(len(z))
    # Every token inside the look is at least as likely as every token outside it,
    # so once the look holds ``top_p`` of the mass the nucleus lies within it.
    top = look[np.argsort(-z[look], kind="stable")]
    mass = np.cumsum(z[top])
    n = min(int(np.searchsorted(mass, need)) + 1, len(top))
    return np.sort(top[:n])


class Sampler:
    """Chooses each row's token for one generation (see the module docstring)."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling = sampling
        seed = None if sampling.seed is None else sampling.seed % (1 << 64)  # OpenAI's are signed
        self._rng = default_rng(seed)
        self._u: list[float] = []

    def uniform(self, position: int) -> float:
        """The uniform number of output position ``position`` (drawn in position order)."""
        while len(self._u) <= position:
            self._u.append(float(self._rng.random()))
        return self._u[position]

    def choose(self, logits: np.ndarray, position: int, candidates: np.ndarray | None) -> int:
        """The token of a row: its (constrained) argmax, or a sample at ``u_position``."""
        if self.sampling.greedy:
            if candidates is None:
                return int(np.argmax(logits))
            return int(candidates[int(np.argmax(logits[candidates]))])
        ids, weights = _weights(logits, self.sampling, candidates)
        cdf = np.cumsum(weights)
        i = int(np.searchsorted(cdf, self.uniform(position) * cdf[-1], side="right"))
        return int(ids[min(i, len(ids) - 1)])

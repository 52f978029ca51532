"""A deterministic stand-in model for exactness tests and offline simulation.

Its vocabulary is a small character alphabet plus BOS and EOS, so text goes
through it like through a real tokenizer (one token per character), optionally
with multi-character ``pieces`` (tokenized longest match first, as a BPE
vocabulary would give words that span several characters), and optionally
with fill-in-the-middle control tokens (``fim=True``). The logits
of a row are a pure function of the last ``order`` tokens:

    logits(c) = sum_{j=1..order} W_j[c[-j]]        (W_j: seeded n_vocab x n_vocab)

Each row is computed on its own, so, unlike llama.cpp on CPU, the result does
not depend on how many rows share a batch: speculative and greedy decoding must
agree bit for bit, which is what the tests assert.

With ``sliding_window`` it saves states as llama.cpp saves a model with
sliding-window layers (``model/prefix_cache.py``): a state read back lacks the
window of its positions before the last ``sliding_window``, and a row whose
window reaches such a position is wrong (it reads BOS alone), so a state of
more than ``sliding_window`` tokens cut back past its end gives other tokens
than the evaluated prompt: the cache does not serve one (``PrefixCache.serves``).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Sequence

import numpy as np

from structspec.model.base import (
    FimTokens,
    Interrupt,
    Interrupted,
    ModelError,
    Rows,
    TokenCheck,
    common_prefix_len,
)
from structspec.model.prefix_cache import RESTORE_MIN, PrefixCache

DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz_():.,=+-*[]{}'\" \n0123456789"
BOS = 0
EOS = 1


class StandInModel:
    """Numpy model with the ``Model`` interface; see the module docstring."""

    def __init__(
        self,
        *,
        seed: int = 0,
        order: int = 3,
        alphabet: str = DEFAULT_ALPHABET,
        n_ctx: int = 4096,
        eos_bias: float = 0.0,
        temperature_scale: float = 1.0,
        pieces: Sequence[str] = (),
        fim: bool = False,
        sliding_window: int = 0,
    ) -> None:
        self.name = f"stand-in(seed={seed},order={order})"
        self.alphabet = alphabet
        self.pieces = [p for p in dict.fromkeys(pieces) if len(p) > 1]
        self._texts = [*alphabet, *self.pieces]
        n_text = len(self._texts) + 2
        # Fill-in-the-middle control tokens (no text), after every text token.
        self._fim = FimTokens(n_text, n_text + 1, n_text + 2) if fim else None
        self.n_vocab = n_text + (3 if fim else 0)
        self.n_ctx = n_ctx
        self.order = order
        rng = np.random.default_rng(seed)
        self._w = rng.normal(0.0, temperature_scale, size=(order, self.n_vocab, self.n_vocab))
        self._w[:, :, EOS] += eos_bias
        self._w[:, :, BOS] = -1e9  # BOS is never predicted
        self._char_to_id = {ch: i + 2 for i, ch in enumerate(alphabet)}
        self._piece_to_id = {p: i + 2 for i, p in enumerate(self._texts) if len(p) > 1}
        self._longest = max((len(p) for p in self.pieces), default=1)
        self._cache: list[int] = []
        #: A saved state holds the window of its last ``sliding_window`` positions only.
        self.sliding_window = sliding_window
        #: Positions of ``_cache`` below this were read back without their window.
        self._holes_below = 0
        self._interrupt: Interrupt | None = None  # set inside interrupted_by
        self.rows_evaluated = 0
        self.verify_calls = 0
        #: Prompt tokens ``prefill`` evaluated (not reused, not restored).
        self.prefilled_tokens = 0
        #: Evaluated prefixes on disk (``runtime.open_model`` attaches it), or ``None``.
        self.prefix_cache: PrefixCache | None = None

    # -- tokenizer ---------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        text = "".join(ch for ch in text if ch in self._char_to_id)
        ids: list[int] = []
        i = 0
        while i < len(text):
            for n in range(min(self._longest, len(text) - i), 0, -1):
                tok = self._piece_to_id.get(text[i : i + n]) if n > 1 else self._char_to_id[text[i]]
                if tok is not None:
                    ids.append(tok)
                    i += n
                    break
        return [BOS, *ids] if add_bos else ids

    def token_bytes(self, token: int) -> bytes:
        if not 2 <= token < len(self._texts) + 2:
            return b""
        return self._texts[token - 2].encode()

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def bos_token(self) -> int | None:
        return BOS

    def fim_tokens(self) -> FimTokens | None:
        return self._fim

    # -- KV cache ----------------------------------------------------------
    @property
    def cached_tokens(self) -> Sequence[int]:
        return self._cache

    def logits(self, context: Sequence[int]) -> np.ndarray:
        """The logits predicting the token after ``context``."""
        out = np.zeros(self.n_vocab)
        for j in range(1, min(self.order, len(context)) + 1):
            out += self._w[j - 1, context[-j]]
        return out

    @contextlib.contextmanager
    def interrupted_by(self, stop: Interrupt) -> Iterator[None]:
        """Decodes inside raise ``Interrupted`` (the cache untouched) once ``stop`` is set."""
        before, self._interrupt = self._interrupt, stop
        try:
            yield
        finally:
            self._interrupt = before

    def _check_interrupt(self, new_rows: int) -> None:
        # A decode of new rows stops before it starts (a real one stops part-way;
        # either way the cache is as before it).
        if new_rows and self._interrupt is not None and self._interrupt.is_set():
            raise Interrupted("the decode was interrupted")

    def prefill(self, tokens: Sequence[int]) -> int:
        if len(tokens) > self.n_ctx:
            raise ModelError(f"{len(tokens)} tokens do not fit the context of {self.n_ctx}")
        reused = common_prefix_len(self._cache, tokens)
        cache = self.prefix_cache
        if cache is not None and len(tokens) - reused >= RESTORE_MIN:
            self.truncate(cache.restore(self, tokens, reused))
            reused = common_prefix_len(self._cache, tokens)
        self._check_interrupt(len(tokens) - reused)
        self.prefilled_tokens += len(tokens) - reused
        self.truncate(reused)  # the positions from ``reused`` on are evaluated: whole again
        self._cache = list(tokens)
        return reused

    def verify(self, tokens: Sequence[int]) -> Rows:
        if not tokens:
            return Rows([], [], [])
        if len(self._cache) + len(tokens) > self.n_ctx:
            raise ModelError("verify past the end of the context")
        self._check_interrupt(len(tokens))
        self.verify_calls += 1
        argmax: list[int] = []
        margin: list[float] = []
        rows: list[np.ndarray] = []
        for tok in tokens:
            self._cache.append(int(tok))
            row = self.logits(self._row_context())
            row.flags.writeable = False
            top2 = np.partition(row, -2)[-2:]
            argmax.append(int(np.argmax(row)))
            margin.append(float(top2[1] - top2[0]))
            rows.append(row)
        self.rows_evaluated += len(tokens)
        return Rows(argmax, margin, rows)

    def _row_context(self) -> Sequence[int]:
        """What the row after the cache reads: the cache, or BOS alone where its window
        (the last ``sliding_window`` positions) reaches a position read back without it.
        """
        if max(0, len(self._cache) - self.sliding_window) < self._holes_below:
            return [BOS]  # wrong, as a real row would be
        return self._cache

    def truncate(self, n: int) -> None:
        n = max(0, n)
        if n >= len(self._cache):
            return
        del self._cache[n:]
        self._holes_below = min(self._holes_below, n)

    # -- the prefix cache's state: the stand-in's "KV cache" is its tokens --
    def identity(self) -> str:
        """What a saved state must match: the stand-in's weights and vocabulary."""
        return f"{self.name}|{self.alphabet!r}|{self.pieces!r}|{self._fim}|{self.n_ctx}"

    def save_prefixes(self, *, closing: bool = False) -> int:
        """Save the cache's tokens if the prefix cache lacks them (idle time, as ``LlamaModel``).

        ``closing`` changes nothing here: the stand-in keeps no prompt apart
        from the generation after it.
        """
        cache = self.prefix_cache
        return 0 if cache is None else int(cache.save_held(list(self._cache), self.state_bytes))

    def state_bytes(self) -> bytes | None:
        return struct.pack(f"<{len(self._cache)}I", *self._cache)

    def load_state(self, tokens: Sequence[int], data: bytes) -> bool:
        if data != struct.pack(f"<{len(tokens)}I", *tokens) or len(tokens) > self.n_ctx:
            return False
        self._cache = list(tokens)
        self._holes_below = 0
        if self.sliding_window and len(tokens) > self.sliding_window:
            self._holes_below = len(tokens) - self.sliding_window
        return True

    def teacher_forced(self, prompt: Sequence[int], output: Sequence[int]) -> list[TokenCheck]:
        seq = list(prompt)
        checks = []
        for tok in output:
            row = self.logits(seq)
            best = int(np.argmax(row))
            checks.append(TokenCheck(int(tok), best, float(row[best] - row[tok])))
            seq.append(int(tok))
        return checks

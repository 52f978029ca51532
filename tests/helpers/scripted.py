"""A stand-in model that writes a given text after any prompt (completion tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from structspec.model.standin import EOS, StandInModel


class ScriptedModel(StandInModel):
    """Greedily writes ``script`` after any prompt, then EOS (the row's position decides)."""

    def __init__(self, script: str, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.script = [self._char_to_id[c] for c in script]
        self._n_prompt = 0

    def prefill(self, tokens: Sequence[int]) -> int:
        self._n_prompt = len(tokens) + 1  # the pending token comes with the first verify
        return super().prefill(tokens)

    def logits(self, context: Sequence[int]) -> np.ndarray:
        i = len(context) - self._n_prompt
        out = np.zeros(self.n_vocab)
        out[self.script[i] if 0 <= i < len(self.script) else EOS] = 10.0
        return out

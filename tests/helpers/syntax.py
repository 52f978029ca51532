"""Helpers of the syntax-engine tests: a word-level tokenizer model and contexts.

``WordModel`` tokenizes like a BPE vocabulary does on code (a word carries its
leading space, punctuation and newlines are tokens of their own, indentation
is one token), with a vocabulary that grows as text is seen. It has no logits:
it is for the draft sources, which only use the tokenizer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from structspec.drafts.base import DraftContext
from structspec.model.base import FimTokens, Rows, TokenCheck

_WORD = re.compile(r"[ \t]?\w+|[ \t]?[^\w\s]|[ \t]+")


class WordModel:
    """A tokenizer-only model (see the module docstring)."""

    name = "words"
    n_ctx = 4096

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {"<bos>": 0, "<eos>": 1}
        self.pieces: list[str] = ["", ""]

    @property
    def n_vocab(self) -> int:
        return len(self.pieces)

    @property
    def cached_tokens(self) -> Sequence[int]:
        return []

    def _id(self, piece: str) -> int:
        tok = self.vocab.get(piece)
        if tok is None:
            tok = self.vocab[piece] = len(self.pieces)
            self.pieces.append(piece)
        return tok

    def split(self, text: str) -> list[str]:
        pieces: list[str] = []
        at_line_start = False  # a fragment's leading space belongs to its first word
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\n":
                pieces.append("\n")
                i += 1
                at_line_start = True
                continue
            if at_line_start and ch in " \t":
                j = i
                while j < len(text) and text[j] in " \t":
                    j += 1
                pieces.append(text[i:j])
                i = j
                at_line_start = False
                continue
            at_line_start = False
            m = _WORD.match(text, i)
            assert m is not None
            pieces.append(m.group(0))
            i = m.end()
        return pieces

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        ids = [self._id(p) for p in self.split(text)]
        return [0, *ids] if add_bos else ids

    def token_bytes(self, token: int) -> bytes:
        return self.pieces[token].encode() if 0 <= token < len(self.pieces) else b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return "".join(self.pieces[t] for t in tokens if 0 <= t < len(self.pieces))

    def is_eog(self, token: int) -> bool:
        return token == 1

    def bos_token(self) -> int | None:
        return 0

    def fim_tokens(self) -> FimTokens | None:
        return None

    def prefill(self, tokens: Sequence[int]) -> int:
        raise NotImplementedError

    def verify(self, tokens: Sequence[int]) -> Rows:
        raise NotImplementedError

    def truncate(self, n: int) -> None:
        raise NotImplementedError

    def teacher_forced(self, prompt: Sequence[int], output: Sequence[int]) -> list[TokenCheck]:
        raise NotImplementedError


_generation = [0]


def context(
    model: Any, text: str, language: str | None = None, max_tokens: int = 12
) -> DraftContext:
    """A fresh draft context whose tokens are ``text`` (a new generation each time)."""
    _generation[0] += 1
    toks = model.tokenize(text, add_bos=True)
    return DraftContext(
        model=model,
        tokens=toks,
        n_prompt=len(toks),
        max_tokens=max_tokens,
        language=language,
        generation=_generation[0],
    )


def draft_text(model: Any, draft: Any) -> str | None:
    return None if draft is None else model.detokenize(draft.tokens)

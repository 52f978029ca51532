"""Helpers of the draft-source tests: a multi-character toy tokenizer.

``PieceTokenizer`` tokenizes by greedy longest match over a small vocabulary of
pieces, so that (unlike the one-character stand-in model) tokens hold several
characters, newlines sit inside tokens, and a continuation can merge into the
token before it (``)`` + ``:`` -> ``):``), the boundary effects the sources
must handle on real vocabularies.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

PIECES = (
    "\n", "\n\n", "    ", "        ", "            ", "\n    ", " ", "  ",
    "def", " def", "for", " in", " x", " i", " y", "if", " if", "else", "return", " return",
    "):", ":", "(", ")", "((", "self", "__", " __", "init", "__(", "name", " ==", ' "__',
    "main", '__":', "class", " A", "while", " True", "pass", "import", " import",
    "from", " annotations", "future", ",", " range", " len", ".", "append",
)  # fmt: skip


class PieceTokenizer:
    """Greedy longest-match tokenizer over ``PIECES`` plus every printable character."""

    def __init__(self, pieces: Sequence[str] = PIECES, *, name: str = "pieces") -> None:
        vocab = ["<bos>", "<eos>"]
        for p in [*pieces, *string.printable]:
            if p not in vocab:
                vocab.append(p)
        self.vocab = vocab
        self.name = name
        self.n_vocab = len(vocab)
        self._ids = {p: i for i, p in enumerate(vocab) if i >= 2}
        self._longest = max(len(p) for p in vocab)

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        out = [0] if add_bos else []
        i = 0
        while i < len(text):
            for n in range(min(self._longest, len(text) - i), 0, -1):
                tok = self._ids.get(text[i : i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                i += 1  # a character outside the vocabulary is dropped
        return out

    def token_bytes(self, token: int) -> bytes:
        return self.vocab[token].encode() if 2 <= token < self.n_vocab else b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

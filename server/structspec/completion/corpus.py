"""Token corpora for the lookup draft source: the open buffers, not just the prompt.

In an editor the best place to look for what comes next is usually elsewhere
in the same file (below the cursor, or above the prompt window) or in another
open file. This keeps each of those regions tokenized, re-tokenizing a
document only when its version changes, and returns the same list objects
while nothing changed (the lookup source indexes a sequence once and keys its
index by identity).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from structspec.completion.prompt import sanitize
from structspec.model.base import Model

#: Characters of another document that are tokenized (its head).
MAX_DOC_CHARS = 200_000
#: Characters of the current document outside the prompt window, each side.
MAX_REGION_CHARS = 64_000
#: Characters after the cursor tokenized for the suffix and nearby sources.
MAX_SUFFIX_CHARS = 8_000
#: Other documents searched at most (the most recently edited first).
MAX_DOCS = 12
_REGION_CACHE = 8


@dataclass(frozen=True)
class DocumentSnapshot:
    """What the corpus needs of an open document (taken on the event loop)."""

    uri: str
    version: int
    text: str


class CorpusCache:
    """Tokenized open documents for one model (see the module docstring)."""

    def __init__(self) -> None:
        self._model: Model | None = None
        self._docs: dict[str, tuple[int, int, list[int]]] = {}  # uri -> (version, len, tokens)
        self._regions: OrderedDict[str, list[int]] = OrderedDict()

    def _reset_for(self, model: Model) -> None:
        if self._model is not model:
            self._model = model
            self._docs.clear()
            self._regions.clear()

    def _document(self, model: Model, snap: DocumentSnapshot) -> list[int]:
        entry = self._docs.get(snap.uri)
        if entry is not None and entry[0] == snap.version and entry[1] == len(snap.text):
            return entry[2]
        tokens = model.tokenize(sanitize(snap.text[:MAX_DOC_CHARS]), add_bos=False)
        self._docs[snap.uri] = (snap.version, len(snap.text), tokens)
        return tokens

    def _region(self, model: Model, text: str) -> list[int]:
        tokens = self._regions.get(text)
        if tokens is None:
            tokens = model.tokenize(sanitize(text), add_bos=False)
            self._regions[text] = tokens
            while len(self._regions) > _REGION_CACHE:
                self._regions.popitem(last=False)
        else:
            self._regions.move_to_end(text)
        return tokens

    def suffix(self, model: Model, text: str, offset: int) -> list[int]:
        """Tokens of the text after the cursor (its first ``MAX_SUFFIX_CHARS``)."""
        self._reset_for(model)
        after = text[offset : offset + MAX_SUFFIX_CHARS]
        return self._region(model, after) if after.strip() else []

    def collect(
        self,
        model: Model,
        *,
        text: str,
        cut: int,
        suffix_start: int,
        others: Sequence[DocumentSnapshot] = (),
    ) -> list[list[int]]:
        """Corpus for a prompt whose window is ``text[cut:suffix_start]``.

        The current document contributes what the prompt does not hold: the
        text below the window (from ``suffix_start``) and above it (before
        ``cut``); other open documents contribute their text.
        """
        self._reset_for(model)
        corpus: list[list[int]] = []
        below = text[suffix_start : suffix_start + MAX_REGION_CHARS]
        if len(below.strip()) > 8:
            corpus.append(self._region(model, below))
        above = text[max(0, cut - MAX_REGION_CHARS) : cut]
        if len(above.strip()) > 8:
            corpus.append(self._region(model, above))
        searched = list(others)[:MAX_DOCS]
        # Keep the tokens of the documents searched now only: every open document
        # that was once among the MAX_DOCS latest stayed tokenized while open.
        live = {s.uri for s in searched}
        for uri in [u for u in self._docs if u not in live]:
            del self._docs[uri]
        for snap in searched:
            if len(snap.text.strip()) > 8:
                corpus.append(self._document(model, snap))
        return [seq for seq in corpus if len(seq) > 2]

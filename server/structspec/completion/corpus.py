"""Token corpora for the lookup draft source: the open buffers, not just the prompt.

In an editor the best place to look for what comes next is usually elsewhere
in the same file (below the cursor, or above the prompt window) or in another
open file. This keeps each of those regions tokenized, re-tokenizing a
document only when its version changes, and returns the same list objects
while nothing changed (the lookup source indexes a sequence once and keys its
index by identity).

Tokenizing is not free (about 0.75 ms per 1,000 characters of code with the
default model on a 2-core EPYC, ``docs/MEASUREMENTS.md`` §17): the regions around a
new place are up to 128,000 characters, and a dozen open documents up to
200,000 each. So a request tokenizes at most ``REQUEST_CHARS`` characters
that nothing tokenized before: a region's part next to the window first,
another document only whole; a document whose latest version is not
tokenized yet is searched by an earlier version's tokens (or not at all). The
rest is tokenized at idle time (``prepare``, from pre-warm), in pieces, so a
request never waits long for it. Only drafts come from the corpus: what is
searched changes how fast an answer is written, never the answer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
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
#: Characters a request tokenizes at most of text that nothing tokenized
#: before (about 20 ms with the default model; the rest is left to ``prepare``).
REQUEST_CHARS = 16_000
#: Characters ``prepare`` tokenizes between two looks at its ``stop``.
PIECE_CHARS = 16_000


@dataclass(frozen=True)
class DocumentSnapshot:
    """What the corpus needs of an open document (taken on the event loop)."""

    uri: str
    #: The document's ``revision`` (not the client's version, which restarts at a reopen).
    revision: int
    text: str


class CorpusCache:
    """Tokenized open documents for one model (see the module docstring)."""

    def __init__(self) -> None:
        self._model: Model | None = None
        self._docs: dict[str, tuple[int, int, list[int]]] = {}  # uri -> (version, len, tokens)
        self._regions: OrderedDict[str, list[int]] = OrderedDict()
        #: What the latest ``collect`` left untokenized: region texts, document snapshots.
        self._wanted: list[str | DocumentSnapshot] = []
        #: Characters the ``collect`` in progress may still tokenize (``None``: no limit).
        self._left: int | None = None

    def _reset_for(self, model: Model) -> None:
        if self._model is not model:
            self._model = model
            self._docs.clear()
            self._regions.clear()

    def _affordable(self, chars: int) -> bool:
        """Whether the ``collect`` in progress may tokenize ``chars`` more (then spent)."""
        if self._left is None:
            return True
        if chars > self._left:
            return False
        self._left -= chars
        return True

    def _document(self, model: Model, snap: DocumentSnapshot) -> list[int] | None:
        """``snap``'s tokens, or an earlier version's while it waits for ``prepare``."""
        entry = self._docs.get(snap.uri)
        if entry is not None and entry[0] == snap.revision and entry[1] == len(snap.text):
            return entry[2]
        if self._affordable(min(len(snap.text), MAX_DOC_CHARS)):
            tokens = model.tokenize(sanitize(_doc_head(snap)), add_bos=False)
            return self._keep_document(snap, tokens)
        self._wanted.append(snap)
        return entry[2] if entry is not None else None

    def _keep_document(self, snap: DocumentSnapshot, tokens: list[int]) -> list[int]:
        self._docs[snap.uri] = (snap.revision, len(snap.text), tokens)
        return tokens

    def _region(self, model: Model, text: str, *, near_start: bool = False) -> list[int]:
        """``text``'s tokens; past the budget, those of its part next to the window.

        ``near_start``: the window lies before ``text`` (the region below it).
        A part is at most half of ``REQUEST_CHARS``: the other region's share.
        """
        tokens = self._regions.get(text)
        if tokens is not None:
            self._regions.move_to_end(text)
            return tokens
        if not self._affordable(len(text)):
            self._wanted.append(text)
            room = min(self._left or 0, REQUEST_CHARS // 2)  # the other region's share kept
            text = text[:room] if near_start else text[len(text) - room :]
            if not text.strip() or not self._affordable(len(text)):
                return []
        return self._keep_region(text, model.tokenize(sanitize(text), add_bos=False))

    def _keep_region(self, text: str, tokens: list[int]) -> list[int]:
        self._regions[text] = tokens
        self._regions.move_to_end(text)
        while len(self._regions) > _REGION_CACHE:
            self._regions.popitem(last=False)
        return tokens

    def suffix(self, model: Model, text: str, offset: int) -> list[int]:
        """Tokens of the text after the cursor (its first ``MAX_SUFFIX_CHARS``)."""
        self._reset_for(model)
        after = text[offset : offset + MAX_SUFFIX_CHARS]
        if not after.strip():
            return []
        self._left = None
        return self._region(model, after)

    def collect(
        self,
        model: Model,
        *,
        text: str,
        cut: int,
        suffix_start: int,
        others: Sequence[DocumentSnapshot] = (),
        budget: int | None = REQUEST_CHARS,
    ) -> list[list[int]]:
        """Corpus for a prompt whose window is ``text[cut:suffix_start]``.

        The current document contributes what the prompt does not hold: the
        text below the window (from ``suffix_start``) and above it (before
        ``cut``); other open documents contribute their text. At most
        ``budget`` characters are tokenized (``None``: all); what is left
        waits for ``prepare``.
        """
        self._reset_for(model)
        self._wanted = []
        self._left = budget
        corpus: list[list[int]] = []
        below = text[suffix_start : suffix_start + MAX_REGION_CHARS]
        if len(below.strip()) > 8:
            corpus.append(self._region(model, below, near_start=True))
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
                tokens = self._document(model, snap)
                if tokens is not None:
                    corpus.append(tokens)
        self._left = None
        return [seq for seq in corpus if len(seq) > 2]

    def prepare(
        self,
        model: Model,
        stop: Callable[[], bool],
        *,
        text: str,
        cut: int,
        suffix_start: int,
        others: Sequence[DocumentSnapshot] = (),
    ) -> list[list[int]] | None:
        """Idle time: tokenize all that ``collect`` searches there; its corpus, ``None`` if stopped.

        A piece of ``PIECE_CHARS`` at a time, ``stop()`` asked between pieces.
        """

        def tokenized() -> list[list[int]]:  # and what is not: ``self._wanted``
            return self.collect(
                model, text=text, cut=cut, suffix_start=suffix_start, others=others, budget=0
            )

        tokenized()
        for item in self._wanted:
            piece_text = _doc_head(item) if isinstance(item, DocumentSnapshot) else item
            tokens = _tokenize_pieces(model, piece_text, stop)
            if tokens is None:
                return None
            if isinstance(item, DocumentSnapshot):
                self._keep_document(item, tokens)
            else:
                self._keep_region(item, tokens)
        return tokenized()


def _doc_head(snap: DocumentSnapshot) -> str:
    """The part of another document that is searched (``MAX_DOC_CHARS``)."""
    return snap.text[:MAX_DOC_CHARS]


def _tokenize_pieces(model: Model, text: str, stop: Callable[[], bool]) -> list[int] | None:
    """``text``'s tokens, tokenized in pieces that end at line ends; ``None`` if ``stop()``."""
    tokens: list[int] = []
    start = 0
    while start < len(text):
        if stop():
            return None
        end = min(len(text), start + PIECE_CHARS)
        if end < len(text):
            end = text.rfind("\n", start, end) + 1 or end
        tokens += model.tokenize(sanitize(text[start:end]), add_bos=False)
        start = end
    return tokens

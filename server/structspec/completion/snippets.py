"""Project context: the snippets of other files most similar to the text at the cursor.

Copilot's neighbour-file snippets, in small: the last ``QUERY_LINES`` lines
before the cursor are the query; every other open document is cut into windows
of ``WINDOW_LINES`` lines every ``STEP_LINES`` lines; a window's score is the
Jaccard similarity of its identifier set with the query's. The best window of
each document competes, the best few above ``MIN_SCORE`` are kept.

Stability is what makes this cheap: the snippets sit in the prompt before the
window, so any change to them re-evaluates the whole window. ``SnippetChooser``
therefore chooses again only when the cursor's line moves more than
``RECHOOSE_LINES`` lines from where they were chosen, or the set of other
documents (or one of their revisions) changes; while the user types in one
place the same snippets come back and the KV cache keeps them. A document's
*top* (its text from the start, pre-warmed so that a cursor anywhere in it
finds its window cached) keeps the snippets chosen for it for every cursor in
it: snippets chosen at the cursor would put other tokens before the top's and
evaluate them all again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Lines before the cursor that make the query.
QUERY_LINES = 20
#: Lines per candidate window of another document, and the stride between windows.
WINDOW_LINES = 20
STEP_LINES = 10
#: Lines of another document looked at (its head), so a huge file costs little.
MAX_DOC_LINES = 4000
#: Characters of a line looked at and quoted (a minified line is no useful snippet).
MAX_LINE_CHARS = 400
#: Snippets kept at most, and the least similarity worth a place in the prompt.
MAX_SNIPPETS = 3
MIN_SCORE = 0.1
#: How far the cursor's line may move before the snippets are chosen again.
RECHOOSE_LINES = 24
#: Other documents searched at most, the most recently used first (``neighbours``
#: come in that order): a choice scores every window of each, and 200 open files
#: of 100 KB made the first request after a switch of files cost 1.3-1.5 s.
MAX_NEIGHBOURS = 24

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Snippet:
    """Lines ``text`` of the document ``uri`` (``path``: its file name for the prompt)."""

    uri: str
    path: str
    text: str
    score: float


@dataclass(frozen=True)
class Neighbour:
    """An open document the snippets may come from (a snapshot taken on the event loop)."""

    uri: str
    path: str
    #: The document's ``revision`` (not the client's version, which restarts at a reopen).
    revision: int
    text: str


def _words(lines: Sequence[str]) -> frozenset[str]:
    return frozenset(w for line in lines for w in _WORD.findall(line))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """``|a & b| / |a | b|`` (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def query_lines(text: str, offset: int) -> list[str]:
    """The ``QUERY_LINES`` lines up to the cursor (its own line included)."""
    start = offset
    for _ in range(QUERY_LINES):
        nl = text.rfind("\n", 0, start)
        if nl < 0:
            start = 0
            break
        start = nl
    return text[start:offset].split("\n")


def best_windows(
    query: Sequence[str], neighbours: Sequence[Neighbour], limit: int = MAX_SNIPPETS
) -> list[Snippet]:
    """The best window of each neighbour, the ``limit`` best overall, best first."""
    want = _words(query)
    if not want:
        return []
    found: list[Snippet] = []
    for doc in neighbours:
        lines = [ln[:MAX_LINE_CHARS] for ln in doc.text.split("\n", MAX_DOC_LINES)[:MAX_DOC_LINES]]
        best: tuple[float, int] = (0.0, 0)
        for start in range(0, max(1, len(lines) - WINDOW_LINES + STEP_LINES), STEP_LINES):
            score = jaccard(want, _words(lines[start : start + WINDOW_LINES]))
            if score > best[0]:
                best = (score, start)
        score, start = best
        if score >= MIN_SCORE:
            text = "\n".join(lines[start : start + WINDOW_LINES]).strip("\n")
            found.append(Snippet(doc.uri, doc.path, text, round(score, 6)))
    found.sort(key=lambda s: (-s.score, s.uri))
    return found[:limit]


#: A choice of snippets: the cursor's line it was made at, the hash of the other
#: documents' revisions then (``_revisions``), and the snippets.
_Choice = tuple[int, int, list[Snippet]]


def _revisions(uri: str, neighbours: Sequence[Neighbour]) -> int:
    """The other open documents' revisions, as one number to compare.

    A hash, not the pairs: each open document's choice would hold every other's
    (URI, revision), which grows with the square of the documents open (320,000
    pairs, 20 MB, at 800). A collision (2^-64) costs a stale choice of context.
    """
    return hash(tuple(sorted((n.uri, n.revision) for n in neighbours if n.uri != uri)))


class SnippetChooser:
    """Snippets per document, chosen again only on a coarse move (see the module docstring)."""

    def __init__(self, rechoose_lines: int = RECHOOSE_LINES) -> None:
        self.rechoose_lines = rechoose_lines
        # uri -> (line the choice was made at, neighbour revisions, snippets)
        self._chosen: dict[str, _Choice] = {}
        # uri -> the choice made for the document's top (at its last line)
        self._tops: dict[str, _Choice] = {}
        self.choices = 0  # how many times snippets were actually (re)computed

    def choose(
        self,
        uri: str,
        text: str,
        offset: int,
        neighbours: Sequence[Neighbour],
        *,
        top: bool = False,
    ) -> list[Snippet]:
        """The snippets for a cursor at ``offset`` of ``uri`` (see the module docstring).

        ``top``: the prompt is the document's top, from its start to ``offset``;
        a cursor above that line then gets the same snippets (while the other
        documents stay as they were).
        """
        line = text.count("\n", 0, offset)
        searched = [n for n in neighbours if n.uri != uri][:MAX_NEIGHBOURS]
        revisions = _revisions(uri, searched)
        held = self._tops.get(uri)
        if not top and held is not None and held[1] == revisions and line <= held[0]:
            return held[2]
        previous = self._chosen.get(uri)
        if (
            previous is not None
            and previous[1] == revisions
            and abs(previous[0] - line) <= self.rechoose_lines
        ):
            snippets = previous[2]
        else:
            snippets = best_windows(query_lines(text, offset), searched)
            self.choices += 1
            # Keep choices only for documents still open (``neighbours`` are all the others).
            live = {n.uri for n in neighbours} | {uri}
            self._chosen = {u: c for u, c in self._chosen.items() if u in live}
            self._tops = {u: c for u, c in self._tops.items() if u in live}
            self._chosen[uri] = (line, revisions, snippets)
        if top:
            self._tops[uri] = (line, revisions, snippets)
        return snippets

"""The open documents' tokens the draft sources search (``completion/corpus.py``)."""

from __future__ import annotations

from structspec.completion.corpus import MAX_DOCS, CorpusCache, DocumentSnapshot
from structspec.model.standin import StandInModel


def test_only_the_documents_searched_stay_tokenized() -> None:
    """A session with hundreds of open documents: each that was once among the latest
    stayed tokenized while open (517,000 tokens held at 800 open documents)."""
    model = StandInModel()
    cache = CorpusCache()
    docs = [
        DocumentSnapshot(f"file:///m{i}.py", 1, f"def f{i}(x):\n    return x + {i}\n")
        for i in range(40)
    ]
    for start in range(0, 40, 4):  # the user moves on: other documents are the latest
        latest = docs[start:] + docs[:start]
        corpus = cache.collect(model, text="x = 1\n", cut=0, suffix_start=6, others=latest)
        assert len(corpus) == MAX_DOCS  # the latest are searched
        assert set(cache._docs) == {d.uri for d in latest[:MAX_DOCS]}

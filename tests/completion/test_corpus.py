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


class _Counting(StandInModel):
    """The stand-in, counting the characters it is asked to tokenize."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
        self.chars += len(text)
        return super().tokenize(text, add_bos=add_bos)


def test_a_request_tokenizes_little_and_idle_time_the_rest() -> None:
    """Opening a dozen large files must not cost the first request seconds of
    tokenizing: it tokenizes at most ``REQUEST_CHARS`` (the regions' parts next to
    the window), searches what is tokenized, and ``prepare`` does the rest, after
    which a request tokenizes nothing and gets the same lists."""
    from structspec.completion.corpus import REQUEST_CHARS

    model = _Counting()
    cache = CorpusCache()
    line = "value = compute(value, step)\n"
    text = line * 3000  # 87,000 characters
    others = [DocumentSnapshot(f"file:///o{i}.py", 1, f"x{i} = {i}\n" * 5000) for i in range(3)]
    where = {"text": text, "cut": 40_000, "suffix_start": 45_000, "others": others}

    first = cache.collect(model, **where)
    assert 0 < model.chars <= REQUEST_CHARS
    assert len(first) == 2  # the regions' near parts; no other document yet
    below = model.tokenize(text[45_000 : 45_000 + REQUEST_CHARS // 2], add_bos=False)
    assert first[0] == below  # the part of the region below next to the window

    model.chars = 0
    asked = []
    assert cache.prepare(model, lambda: asked.append(1) or len(asked) > 3, **where) is None
    ready = cache.prepare(model, lambda: False, **where)
    assert ready is not None and len(ready) == 5  # both regions whole, three documents
    assert ready[0] == model.tokenize(text[45_000:109_000], add_bos=False)

    model.chars = 0
    again = cache.collect(model, **where)
    assert model.chars == 0 and all(a is b for a, b in zip(again, ready, strict=True))


def test_a_changed_document_is_searched_by_its_earlier_tokens_until_prepared() -> None:
    model = _Counting()
    cache = CorpusCache()
    old = DocumentSnapshot("file:///o.py", 1, "alpha = 1\n" * 4000)
    where = {"text": "x = 1\n", "cut": 0, "suffix_start": 6}
    assert cache.prepare(model, lambda: False, others=[old], **where) is not None
    earlier = cache.collect(model, others=[old], **where)[0]

    new = DocumentSnapshot("file:///o.py", 2, "alpha = 2\n" * 4000)
    model.chars = 0
    assert cache.collect(model, others=[new], **where) == [earlier]  # too long to tokenize now
    assert model.chars == 0
    cache.prepare(model, lambda: False, others=[new], **where)
    now = cache.collect(model, others=[new], **where)[0]
    assert now == model.tokenize(new.text, add_bos=False) != earlier

    small = DocumentSnapshot("file:///o.py", 3, "alpha = 3\n")  # within the budget: at once
    assert cache.collect(model, others=[small], **where) == [model.tokenize(small.text, False)]

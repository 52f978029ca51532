"""MotifSource: abstraction of lines, replay with the current bindings."""

from __future__ import annotations

from tests.helpers.syntax import WordModel, context, draft_text

from structspec.drafts.base import DraftContext
from structspec.drafts.motif import MotifSource
from structspec.syntax.table import load_table


def render(model: WordModel, src: MotifSource, text: str) -> str:
    """The abstract form of ``text`` as ``[I0 = I0.I1]``."""
    symbols, _ = src.abstract(model.tokenize(text, add_bos=False))
    out = []
    for sym in symbols:
        if sym >= 0:
            out.append(model.pieces[sym])
        else:
            k, space = divmod(-sym - 2, 2)
            out.append((" " if space else "") + f"I{k}")
    return "[" + "".join(out) + "]"


def test_abstraction_of_identifiers(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    src._set_language(load_table().for_language_id("python"))
    assert render(words, src, "current = current.next") == "[I0 = I0.I1]"
    assert render(words, src, "node = node.left") == "[I0 = I0.I1]"
    assert render(words, src, "self.name = name") == "[self.I0 = I0]"
    assert render(words, src, "a[i], a[j] = a[j], a[i]") == "[I0[I1], I0[I2] = I0[I2], I0[I1]]"
    assert render(words, src, "for x in range(10):") == "[for I0 in range(10):]"
    assert render(words, src, "return None") == "[return None]"


def test_keywords_follow_the_language(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = "SELECT name FROM users WHERE id = 1\nSELECT title FROM"
    draft = src.propose(context(words, text, "sql"))
    assert render(words, src, "SELECT name FROM users") == "[SELECT I0 FROM I1]"
    assert draft is not None and draft_text(words, draft) == " users WHERE id = 1\n"
    assert draft.tier.endswith("+free")


def test_replay_with_current_bindings(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = (
        "class P:\n    def __init__(self, name, age):\n        self.name = name\n        self.age ="
    )
    draft = src.propose(context(words, text, "python"))
    assert draft is not None
    assert draft_text(words, draft) == " age\n        "  # newline and next indentation too
    assert draft.tier == "p3" and draft.source == "motif"


def test_replay_swap(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = (
        "def f(a, i, j):\n    a[i], a[j] = a[j], a[i]\n    return a\n\n"
        "def g(v, lo, hi):\n    v[lo], v[hi] ="
    )
    assert draft_text(words, src.propose(context(words, text, "python"))) == " v[hi], v[lo]\n    "


def test_unbound_placeholder_replays_the_motifs_name(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = "while current:\n    current = current.next\nwhile node:\n    node = node."
    draft = src.propose(context(words, text, "python"))
    assert draft is not None and draft_text(words, draft) == "next\n"
    assert draft.tier == "l2:p3+free"


def test_no_draft_at_line_start_or_without_motif(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    assert src.propose(context(words, "x = 1\n", "python")) is None
    assert src.propose(context(words, "x = 1\n    ", "python")) is None
    assert src.propose(context(words, "x = 1\nprint(", "python")) is None
    assert src.propose(context(words, "x", "python", max_tokens=0)) is None


def test_max_tokens_limits_the_draft(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = "def f(a, i, j):\n    a[i], a[j] = a[j], a[i]\n\ndef g(v, lo, hi):\n    v[lo], v[hi] ="
    draft = src.propose(context(words, text, "python", max_tokens=3))
    assert draft is not None and draft_text(words, draft) == " v[hi"


def test_motifs_grow_with_the_output_and_come_from_the_corpus(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    toks = words.tokenize("def f(p):\n")
    ctx = DraftContext(
        model=words, tokens=toks, n_prompt=len(toks), max_tokens=8, language="python", generation=1
    )
    assert src.propose(ctx) is None
    for t in words.tokenize("    p.x = p.x + 1\n    q.", add_bos=False):  # the output so far
        ctx.tokens.append(t)
        src.propose(ctx)
    assert draft_text(words, src.propose(ctx)) == "x = q.x + 1\n"
    other = words.tokenize("total = total + step\n")
    ctx2 = DraftContext(
        model=words,
        tokens=words.tokenize("count = count"),
        n_prompt=3,
        max_tokens=8,
        language="python",
        generation=2,
        corpus=[other],
    )
    assert draft_text(words, src.propose(ctx2)) == " + step\n"


def test_cost_is_a_few_dictionary_hits(words: WordModel) -> None:
    """Smoke check that a long buffer is indexed once, not per call."""
    src = MotifSource(words, single_line_min=1)
    body = "".join(f"    item{i} = item{i}.value + {i}\n" for i in range(300))
    toks = words.tokenize(body + "    other = other.")
    ctx = DraftContext(
        model=words, tokens=toks, n_prompt=len(toks), max_tokens=8, language="python", generation=3
    )
    first = src.propose(ctx)
    indexed = len(src._index)
    for _ in range(50):
        assert src.propose(ctx) == first
    assert len(src._index) == indexed
    assert draft_text(words, first) == "value + 299\n    "


def test_two_line_motif_carries_bindings_across_lines(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    text = "def area(w, h):\n    return w * h\n\ndef volume(depth, size):\n    return depth *"
    draft = src.propose(context(words, text, "python"))
    assert draft is not None and draft_text(words, draft) == " size\n"  # bound on the line before
    assert draft.tier == "l2:p3"
    # Line by line, the name after * would be a guess: the motif's own.
    single = MotifSource(words, single_line_min=1)
    single._index2 = _NoIndex()
    draft = single.propose(context(words, text, "python"))
    assert draft is not None and draft_text(words, draft) == " h\n"
    assert draft.tier == "p3+free"


class _NoIndex(dict):
    def __setitem__(self, key, value) -> None:
        pass


def test_plain_repeats_are_left_to_lookup(words: WordModel) -> None:
    src = MotifSource(words, single_line_min=1)
    assert src.propose(context(words, "x = x + 1\ny = 2\nx = x", "python")) is None


def test_short_one_line_prefixes_need_the_line_before_by_default(words: WordModel) -> None:
    text = "x = x + 1\ny = 2\nnode = node"
    assert MotifSource(words).propose(context(words, text, "python")) is None
    draft = MotifSource(words, single_line_min=1).propose(context(words, text, "python"))
    assert draft_text(words, draft) == " + 1\n"


def test_line_start_motif_predicts_the_next_line(words: WordModel) -> None:
    src = MotifSource(words)
    text = "def f(x, y):\n    x.a = 1\n    x.b = 1\n\n    y.a = 1\n"
    draft = src.propose(context(words, text, "python"))
    assert draft is not None and draft.tier == "l2:p0+free"
    assert draft_text(words, draft) == "    y.b = 1\n"  # indentation, then the line re-bound
    draft = src.propose(context(words, text + "    ", "python"))
    assert draft is not None and draft_text(words, draft) == "y.b = 1\n"


def test_the_index_is_bounded_by_the_symbols_of_its_keys(words: WordModel, monkeypatch) -> None:
    """A line of n tokens adds n keys of 1..n symbols: counting entries alone let long
    lines grow the index to tens of megabytes (``serve``: +200 MB over a day's requests)."""
    from structspec.drafts import motif

    monkeypatch.setattr(motif, "MAX_KEY_SYMBOLS", 2_000)
    src = MotifSource(words, single_line_min=1)
    held = []
    for i in range(40):  # distinct long lines, each a new motif
        line = " + ".join(f"v{i}x{k}" for k in range(12 + i % 5))
        src.propose(context(words, f"total{i} = {line}\ny = 1\n", "python"))
        held.append(sum(len(k) for k in [*src._index, *src._index2]))
        assert src._symbols >= held[-1]  # counted as added: at least what the keys hold
    assert max(held) <= 2_000 + 2 * 60 * 60  # the cap, and one line's keys past it
    assert any(b < a for a, b in zip(held, held[1:], strict=False))  # it started over


def test_a_large_new_corpus_is_scanned_a_slice_per_generation(
    words: WordModel, monkeypatch
) -> None:
    """A new corpus is scanned ``CORPUS_SCAN_PER_GENERATION`` tokens per generation
    (``propose`` is on the decode path); ``prepare`` scans the rest at idle time."""
    from structspec.drafts import motif

    filler = words.tokenize("a = b\n" * 60, add_bos=False)
    other = filler + words.tokenize("total = total + step\n", add_bos=False)
    monkeypatch.setattr(motif, "CORPUS_SCAN_PER_GENERATION", len(filler) // 2)

    def ask(src: MotifSource, generation: int) -> str | None:
        toks = words.tokenize("count = count")
        c = DraftContext(
            model=words,
            tokens=toks,
            n_prompt=len(toks),
            max_tokens=8,
            language="python",
            generation=generation,
            corpus=[other],
        )
        d = src.propose(c)
        return None if d is None else draft_text(words, d)

    src = MotifSource(words, single_line_min=1)
    assert ask(src, 1) is None  # the motif's line is not scanned yet
    assert src._corpus[id(other)][1].pos == len(filler) // 2
    assert ask(src, 2) is None
    assert ask(src, 3) == " + step\n"

    ready = MotifSource(words, single_line_min=1)
    toks = words.tokenize("count = count")
    c = DraftContext(words, toks, len(toks), language="python", corpus=[other])
    ready.prepare(c, lambda: False)
    assert ask(ready, 1) == " + step\n"

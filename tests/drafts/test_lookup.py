"""The lookup source: longest suffix match in the context and the corpus."""

from structspec.drafts.base import DraftContext
from structspec.drafts.lookup import LookupSource
from structspec.model.standin import StandInModel


def ctx(tokens, corpus=(), generation=1, max_tokens=8):
    return DraftContext(
        StandInModel(),
        list(tokens),
        len(tokens),
        max_tokens=max_tokens,
        corpus=corpus,
        generation=generation,
    )


def test_continues_longest_match():
    src = LookupSource()
    # ... 1 2 3 -> 4 5 ; ... 9 2 3 -> 7 7 ; current suffix 1 2 3 must pick 4 5
    d = src.propose(ctx([1, 2, 3, 4, 5, 9, 2, 3, 7, 7, 0, 1, 2, 3]))
    assert d is not None and d.tokens[:2] == (4, 5) and d.tier == "m3"


def test_most_recent_of_equal_matches():
    src = LookupSource()
    d = src.propose(ctx([2, 3, 4, 8, 2, 3, 5, 8, 2, 3]))
    assert d is not None and d.tokens[0] == 5


def test_no_match_no_draft():
    assert LookupSource().propose(ctx([1, 2, 3, 4])) is None


def test_corpus_is_searched():
    d = LookupSource().propose(ctx([7, 8, 9], corpus=[[1, 8, 9, 10, 11]]))
    assert d is not None and d.tokens[:2] == (10, 11)


def test_incremental_index_and_reset_per_generation():
    src = LookupSource()
    c = ctx([1, 2, 3, 1, 2])
    assert src.propose(c).tokens[0] == 3
    c.tokens += [3, 9, 1, 2]
    assert src.propose(c).tokens[0] in (3, 9)
    assert src.propose(ctx([5, 6], generation=2)) is None


def test_respects_max_tokens():
    d = LookupSource().propose(ctx([1, 2, 3, 4, 5, 6, 7, 1, 2], max_tokens=2))
    assert d is not None and d.tokens == (3, 4)


def test_conflicting_occurrence_marks_the_tier():
    # 1 2 3 was followed by 4 once and by 9 once: the most recent wins, tier says conflict
    d = LookupSource().propose(ctx([1, 2, 3, 4, 0, 1, 2, 3, 9, 0, 1, 2, 3]))
    assert d is not None and d.tokens[0] == 9 and d.tier == "m4x"
    d = LookupSource().propose(ctx([1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3]))
    assert d is not None and d.tier == "m8"  # both earlier occurrences agree


def test_copy_running_into_the_present_continues_from_its_draft():
    # 5 6 7 repeats with period 3: the copy of the last period is continued past the end
    d = LookupSource().propose(ctx([1, 5, 6, 7, 5, 6, 7, 5, 6], max_tokens=7))
    assert d is not None and d.tokens == (7, 5, 6, 7, 5, 6, 7)


def test_corpus_copy_stops_at_the_end_of_its_sequence():
    d = LookupSource().propose(ctx([7, 8, 9], corpus=[[1, 8, 9, 10, 11]], max_tokens=6))
    assert d is not None and d.tokens == (10, 11)


def test_match_in_the_output_is_marked():
    tokens = [1, 2, 3, 4, 0, 6, 1, 2, 3]
    in_prompt = LookupSource().propose(DraftContext(StandInModel(), list(tokens), len(tokens)))
    in_output = LookupSource().propose(DraftContext(StandInModel(), list(tokens), 2))
    assert in_prompt is not None and in_prompt.tier == "m3"
    assert in_output is not None and in_output.tier == "m3o"


def test_two_token_match_with_another_continuation_is_a_conflict():
    d = LookupSource().propose(ctx([5, 1, 2, 3, 6, 1, 2, 4, 7, 1, 2]))
    assert d is not None and d.tokens[0] == 4 and d.tier == "m2x"


def test_an_occurrence_that_continues_differently_later_marks_the_fork():
    # 1..6 was followed by 7 8 9 once and by 7 8 5 later: the most recent (and
    # longest) match drafts 7 8 5, and the other says the copy may break at 5
    head = [1, 2, 3, 4, 5, 6]
    d = LookupSource().propose(ctx([*head, 7, 8, 9, 0, *head, 7, 8, 5, 0, *head]))
    assert d is not None and d.tokens[:3] == (7, 8, 5) and d.tier == "m6" and d.fork == 2


def test_a_short_witness_does_not_mark_a_fork():
    # only 3 tokens of the other occurrence match: too weak a witness past the first token
    head = [0, 1, 2, 3, 4, 5, 6]
    d = LookupSource().propose(ctx([9, 4, 5, 6, 7, 8, 1, *head, 7, 2, *head]))
    assert d is not None and d.tokens[:2] == (7, 2) and d.fork is None


def test_occurrences_that_agree_mark_no_fork():
    head = [1, 2, 3, 4, 5, 6]
    d = LookupSource().propose(ctx([*head, 7, 8, 9, 0, *head, 7, 8, 9, 0, *head]))
    assert d is not None and d.fork is None and d.tier == "m16"


def test_each_drafted_token_carries_how_the_copied_text_came_about():
    # 1 2 3 was followed by 4, then by 5: the copy drafts from the later one, whose 5
    # broke the earlier copy (x); 9 1 2 had no earlier 3-token match (-); its 3 was
    # predicted by one (c); past the text the copy runs into its own draft (o)
    d = LookupSource().propose(ctx([1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 2, 3]))
    assert d is not None and d.tokens == (5, 9, 1, 2, 3, 5, 9, 1)
    assert d.provenance == "x---cooo"
    assert d.head(3).provenance == "x--"


def test_a_long_earlier_match_strengthens_the_provenance():
    head = [1, 2, 3, 4, 5, 6]
    d = LookupSource().propose(ctx([*head, 7, 0, *head, 7, 8, 0, *head], max_tokens=2))
    # the copy drafts 7 8; that 7 was predicted after 6 matching tokens (C), the 8 broke
    # the earlier copy, which had continued with 0 after as long a match (X)
    assert d is not None and d.tokens == (7, 8) and d.provenance == "CX"


def test_a_corpus_copy_judges_the_provenance_in_its_own_sequence():
    d = LookupSource().propose(ctx([7, 8, 9], corpus=[[1, 8, 9, 10, 1, 8, 9, 10]]))
    assert d is not None and d.tokens == (10,) and d.provenance == "c"


def test_a_large_new_corpus_is_indexed_a_slice_per_generation(monkeypatch) -> None:
    """``propose`` is on the decode path: a new corpus of tens of thousands of tokens
    (the first request after opening a dozen files) is indexed a slice per generation,
    searched once whole; idle time (``prepare``) indexes the rest."""
    from structspec.drafts import lookup

    monkeypatch.setattr(lookup, "CORPUS_INDEX_PER_GENERATION", 100)
    big = [20 + (i % 50) for i in range(250)] + [1, 8, 9, 10, 11]  # the match at its end
    src = LookupSource()
    assert src.propose(ctx([7, 8, 9], corpus=[big], generation=1)) is None  # 100 indexed
    assert src._corpus[id(big)][1].indexed == 100
    assert src.propose(ctx([7, 8, 9], corpus=[big], generation=2)) is None  # 200
    d = src.propose(ctx([7, 8, 9], corpus=[big], generation=3))  # whole: searched
    assert d is not None and d.tokens[:2] == (10, 11)

    ready = LookupSource()
    ready.prepare(ctx([7, 8, 9], corpus=[big]), lambda: False)
    d = ready.propose(ctx([7, 8, 9], corpus=[big], generation=1))
    assert d is not None and d.tokens[:2] == (10, 11)


def test_prepare_stops_when_asked_and_goes_on_later(monkeypatch) -> None:
    from structspec.drafts import lookup

    monkeypatch.setattr(lookup, "PREPARE_SLICE", 64)
    big = list(range(3, 300)) + [1, 8, 9, 10, 11]
    src = LookupSource()
    asked = []
    src.prepare(ctx([7, 8, 9], corpus=[big]), lambda: asked.append(1) or len(asked) > 2)
    assert src._corpus[id(big)][1].indexed == 128  # two slices, then stopped
    src.prepare(ctx([7, 8, 9], corpus=[big]), lambda: False)
    assert src._corpus[id(big)][1].indexed == len(big)

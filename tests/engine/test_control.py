"""The cost model, AcceptanceEstimator and MarginGate on synthetic inputs."""

from __future__ import annotations

import pytest

from structspec.drafts.base import Draft, DraftContext
from structspec.engine.control import (
    AcceptanceEstimator,
    CostModel,
    DraftPlanner,
    MarginGate,
    ThreadCosts,
    measure_cost,
)
from structspec.model.standin import StandInModel

# A CPU-shaped table: gemma-3-270m Q4_K_M, 2 threads, ms per pass of n rows (the shape of
# docs/MEASUREMENTS.md: multiples of 4 rows are cheap; some sizes interpolated)
CPU = CostModel(
    (13.9, 24.8, 29.4, 31.2, 47.5, 51.7, 48.6, 45.5, 55.5, 65.5, 61.5, 57.4, 61.2, 65.0, 68.8, 72.6)
)


def test_no_draft_when_gain_below_one():
    # one token at p = 0.7: (1 + 0.7) / 24.8 < 1 / 13.9
    assert CPU.best_k([0.7]) == (0, 1.0)


def test_certain_long_draft_uses_cheap_row_count():
    k, gain = CPU.best_k([1.0] * 15)
    assert k == 15 and gain == pytest.approx(16 * 13.9 / 72.6)


def test_padding_to_a_multiple_of_four():
    # rows 8 cost less than rows 6 or 7 on this table
    assert CPU.padded_rows(6) == 8 and CPU.padded_rows(4) == 4 and CPU.padded_rows(16) == 16


def test_best_k_matches_brute_force():
    probs = [0.95, 0.9, 0.9, 0.8, 0.5, 0.5, 0.9, 0.9]
    best = max(
        range(0, 9),
        key=lambda k: (
            (1 + sum(_prod(probs[: i + 1]) for i in range(k)))
            / CPU.t(min(CPU.padded_rows(k + 1), 9))
        ),
    )
    assert CPU.best_k(probs)[0] == best


def _prod(xs):
    out = 1.0
    for x in xs:
        out *= x
    return out


def test_flat_costs_draft_everything_plausible():
    flat = CostModel.linear(10.0, 0.0)
    assert flat.best_k([0.3, 0.3, 0.3])[0] == 3


def test_cost_table_rejects_nonsense():
    with pytest.raises(ValueError):
        CostModel((1.0, 0.0))


def test_measure_cost_times_each_row_count():
    seen = []
    cost = measure_cost(lambda n: seen.append(n), rows=4, reps=2)
    assert cost.max_rows == 4 and seen.count(3) == 2


def test_thread_costs_follow_the_thread_count():
    full = CostModel((10.0, 20.0, 30.0, 40.0))
    one = CostModel((12.0, 40.0, 70.0, 100.0))
    threads = [4]
    costs = ThreadCosts(4, full, one, lambda: threads[0])
    assert costs.current() is full
    threads[0] = 1
    assert costs.current() is one
    threads[0] = 3  # two thirds of the way from one thread to four, row by row
    assert costs.current().ms == pytest.approx((32 / 3, 80 / 3, 130 / 3, 60.0))
    assert costs.current() is costs.current()  # computed once per count
    threads[0] = 9  # above the most: the all-threads table
    assert costs.current() is full


def test_adaptive_k_learns_per_position():
    c = AcceptanceEstimator({"s": 0.5}, prior_weight=1.0, decay=0.95)
    for _ in range(50):
        c.observe("s", drafted=4, accepted=2)  # positions 0, 1 accepted, 2 rejected, 3 unseen
    p = c.probs("s", 4)
    assert p[0] > 0.9 and p[1] > 0.9 and p[2] < 0.1
    assert p[3] == pytest.approx(p[2])  # never drafted: inherits the position before it


def test_unseen_positions_do_not_look_worse_than_seen_ones():
    c = AcceptanceEstimator({"s": 0.5}, prior_weight=3.0, decay=0.95)
    for _ in range(50):
        c.observe("s", drafted=3, accepted=3)
    assert min(c.probs("s", 15)) > 0.9


def test_tier_borrows_source_estimate():
    c = AcceptanceEstimator({"s": 0.5}, prior_weight=2.0, decay=0.95)
    for _ in range(30):
        c.observe("s:a", drafted=1, accepted=1)
    assert c.prob("s:b", 0) > 0.9  # the source's running estimate became the tier's prior


def test_entropy_gate_scales_by_margin():
    g = MarginGate()
    for _ in range(200):
        g.observe(0.2, accepted_first=False)
        g.observe(10.0, accepted_first=True)
    assert g.scale(0.2) < 0.5 < 1.0 < g.scale(10.0)


class Fixed:
    def __init__(self, name, tokens):
        self.name, self.tokens = name, tokens

    def propose(self, ctx):
        return Draft(tuple(self.tokens), self.name)

    def observe(self, draft, accepted):
        pass


def test_planner_picks_the_better_source_and_pads():
    controller = AcceptanceEstimator({"good": 0.97, "bad": 0.2})
    planner = DraftPlanner(CPU, controller)
    ctx = DraftContext(StandInModel(), [0, 5], 2)
    plan = planner.plan(ctx, [Fixed("bad", [3] * 15), Fixed("good", [4] * 15)], 15, 5.0)
    assert plan is not None and plan.draft.source == "good"
    rows = len(plan.draft.tokens) + 1
    assert CPU.padded_rows(rows) == rows  # no cheaper row count above it


def test_planner_respects_limit():
    planner = DraftPlanner(CostModel.linear(1.0, 0.0), AcceptanceEstimator({"good": 0.99}))
    ctx = DraftContext(StandInModel(), [0, 5], 2)
    plan = planner.plan(ctx, [Fixed("good", [4] * 15)], 3, 5.0)
    assert plan is not None and len(plan.draft.tokens) == 3
    assert planner.plan(ctx, [Fixed("good", [4] * 15)], 0, 5.0) is None


def test_declined_proposals_are_scored_by_the_text_that_followed() -> None:
    # "s" starts below break-even and is never sent, yet the text keeps doing what it
    # proposed: its estimate must rise until it is sent.
    planner = DraftPlanner(CPU, AcceptanceEstimator({"s": 0.5}))
    ctx = DraftContext(StandInModel(), [0, 5], 2)
    source = [Fixed("s", [4] * 8)]
    planner.start_generation()
    assert planner.plan(ctx, source, 15, 5.0) is None
    sent = None
    for _ in range(40):
        ctx.tokens.append(4)  # the model chose what "s" proposed
        plan = planner.plan(ctx, source, 15, 5.0)
        sent = sent or plan
    assert sent is not None and sent.draft.source == "s"
    assert planner.acceptance.prob("s", 0) > 0.6


def test_a_wrong_proposal_is_scored_at_its_first_wrong_token() -> None:
    planner = DraftPlanner(CPU, AcceptanceEstimator({"s": 0.5}, prior_weight=1.0))
    ctx = DraftContext(StandInModel(), [0, 5], 2)
    planner.plan(ctx, [Fixed("s", [4, 4, 4])], 15, 5.0)
    ctx.tokens += [4, 7]  # first token right, second wrong
    planner.plan(ctx, [], 15, 5.0)
    trials = planner.acceptance._trials["s"]
    hits = planner.acceptance._hits["s"]
    assert trials[:3] == [1.0, 1.0, 0.0] and hits[:2] == [1.0, 0.0]


def test_a_generation_behind_greedy_drafts_only_clear_wins():
    from structspec.engine.control import Plan

    # p = 0.66 over 3 tokens: gain (1 + .66 + .44 + .29) / 31.2 * 13.9 = 1.06
    planner = DraftPlanner(CPU, AcceptanceEstimator({"s": 0.66}, prior_weight=1e9))
    ctx = DraftContext(StandInModel(), [0, 5], 2)
    source = [Fixed("s", [4] * 3)]
    planner.start_generation()
    plan = planner.plan(ctx, source, 15, 5.0)
    assert plan is not None and 1.0 < plan.gain < 1.1
    planner.observe(plan, 0, 5.0)  # a 4-row pass that gave one token: behind greedy
    assert planner.balance_ms == pytest.approx(13.9 - 31.2)
    assert planner.plan(ctx, source, 15, 5.0) is None
    planner.observe(Plan(Draft((4,) * 15, "s"), 2.0), 15, 5.0)  # a long win: ahead again
    assert planner.balance_ms > 0 and planner.plan(ctx, source, 15, 5.0) is not None
    planner.start_generation()  # each generation keeps its own balance
    assert planner.balance_ms == 0.0


def test_token_class_gate_learns_where_copies_break() -> None:
    from structspec.engine.control import TokenClassGate

    model = StandInModel()
    word, digit = model.tokenize("alpha", add_bos=False)[0], model.tokenize("7", add_bos=False)[0]
    gate = TokenClassGate(weight=2.0)
    broken = Draft((word, digit, word), "s")
    assert gate.scales(model, broken) == [1.0, 1.0, 1.0]  # nothing learnt yet
    for _ in range(50):
        gate.observe(model, Draft((word, word, word), "s"), 3)  # words after words: accepted
        gate.observe(model, broken, 1)  # the number after a word broke the copy
    first, on_digit, after_digit = gate.scales(model, broken)
    assert first == pytest.approx(1.0, abs=0.05)  # first tokens: always accepted here
    assert on_digit < 0.5 and after_digit == 1.0  # a pair never seen: no evidence
    assert gate.scales(model, Draft((word, word, word), "s"))[1] > 1.0


def test_token_class_gate_learns_that_a_fork_breaks_copies() -> None:
    from structspec.engine.control import TokenClassGate

    model = StandInModel()
    word = model.tokenize("alpha", add_bos=False)[0]
    gate = TokenClassGate(weight=2.0)
    forked = Draft((word,) * 4, "s", fork=2)
    assert gate.classes(model, forked) == ["first:word", "agreed", "fork", "word>word"]
    for _ in range(50):
        gate.observe(model, Draft((word,) * 4, "s"), 4)  # plain copies hold
        gate.observe(model, forked, 2)  # the copy broke at the fork
    _, before, at_fork, _ = gate.scales(model, forked)
    assert at_fork < 0.5 < 1.0 < before
    assert gate.classes(model, forked.head(2)) == ["first:word", "word>word"]  # cut before it


def test_agreement_gate_trusts_sources_that_agree() -> None:
    from structspec.engine.control import AgreementGate

    gate = AgreementGate(weight=2.0)
    assert gate.scale("rules", "agree") == 1.0  # nothing learnt yet
    for _ in range(50):
        gate.observe("rules", "agree", True)
        gate.observe("rules", "disagree", False)
    assert gate.scale("rules", "disagree") < 0.5 < 1.0 < gate.scale("rules", "agree")
    assert gate.scale("lookup", "agree") == 1.0  # per source


def test_token_class_gate_survives_long_decay() -> None:
    from structspec.engine.control import TokenClassGate

    model = StandInModel()
    word, digit = model.tokenize("alpha", add_bos=False)[0], model.tokenize("7", add_bos=False)[0]
    gate = TokenClassGate(weight=2.0, decay=0.5)  # counts rescale every few hundred tokens
    for _ in range(1000):
        gate.observe(model, Draft((word, word, word), "s"), 3)
        gate.observe(model, Draft((word, digit, word), "s"), 1)
    _, on_digit, _ = gate.scales(model, Draft((word, digit, word), "s"))
    assert 0.0 < on_digit < 0.9


def test_provenance_gate_learns_which_copied_tokens_hold() -> None:
    from structspec.engine.control import ProvenanceGate

    model = StandInModel()
    gate = ProvenanceGate(weight=2.0)
    broken = Draft((1, 2, 3), "lookup", provenance="ccx")
    assert gate.scales(model, broken) == [1.0, 1.0, 1.0]  # nothing learnt yet
    assert gate.classes(model, broken) == ["first:c", "c", "x"]
    for _ in range(50):
        gate.observe(model, Draft((1, 2, 3), "lookup", provenance="ccc"), 3)
        gate.observe(model, broken, 2)  # the token that broke an earlier copy breaks this one
    _, copied, changed = gate.scales(model, broken)
    assert changed < 0.5 < 1.0 < copied
    # a draft without provenance (another source) is not judged, nor learnt from
    assert gate.scales(model, Draft((1, 2, 3), "rules")) == [1.0, 1.0, 1.0]
    before = gate.scales(model, broken)
    gate.observe(model, Draft((1, 2, 3), "rules"), 0)
    assert gate.scales(model, broken) == before

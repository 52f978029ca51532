"""The replay: recorded greedy outputs through the real planner and sources, without decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

from structspec.bench.recording import Recording, record
from structspec.bench.replay import ReplayModel, replay
from structspec.config import Settings
from structspec.engine.control import CostModel
from structspec.model.standin import StandInModel
from structspec.runtime import assemble_engine

RECORDING = Path(__file__).resolve().parents[1] / "data" / "humaneval-40x128.replay.json"

TEXTS = (
    "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
    "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [",
)


def _recording() -> Recording:
    model = StandInModel(eos_bias=-3.0)
    prompts = [(f"p{i}", "python", model.tokenize(t)) for i, t in enumerate(TEXTS)]
    cost = CostModel.linear(1.0, 0.2)
    return record(model, prompts, max_tokens=48, cost_ms=cost.ms, threads=1)


def _engine_factory(model, cost):
    return assemble_engine(model, Settings(model="standin", sources=("lookup", "motif")), cost)


def test_a_recording_round_trips_through_json(tmp_path) -> None:
    rec = _recording()
    path = tmp_path / "r.json"
    path.write_text(rec.to_json())
    again = Recording.load(path)
    assert [p.output for p in again.prompts] == [p.output for p in rec.prompts]
    assert all(len(p.output) == len(p.margins) for p in again.prompts)


def test_replay_reproduces_the_output_and_is_deterministic() -> None:
    rec = _recording()
    vocab = StandInModel()
    first = replay(rec, vocab, _engine_factory)
    second = replay(rec, vocab, _engine_factory)
    assert first.mismatches == []  # every pass emits the recorded greedy tokens
    assert first.digest == second.digest and len(first.digest) == 64
    assert first.tokens == sum(len([t for t in p.output if t != 1]) for p in rec.prompts)
    assert first.drafted > 0 and first.passes < first.tokens  # drafts were accepted
    assert first.speedup > 1.0
    assert set(first.per_prompt) == {p.id for p in rec.prompts}
    assert first.slowest[1] == min(first.per_prompt.values()) > 0.0


def test_a_changed_planner_changes_the_hash() -> None:
    rec = _recording()
    vocab = StandInModel()
    base = replay(rec, vocab, _engine_factory)

    def costly_rows(model, cost):
        settings = Settings(model="standin", sources=("lookup", "motif"))
        return assemble_engine(model, settings, CostModel.linear(1.0, 0.9))

    changed = replay(rec, vocab, costly_rows)
    assert changed.mismatches == [] and changed.digest != base.digest


def test_rows_after_a_rejection_are_unknown() -> None:
    rec = _recording()
    model = ReplayModel(StandInModel())
    p = rec.prompts[0]
    model.expect(p)
    model.prefill(p.prompt[:-1])
    wrong = (p.output[0] + 1) % model.n_vocab
    rows = model.verify([p.prompt[-1], wrong, p.output[1]])
    assert rows.argmax[0] == p.output[0] and rows.argmax[1:] == [-1, -1]


@pytest.mark.model
def test_the_committed_recording_replays_exactly() -> None:
    """The HumanEval recording through today's planner and sources: the recorded output."""
    from structspec.runtime import open_model

    rec = Recording.load(RECORDING)
    vocab = open_model("", context_size=256, threads=1)
    assert vocab.name == rec.model

    def factory(model, cost):
        return assemble_engine(model, Settings(), cost)

    first = replay(rec, vocab, factory, prompts=rec.prompts[:8])
    second = replay(rec, vocab, factory, prompts=rec.prompts[:8])
    assert first.mismatches == [] and first.tokens == 8 * rec.max_tokens
    assert (first.digest, first.proposals_digest) == (second.digest, second.proposals_digest)
    assert first.drafted > 0


def test_the_oracle_reproduces_the_output_and_bounds_the_planner() -> None:
    rec = _recording()
    vocab = StandInModel()
    planner = replay(rec, vocab, _engine_factory)
    oracle = replay(rec, vocab, _engine_factory, oracle=True)
    assert oracle.mismatches == []
    assert oracle.drafted > 0
    # It sends only drafts it knows are accepted (padding aside), and beats the planner.
    assert oracle.accepted > 0 and oracle.speedup >= planner.speedup > 1.0


def test_the_replay_markdown_names_the_command_and_each_control() -> None:
    from structspec.bench.replay_report import replay_markdown

    rec = _recording()
    vocab = StandInModel()
    results = {
        c: replay(rec, vocab, _engine_factory, oracle=c == "oracle") for c in ("planner", "oracle")
    }
    text = replay_markdown(
        "structspec benchmark --replay r.json --oracle", [("r.json", rec, results)]
    )
    assert "`structspec benchmark --replay r.json --oracle`" in text
    assert f"{results['oracle'].speedup:.3f}x" in text and results["planner"].digest in text


def test_the_breakdown_accounts_for_every_pass_and_the_oracle_loses_nothing() -> None:
    from structspec.bench.replay import PASS_KINDS

    rec = _recording()
    vocab = StandInModel()
    planner = replay(rec, vocab, _engine_factory)
    assert set(planner.losses) <= set(PASS_KINDS)
    assert sum(kind.passes for kind in planner.losses.values()) == planner.passes
    sent = [kind for name, kind in planner.losses.items() if name != "plain"]
    assert sum(k.drafted for k in sent) == planner.drafted
    assert sum(k.passes for k in planner.by_length.values()) == sum(k.passes for k in sent)
    assert all(k.loss_ms >= 0.0 for k in planner.losses.values())
    oracle = replay(rec, vocab, _engine_factory, oracle=True)
    assert oracle.passes > 0 and sum(k.loss_ms for k in oracle.losses.values()) == 0.0


def test_best_rate_is_the_best_cut_of_any_proposal() -> None:
    from structspec.bench.replay import best_rate

    cost = CostModel((1.0, 2.0, 2.5, 2.5))
    assert best_rate(cost, [], (5, 6)) == 1.0  # nothing offered: a plain step
    assert best_rate(cost, [(9, 9)], (5, 6)) == 1.0  # nothing accepted
    # two tokens accepted: 3 tokens in a pass of 3 rows, padded to 4 only if the draft fills it
    assert best_rate(cost, [(5, 6)], (5, 6, 7)) == pytest.approx(3 / 2.5)
    assert best_rate(cost, [(5, 9), (5, 6, 7)], (5, 6, 7)) == pytest.approx(4 / 2.5)


def test_a_cost_table_file_replaces_the_recordings(tmp_path) -> None:
    import json

    from structspec.bench.recording import ReplayError, load_cost_table

    flat = [1.0 + 0.05 * n for n in range(16)]
    cache = tmp_path / "cache.json"
    cache.write_text(json.dumps({"model": "m.gguf", "threads": 2, "ms": flat}))
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(flat))
    assert load_cost_table(cache) == load_cost_table(bare) == CostModel(tuple(flat))
    for text in ("{}", '{"ms": [1, -2]}', '"fast"', "not json"):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ReplayError, match="cannot read cost table"):
            load_cost_table(bad)

    rec = _recording()
    vocab = StandInModel()
    own = replay(rec, vocab, _engine_factory)
    same = replay(rec, vocab, _engine_factory, cost=CostModel(rec.cost_ms))
    cheap = replay(rec, vocab, _engine_factory, cost=load_cost_table(bare))
    assert (same.digest, same.predicted_ms) == (own.digest, own.predicted_ms)
    assert cheap.mismatches == [] and cheap.digest != own.digest  # the planner plans with it
    assert cheap.greedy_ms == pytest.approx(1.0 * own.greedy_ms / rec.cost_ms[0])
    assert cheap.speedup > own.speedup  # rows are cheaper: drafting pays more


def test_prompt_orders_are_four_permutations_and_the_markdown_lists_them() -> None:
    from structspec.bench.replay import prompt_orders
    from structspec.bench.replay_report import replay_markdown

    rec = _recording()
    orders = prompt_orders(rec.prompts)
    assert list(orders) == ["recorded", "reversed", "even-odd", "rotated"]
    assert orders["recorded"] == rec.prompts and orders["reversed"] == rec.prompts[::-1]
    assert all(sorted(o, key=lambda p: p.id) == list(rec.prompts) for o in orders.values())
    vocab = StandInModel()
    results = {name: replay(rec, vocab, _engine_factory, prompts=o) for name, o in orders.items()}
    assert all(r.mismatches == [] for r in results.values())
    text = replay_markdown(
        "structspec benchmark --replay r.json --orders",
        [("r.json", rec, {"planner": results["recorded"]})],
        {"r.json": results},
    )
    assert "| recording | recorded | reversed | even-odd | rotated | mean |" in text
    assert f"{results['reversed'].speedup:.3f}x" in text

"""The editor replay: a language server's trace as a recording, replayed with its sources."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from structspec.bench.editor import run_editor_benchmark
from structspec.bench.recording import Recording, ReplayError, record, recording_from_trace
from structspec.bench.replay import replay
from structspec.bench.replay_report import replay_markdown
from structspec.completion import trace
from structspec.config import Settings
from structspec.engine.control import CostModel
from structspec.engine.decode import GenerationOptions
from structspec.model.standin import EOS, StandInModel
from structspec.runtime import assemble_engine

BODY = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
COST = CostModel.linear(1.0, 0.2)


def _engine(model, cost):
    return assemble_engine(
        model, Settings(model="standin", sources=("recycle", "suffix", "nearby")), cost
    )


def test_the_margins_kept_are_those_of_greedy_decoding() -> None:
    model = StandInModel(eos_bias=-2.0)
    engine = assemble_engine(model, Settings(model="standin"), COST)
    prompt = model.tokenize(BODY * 3 + "def mul(a, b):\n")
    spec = engine.stream(prompt, GenerationOptions(max_tokens=40), margins=True).run()
    model.truncate(0)
    plain = engine.stream(
        prompt, GenerationOptions(max_tokens=40, speculative=False), margins=True
    ).run()
    assert spec.tokens == plain.tokens and spec.stats.accepted > 0  # drafts were accepted
    assert spec.margins == pytest.approx(plain.margins)
    ended = spec.stop_reason == "eos"
    assert len(spec.margins) == len(spec.tokens) + ended
    assert (spec.end_token == EOS) if ended else spec.end_token is None
    model.truncate(0)
    assert engine.stream(prompt, GenerationOptions(max_tokens=8)).run().margins == []


def _replayable(kind: str, margins, **kw) -> trace.Replayable:
    return trace.Replayable(
        kind=kind,
        language="python",
        max_tokens=kw.pop("max_tokens", 48),
        stop=kw.pop("stop", ()),
        stop_reason=kw.pop("stop_reason", "length"),
        margins=margins,
        **kw,
    )


def test_the_trace_writes_each_token_list_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.TRACE_ENV, str(path))
    extra = _replayable("completion", [0.5], suffix=[7, 8], recent=[[1, 2], [7, 8]], end_token=1)
    trace.record([1, 2], [3], replayable=extra)
    trace.record([1, 2, 3], [4], replayable=extra)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    seqs = [line for line in lines if "seq" in line]
    assert [s["tokens"] for s in seqs] == [[7, 8], [1, 2]]  # [7, 8] named twice, written once
    gens = [line for line in lines if "prompt" in line]
    assert gens[0]["suffix"] == gens[1]["suffix"] == seqs[0]["seq"]
    assert gens[0]["recent"] == [seqs[1]["seq"], seqs[0]["seq"]] and gens[0]["end"] == 1
    path.unlink()  # a new file: its token lists are written again
    trace.record([1], [3], replayable=extra)
    assert sum("seq" in json.loads(line) for line in path.read_text().splitlines()) == 2


def _trace(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small editor trace of greedy generations on the stand-in.

    A completion, an edit that cancelled the next one, one that ended at a
    newline (stop), then the same completion again with the first in its
    document's latest generations (``recycle`` drafts it) and the text after
    the cursor (``suffix``).
    """
    model = StandInModel(eos_bias=-3.0)
    texts = [BODY + "def mul(a, b):\n", BODY + "def mul(a, b):\n    ret", BODY + "x = ["]
    prompts = [(str(i), "python", model.tokenize(t)) for i, t in enumerate(texts)]
    greedy = record(model, prompts, max_tokens=24, cost_ms=COST.ms, threads=1).prompts
    monkeypatch.setenv(trace.TRACE_ENV, str(path))
    first, cut, line = greedy
    # As the engine reports a generation: the end-of-generation token apart.
    eos = first.output[-1] == EOS
    out = list(first.output[:-1] if eos else first.output)
    ending = {"stop_reason": "eos", "end_token": EOS} if eos else {"stop_reason": "length"}
    trace.record(
        first.prompt,
        out,
        replayable=_replayable("completion", first.margins, max_tokens=24, **ending),
    )
    trace.record(
        cut.prompt,
        cut.output[:5],
        replayable=_replayable("cancelled", cut.margins[:5], stop_reason="cancelled"),
    )
    newline = model.tokenize("\n", add_bos=False)[0]
    assert newline in line.output
    end = line.output.index(newline) + 1
    trace.record(
        line.prompt,
        line.output[:end],
        replayable=_replayable("completion", line.margins[:end], stop=("\n",), stop_reason="stop"),
    )
    suffix = model.tokenize("\n\ndef div(a, b):\n", add_bos=False)
    trace.record(
        first.prompt,
        out,
        replayable=_replayable(
            "completion",
            first.margins,
            max_tokens=24,
            suffix=suffix,
            recent=[[*first.prompt[-8:], *out]],
            **ending,
        ),
    )


def test_an_editor_trace_replays_to_its_recorded_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "trace.jsonl"
    _trace(path, monkeypatch)
    rec = recording_from_trace(path, model=StandInModel().name, cost_ms=COST.ms, threads=1)
    assert [p.kind for p in rec.prompts] == ["completion", "cancelled", "completion", "completion"]
    assert rec.prompts[1].max_tokens == 5  # cut short: replayed up to what it generated
    assert rec.prompts[2].stop == ("\n",) and rec.prompts[2].max_tokens == 48
    assert rec.prompts[0].output == rec.prompts[3].output  # the end token included
    assert rec.prompts[3].recent and rec.prompts[3].suffix
    saved = tmp_path / "rec.json"
    saved.write_text(rec.to_json())
    again = Recording.load(saved)
    # The same but for rounding (margins to 4 decimals).
    assert [replace(p, margins=()) for p in again.prompts] == [
        replace(p, margins=()) for p in rec.prompts
    ]
    vocab = StandInModel()
    first = replay(again, vocab, _engine)
    second = replay(again, vocab, _engine)
    assert first.mismatches == [] and first.digest == second.digest
    assert first.by_source.get("recycle:m8", [0, 0])[1] > 0  # the last one recycles the first
    assert set(first.by_kind) == {"completion", "cancelled"}
    assert first.by_kind["cancelled"].tokens == 5
    oracle = replay(again, vocab, _engine, oracle=True)
    assert oracle.mismatches == [] and oracle.speedup >= first.speedup


def test_a_trace_that_names_an_unwritten_token_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    entry = {"prompt": [2], "tokens": [3], "margins": [1.0], "kind": "completion"}
    path.write_text(json.dumps({**entry, "suffix": "missing", "stop_reason": "length"}) + "\n")
    with pytest.raises(ReplayError, match="cannot read trace"):
        recording_from_trace(path, model="m", cost_ms=COST.ms, threads=1)


def test_the_editor_benchmark_records_a_replayable_trace(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30)))
    out = tmp_path / "editor.json"
    lines: list[str] = []
    run_editor_benchmark(
        [str(src)], "standin", 1, out=lines.append, max_chars=3, limit=1, record=out
    )
    assert (tmp_path / "editor.json.trace.jsonl").is_file()
    assert any(line.strip().startswith("recorded ") for line in lines)
    rec = Recording.load(out)
    assert rec.prompts and {p.kind for p in rec.prompts} <= {
        "completion",
        "cancelled",
        "pregeneration",
    }
    result = replay(rec, StandInModel(), lambda m, c: assemble_engine(m, Settings(), c))
    assert result.mismatches == [] and result.tokens > 0


def test_rows_past_a_stopped_generation_are_unknown_not_an_error() -> None:
    from structspec.bench.recording import RecordedPrompt
    from structspec.bench.replay import ReplayModel

    model = ReplayModel(StandInModel())
    stopped = RecordedPrompt("s", None, (2, 3), (4, 5), (1.0, 1.0), stop=("\n",))
    model.expect(stopped)
    model.prefill([2])
    rows = model.verify([3, 4, 5, 6])  # the draft runs past the recorded end
    assert rows.argmax == [4, 5, -1, -1]
    model.expect(replace(stopped, stop=()))  # ended by itself: nothing can follow
    model.prefill([2])
    with pytest.raises(ReplayError, match="ran past"):
        model.verify([3, 4, 5])


class _Fixed:
    """Drafts the same tokens at every pass (the healing constraint must cut them)."""

    name = "fixed"
    priors: dict[str, float] = {}

    def __init__(self, tokens: tuple[int, ...]) -> None:
        self.tokens = tokens

    def propose(self, ctx):
        from structspec.drafts.base import Draft

        return Draft(self.tokens[: ctx.max_tokens], self.name)

    def observe(self, draft, accepted: int) -> None:
        pass


def test_a_healed_generation_replays_with_its_constraint() -> None:
    """The recorded prompt is healed already: the replay constrains the first tokens again."""
    from structspec.bench.recording import RecordedPrompt
    from structspec.engine import DraftPlanner, Engine

    model = StandInModel(pieces=("return", "ret", "re", "result", "res"), eos_bias=-3.0)
    live = Engine(model).stream(
        model.tokenize("def f(a):\n    ret"),
        GenerationOptions(max_tokens=12, token_healing=True),
        margins=True,
    )
    result = live.run()
    assert live.healing is not None and live.healing.removed == b"ret"
    rec = Recording(
        model.name,
        1,
        12,
        COST.ms,
        (
            RecordedPrompt(
                "h",
                "python",
                tuple(result.prompt_tokens),
                tuple(result.tokens) + ((EOS,) if result.end_token is not None else ()),
                tuple(result.margins),
                max_tokens=12,
                healed=live.healing.removed,
            ),
        ),
    )
    wrong = tuple(model.tokenize("xyz", add_bos=False))  # never allowed while healing
    sent: list[tuple[int, ...]] = []

    def factory(replayed, cost):
        engine = Engine(replayed, [_Fixed(wrong)], DraftPlanner(cost, min_gain=-1e9))
        verify = replayed.verify

        def logged(tokens):
            sent.append(tuple(tokens[1:]))
            return verify(tokens)

        replayed.verify = logged
        return engine

    out = replay(rec, StandInModel(pieces=("return", "ret", "re", "result", "res")), factory)
    assert out.mismatches == []  # the constrained rows give the recorded tokens
    assert sent[0] == ()  # the first pass is healing: the wrong draft was cut to nothing
    assert any(d and d == wrong[: len(d)] for d in sent[1:])  # sent once the constraint lifts


EDITOR_RECORDING = Path(__file__).resolve().parents[1] / "data" / "editor-python-25.replay.json"


@pytest.mark.model
def test_the_committed_editor_recording_replays_exactly() -> None:
    """The first 25 generations of an editor benchmark's trace (two Python files, real model).

    They hold stops, healed prompts, recent generations and pre-generations:
    every one replays to its recorded output, deterministically.
    """
    from structspec.runtime import open_model

    rec = Recording.load(EDITOR_RECORDING)
    vocab = open_model("", context_size=256, threads=1)
    assert vocab.name == rec.model
    assert any(p.healed for p in rec.prompts) and any(p.stop for p in rec.prompts)

    def factory(model, cost):
        return assemble_engine(model, Settings(), cost)

    first = replay(rec, vocab, factory)
    second = replay(rec, vocab, factory)
    assert first.mismatches == [] and first.tokens > 0
    assert (first.digest, first.proposals_digest) == (second.digest, second.proposals_digest)
    assert set(first.by_kind) == {"completion", "pregeneration"}
    oracle = replay(rec, vocab, factory, oracle=True)
    assert oracle.mismatches == [] and oracle.speedup >= first.speedup
    # The Markdown report has a row per kind of generation with each control's speed-up.
    text = replay_markdown("cmd", [(EDITOR_RECORDING, rec, {"planner": first, "oracle": oracle})])
    for kind in ("completion", "pregeneration"):
        k, o = first.by_kind[kind], oracle.by_kind[kind]
        row = f"| {kind} | {k.prompts} | {k.tokens} | {k.speedup:.3f}x | {o.speedup:.3f}x |"
        assert row in text

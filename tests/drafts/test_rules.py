"""The mined-rules source: mining, tiers, vetoes, caps, cooldown, files, the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from structspec.drafts import rules as rules_mod
from structspec.drafts.base import Draft, DraftContext
from structspec.drafts.rules import (
    Cooldown,
    MineOptions,
    Rule,
    RulesError,
    RuleSet,
    RulesSource,
    mine_rules,
    tier_of,
)
from structspec.model import StandInModel


def _ctx(model, tokens, *, max_tokens=15, language=None, generation=1) -> DraftContext:
    return DraftContext(
        model=model,
        tokens=list(tokens),
        n_prompt=len(tokens),
        max_tokens=max_tokens,
        language=language,
        generation=generation,
    )


def _tiered_streams() -> list[list[int]]:
    streams = [[5, 6, 7]] * 40  # deterministic: 40/41
    streams += [[8, 9, 10]] * 17 + [[8, 9, 11]] * 3  # strong: 17/21
    streams += [[12, 13, 14]] * 12 + [[12, 13, 15]] * 8  # frequent: 12/21
    streams += [[16, 17, k] for k in (18, 19, 20) for _ in range(5)]  # unpredictable
    streams += [[40, 41, 42]] * 40 + [[39, 40, 41, 20 + k] for k in range(10)]  # a veto
    streams += [[49, 50, 51, 52]] * 20  # (49, 50, 51) says nothing (50, 51) does not
    return streams


def test_tier_thresholds():
    assert tier_of(1.0) == "deterministic"
    assert tier_of(0.95) == "deterministic"
    assert tier_of(0.9) == "strong"
    assert tier_of(0.6) == "frequent"
    assert tier_of(0.3) is None


def test_mining_classifies_tiers_and_vetoes():
    rs = mine_rules(_tiered_streams(), MineOptions(min_count=5, min_context=2, max_context=4))
    assert rs.rules[(5, 6)].tier == "deterministic"
    assert rs.rules[(5, 6)].continuation == (7,)
    assert rs.rules[(8, 9)].tier == "strong"
    assert rs.rules[(8, 9)].continuation == (10,)
    assert rs.rules[(12, 13)].tier == "frequent"
    assert (16, 17) not in rs.rules  # no majority: no rule
    assert rs.rules[(40, 41)].continuation == (42,)
    assert rs.rules[(39, 40, 41)].veto  # seen often, unpredictable, suffix would draft
    assert (49, 50, 51) not in rs.rules  # pruned: the suffix (50, 51) gives the same
    assert rs.lookup([1, 39, 40, 41]).veto
    assert rs.lookup([1, 38, 40, 41]).continuation == (42,)
    counts = rs.tier_counts()
    assert counts["veto"] >= 1 and counts["deterministic"] >= 1


def test_continuations_are_chained_through_the_corpus():
    model = StandInModel()
    text = "for i in range(n):\n    total = total + i\n"
    streams = [model.tokenize(f"x{k} = 0\n" + text, add_bos=False) for k in range(30)]
    rs = mine_rules(streams, MineOptions(min_count=5, min_context=2, max_context=6))
    source = RulesSource(rs)
    prefix = model.tokenize("for i in ra", add_bos=False)
    draft = source.propose(_ctx(model, prefix))
    assert draft is not None and draft.tier == "deterministic"
    assert len(draft.tokens) >= 8
    assert text.startswith("for i in ra" + model.detokenize(draft.tokens))


def test_save_load_round_trip(tmp_path: Path):
    model = StandInModel()
    streams = [
        model.tokenize(f"def f{k}(self):\n    return self\n", add_bos=False) for k in range(20)
    ]
    rs = mine_rules(
        streams,
        MineOptions(min_count=4),
        tokenizer={"name": model.name, "n_vocab": model.n_vocab},
        languages=["python"],
        meta={"files": 20},
    )
    assert len(rs) > 5
    path = tmp_path / "r.rules.json.gz"
    rs.save(path, model)
    loaded = RuleSet.load(path, model)
    assert loaded.rules == rs.rules
    assert loaded.languages == ("python",)
    assert loaded.meta["files"] == 20
    assert loaded.warnings == []


def _one_rule(cont=tuple(range(2, 22)), tier="strong", languages=()) -> RuleSet:
    return RuleSet({(3, 4): Rule((3, 4), tuple(cont), tier, 10, 0.9)}, 2, 4, languages=languages)


def test_tier_caps_and_max_tokens():
    model = StandInModel()
    source = RulesSource(_one_rule())
    assert len(source.propose(_ctx(model, [9, 3, 4])).tokens) == rules_mod.DEFAULT_CAPS["strong"]
    assert len(source.propose(_ctx(model, [9, 3, 4], max_tokens=3)).tokens) == 3
    assert source.propose(_ctx(model, [9, 3, 4], max_tokens=0)) is None
    capped = RulesSource(_one_rule(), caps={"strong": 2})
    assert capped.propose(_ctx(model, [3, 4])).tokens == (2, 3)
    assert source.propose(_ctx(model, [4, 3])) is None


def test_language_gating():
    model = StandInModel()
    source = RulesSource(_one_rule(languages=("python",)))
    assert source.propose(_ctx(model, [3, 4], language="javascript")) is None
    assert source.propose(_ctx(model, [3, 4], language="python")) is not None
    assert source.propose(_ctx(model, [3, 4], language=None)) is not None


def test_cooldown_mutes_and_doubles():
    cd = Cooldown(after=2, passes=5)
    cd.record("r", False)
    assert not cd.muted("r")
    cd.record("r", False)
    assert cd.muted("r")
    for _ in range(5):
        cd.tick()
    assert not cd.muted("r")
    cd.record("r", False)
    cd.record("r", True)  # a success resets the run of failures
    cd.record("r", False)
    assert not cd.muted("r")
    cd.record("r", False)
    assert cd.muted("r")
    for _ in range(9):
        cd.tick()
    assert cd.muted("r")  # the second cooldown lasts twice as long
    cd.tick()
    assert not cd.muted("r")


def test_source_cooldown_on_rejected_drafts():
    model = StandInModel()
    source = RulesSource(_one_rule(), cooldown_after=3, cooldown_passes=10)
    ctx = _ctx(model, [3, 4])
    for _ in range(3):
        draft = source.propose(ctx)
        assert draft is not None
        # The planner may cut a draft: the cut draft still counts for the rule.
        source.observe(Draft(draft.tokens[:2], draft.source, draft.tier), 0)
    assert source.muted((3, 4))
    assert source.propose(ctx) is None
    for _ in range(10):
        source.propose(ctx)
    assert source.propose(ctx) is not None
    # Feedback on someone else's draft is ignored.
    source.observe(Draft((99,), "rules", "strong"), 0)


def _corrupt_cases(tmp_path: Path) -> dict[str, Path]:
    cases = {
        "missing": tmp_path / "nope.rules.json.gz",
        "gzip": tmp_path / "bad.gz",
        "json": tmp_path / "bad.json",
        "format": tmp_path / "other.json",
        "version": tmp_path / "future.json",
        "rows": tmp_path / "rows.json",
        "true": tmp_path / "true.json",
        "trailing": tmp_path / "trailing.gz",
    }
    cases["gzip"].write_bytes(b"\x1f\x8b\x08\x00garbage")
    cases["json"].write_text("{not json")
    cases["format"].write_text(json.dumps({"format": "something-else"}))
    cases["version"].write_text(json.dumps({"format": "structspec-rules", "version": 99}))
    good = _one_rule().to_json(StandInModel())
    good["rules"] = [["x", [1], "strong", 1, 0.5]]
    cases["rows"].write_bytes(gzip.compress(json.dumps(good).encode()))
    cases["true"].write_text(json.dumps({**_one_rule().to_json(StandInModel()), "version": True}))
    whole = gzip.compress(json.dumps(_one_rule().to_json(StandInModel())).encode())
    cases["trailing"].write_bytes(whole + b"appended")
    return cases


def test_bad_rule_files_give_clear_errors(tmp_path: Path):
    model = StandInModel()
    for kind, path in _corrupt_cases(tmp_path).items():
        with pytest.raises(RulesError) as info:
            RulesSource.load(path, model)
        message = str(info.value)
        assert str(path) in message or "rules file" in message, kind
        assert "\n" not in message


def test_default_falls_back_to_an_empty_source(tmp_path: Path, monkeypatch):
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    monkeypatch.setattr(rules_mod, "default_rules_path", lambda: bad)
    source = RulesSource.default(StandInModel())
    assert source.propose(_ctx(StandInModel(), [3, 4, 5])) is None
    assert source.warnings and "disabled" in source.warnings[0]


def test_packaged_default_never_crashes_on_another_tokenizer():
    model = StandInModel()
    source = RulesSource.default(model)  # mined for Gemma: remapped or disabled, with a warning
    assert source.warnings
    ctx = _ctx(model, model.tokenize("for i in range(n):\n    x = "))
    draft = source.propose(ctx)
    assert draft is None or all(0 <= t < model.n_vocab for t in draft.tokens)


def test_other_tokenizer_is_remapped_by_bytes(tmp_path: Path):
    mined_with = StandInModel()
    streams = [mined_with.tokenize(f"if x:\n    y{k} = x\n", add_bos=False) for k in range(20)]
    rs = mine_rules(
        streams,
        MineOptions(min_count=4),
        tokenizer={"name": mined_with.name, "n_vocab": mined_with.n_vocab},
    )
    path = tmp_path / "r.json.gz"
    rs.save(path, mined_with)
    # Same characters, other ids: rules survive with their text intact.
    alphabet = mined_with.alphabet[::-1]
    other = StandInModel(alphabet=alphabet)
    loaded = RuleSet.load(path, other)
    assert loaded.warnings and "another tokenizer" in loaded.warnings[0]
    as_text = {
        (mined_with.detokenize(r.context), mined_with.detokenize(r.continuation))
        for r in rs.rules.values()
    }
    assert {
        (other.detokenize(r.context), other.detokenize(r.continuation))
        for r in loaded.rules.values()
    } == as_text
    # A vocabulary without the rules' characters: a clear error, and default() would disable.
    with pytest.raises(RulesError, match="does not fit"):
        RuleSet.load(path, StandInModel(alphabet="ABC"))


def test_rules_keep_the_engine_exact():
    from structspec.engine.control import CostModel
    from structspec.engine.decode import Engine, GenerationOptions
    from structspec.runtime import make_planner

    model = StandInModel(seed=3, eos_bias=-3.0)
    prompts = [model.tokenize(p) for p in ("def f(x):\n", "for i in ", "x = (", "ab", "q")]
    greedy = Engine(model)
    outputs = [
        greedy.generate(p, GenerationOptions(max_tokens=60, speculative=False)).tokens
        for p in prompts
    ]
    # Rules mined from the model's own outputs fire often, and are sometimes wrong.
    rs = mine_rules(outputs, MineOptions(min_count=2, min_context=1, max_context=4))
    engine = Engine(model, [RulesSource(rs)], make_planner(CostModel.linear(1.0, 0.05)))
    accepted = 0
    for prompt, expected in zip(prompts, outputs, strict=True):
        for max_tokens in (1, 7, 60):
            result = engine.generate(prompt, GenerationOptions(max_tokens=max_tokens))
            assert result.tokens == expected[:max_tokens]
            accepted += result.stats.accepted
    assert accepted > 0


def test_mine_command(tmp_path: Path):
    from structspec.cli import main

    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    for k in range(12):
        (code / "pkg" / f"m{k}.py").write_text(f"def f{k}(x):\n    return x + {k}\n")
    (code / "skip.txt").write_text("not code")
    (code / "pkg" / "bin.py").write_bytes(b"\x00\x01binary")
    out = tmp_path / "out.rules.json.gz"
    assert main(["mine", str(code), "-o", str(out), "--model", "standin", "--min-count", "3"]) == 0
    loaded = RuleSet.load(out, StandInModel())
    assert len(loaded) > 0 and loaded.languages == ("python",)
    assert loaded.meta["files"] == 12 and loaded.meta["skipped_files"] == 1
    assert loaded.tokenizer["n_vocab"] == StandInModel().n_vocab


@pytest.mark.parametrize(
    "argv",
    [
        ["mine", "/no/such/dir", "-o", "OUT"],
        ["mine", ".", "-o", "OUT", "--min-context", "5", "--max-context", "2"],
        ["mine", ".", "-o", "OUT", "--min-count", "0"],
    ],
)
def test_mine_command_bad_input(tmp_path: Path, argv, capsys):
    from structspec.cli import main

    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert main([*argv, "--model", "standin"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structspec: error:") and err.count("\n") == 1


def test_mine_command_empty_directory(tmp_path: Path):
    from structspec.cli import main

    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    assert main(["mine", str(tmp_path / "empty"), "-o", str(out), "--model", "standin"]) == 2


@pytest.mark.model
def test_default_rules_fit_the_default_model(gemma):
    source = RulesSource.default(gemma)
    assert source.warnings == []
    assert len(source.rules) > 10_000
    assert source.rules.languages == ("python",)
    # On real code some deterministic rule drafts exactly what follows.
    text = (
        "import os\n\n\nclass Store:\n    def __init__(self, path):\n"
        "        self.path = path\n\n    def __repr__(self):\n"
        "        return f'Store({self.path})'\n"
    )
    ids = gemma.tokenize(text, add_bos=False)
    hits = 0
    for i in range(2, len(ids) - 1):
        draft = source.propose(_ctx(gemma, ids[:i], language="python"))
        if draft is not None and draft.tier == "deterministic":
            hits += draft.tokens[0] == ids[i]
    assert hits > 0


@pytest.mark.model
def test_mining_real_tokenizer_is_whole_file(gemma, tmp_path: Path):
    from structspec.commands.mine import mine_paths

    body = "    for item in items:\n        total += item\n    return total\n"
    for k in range(10):
        (tmp_path / f"m{k}.py").write_text(f"def f{k}(items):\n    total = 0\n" + body)
    rs = mine_paths([str(tmp_path)], gemma, MineOptions(min_count=5))
    whole = gemma.tokenize("def f0(items):\n    total = 0\n" + body, add_bos=False)
    for rule in rs.rules.values():
        seq = [*rule.context, *rule.continuation]
        # Every rule is a run of the whole-file tokenization.
        assert any(whole[i : i + len(seq)] == seq for i in range(len(whole))), rule


def test_mine_command_with_nothing_readable_writes_nothing(tmp_path: Path, capsys):
    """Every file skipped (binary here) wrote an empty rules file and said it succeeded."""
    from structspec.cli import main

    code = tmp_path / "code"
    code.mkdir()
    (code / "bin.py").write_bytes(b"\x00\x01binary")
    out = tmp_path / "out.rules.json.gz"
    assert main(["mine", str(code), "-o", str(out), "--model", "standin"]) == 2
    assert "no code files could be read" in capsys.readouterr().err and not out.exists()


def test_a_rules_file_is_written_whole_or_not_at_all(tmp_path: Path):
    """Written in place, a save that failed (a full disk, a Ctrl-C) left a truncated file
    where the previous rules were."""
    import resource
    import signal

    from structspec.cli import main

    code = tmp_path / "code"
    code.mkdir()
    for k in range(12):
        (code / f"m{k}.py").write_text(f"def f{k}(x):\n    return x + {k}\n")
    out = tmp_path / "out.rules.json.gz"
    argv = ["mine", str(code), "-o", str(out), "--model", "standin", "--min-count", "3"]
    assert main(argv) == 0
    before = out.read_bytes()

    # A file size limit (as ``ulimit -f``) stands in for a full disk: past it a write fails.
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, limits[1]))
    try:
        code = main(argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert code == 2
    assert out.read_bytes() == before and len(RuleSet.load(out, StandInModel())) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["code", out.name])  # no temporary


def test_a_rules_file_behind_a_link_is_written_through_it(tmp_path: Path):
    from structspec.cli import main

    code = tmp_path / "code"
    code.mkdir()
    for k in range(12):
        (code / f"m{k}.py").write_text(f"def f{k}(x):\n    return x + {k}\n")
    real = tmp_path / "shared.rules.json.gz"
    real.write_bytes(b"old")
    link = tmp_path / "rules.json.gz"
    link.symlink_to(real)
    assert main(["mine", str(code), "-o", str(link), "--model", "standin", "--min-count", "3"]) == 0
    assert link.is_symlink() and len(RuleSet.load(real, StandInModel())) > 0

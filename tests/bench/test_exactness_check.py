"""The benchmark's exactness check (``bench/harness.py``: ``output_gaps``) on the stand-in."""

from __future__ import annotations

from structspec.bench.harness import NEAR_TIE, Exactness, output_gaps, stepwise_gaps
from structspec.engine import Engine, GenerationOptions
from structspec.model.base import TokenCheck
from structspec.model.standin import StandInModel


def _greedy(model: StandInModel, prompt: list[int], n: int) -> list[int]:
    gen = Engine(model, []).stream(prompt, GenerationOptions(max_tokens=n, speculative=False))
    for _ in gen:
        pass
    assert gen.result is not None
    return gen.result.tokens


def test_stepwise_gaps_are_zero_on_greedy_output_and_measure_a_wrong_token():
    model = StandInModel(seed=3, n_ctx=256)
    prompt = model.tokenize("def f(x):")
    out = _greedy(model, prompt, 12)
    assert len(out) == 12
    assert stepwise_gaps(model, prompt, out) == [0.0] * 12
    # a token that is not the argmax has the gap the one-batch check sees too
    wrong = list(out)
    row = model.logits([*prompt, *out[:5]])
    wrong[5] = int(row.argmin())
    gaps = stepwise_gaps(model, prompt, wrong)
    assert gaps[5] > NEAR_TIE
    assert gaps[5] == next(
        c.gap for i, c in enumerate(model.teacher_forced(prompt, wrong)) if i == 5
    )
    assert stepwise_gaps(model, prompt, []) == []


class _ShapeNoise(StandInModel):
    """A stand-in whose one-batch check puts one token past the tolerance (as batch shape can)."""

    def teacher_forced(self, prompt, output):
        checks = super().teacher_forced(prompt, output)
        c = checks[2]
        checks[2] = TokenCheck(c.token, c.argmax, NEAR_TIE + 0.05)
        return checks


def test_a_token_off_in_the_one_batch_check_is_checked_again_one_row_per_pass():
    model = _ShapeNoise(seed=3, n_ctx=256)
    prompt = model.tokenize("def f(x):")
    out = _greedy(model, prompt, 8)
    gaps, rechecked = output_gaps(model, prompt, out)
    assert rechecked and gaps == [0.0] * 8
    exact = Exactness()
    exact.add(gaps, rechecked=rechecked)
    assert (exact.exact, exact.off, exact.rechecked) == (8, 0, 1)


def test_a_real_error_stays_off_after_the_recheck():
    model = StandInModel(seed=3, n_ctx=256)
    prompt = model.tokenize("def f(x):")
    out = _greedy(model, prompt, 8)
    out[3] = int(model.logits([*prompt, *out[:3]]).argmin())
    gaps, rechecked = output_gaps(model, prompt, out)
    assert rechecked
    exact = Exactness()
    exact.add(gaps, rechecked=rechecked)
    assert exact.off >= 1 and exact.worst_gap > NEAR_TIE
    # an output the one-batch check passes is not evaluated again
    clean = _greedy(model, prompt, 8)
    assert output_gaps(model, prompt, clean) == ([0.0] * 8, False)

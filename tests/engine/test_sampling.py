"""Exact speculative sampling, proven on the deterministic stand-in model.

The output distribution of the speculative path (with drafts that are often
wrong, so acceptance and rejection both happen at every position) is compared
with the exact distribution, enumerated from the stand-in's logits with a
brute-force reference of the truncation rules, by a chi-square test over many
seeds. Seeds are fixed, so the test is deterministic; the threshold (1e-6) is
there to say what a failure would mean, not to absorb flakiness.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.drafts.base import Draft, DraftContext
from structspec.engine import CostModel, DraftPlanner, Engine, GenerationOptions
from structspec.engine.sampling import Sampling, distribution
from structspec.model.standin import EOS, StandInModel


class RandomDrafts:
    """Drafts 1-4 random tokens (EOS included): wrong most of the time, right sometimes."""

    name = "random"

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def propose(self, ctx: DraftContext) -> Draft | None:
        n = int(self.rng.integers(1, 5))
        return Draft(tuple(int(t) for t in self.rng.integers(1, ctx.model.n_vocab, n)), self.name)

    def observe(self, draft: Draft, accepted: int) -> None:
        pass


def always_draft() -> DraftPlanner:
    return DraftPlanner(CostModel.linear(1.0, 0.0), min_gain=0.0)


def reference_probs(logits: np.ndarray, s: Sampling) -> np.ndarray:
    """The sampling distribution by the definition: full sort, llama.cpp's order."""
    x = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-x, kind="stable")
    keep = list(order)
    if s.top_k > 0:
        keep = keep[: s.top_k]
    if s.top_p < 1:
        p = np.exp(x[keep] - x[keep].max())
        p /= p.sum()
        n = 0
        mass = 0.0
        while n < len(keep) and (n == 0 or mass < s.top_p):
            mass += p[n]
            n += 1
        keep = keep[:n]
    if s.min_p > 0:
        best = x[keep].max()
        keep = [t for t in keep if math.exp(x[t] - best) >= s.min_p]
    out = np.zeros(len(x))
    z = np.exp((x[keep] - x[keep].max()) / s.temperature)
    out[keep] = z / z.sum()
    return out


def exact_outputs(
    model: StandInModel, prompt: list[int], n: int, s: Sampling
) -> dict[tuple[int, ...], float]:
    """Probability of every output of up to ``n`` tokens (EOS ends an output early)."""
    out: dict[tuple[int, ...], float] = {}

    def walk(prefix: tuple[int, ...], prob: float) -> None:
        if len(prefix) == n:
            out[prefix] = out.get(prefix, 0.0) + prob
            return
        p = reference_probs(model.logits([*prompt, *prefix]), s)
        for tok in np.flatnonzero(p > 0):
            if tok == EOS:
                out[prefix] = out.get(prefix, 0.0) + prob * p[tok]
            else:
                walk((*prefix, int(tok)), prob * p[tok])

    walk((), 1.0)
    return out


def chi2_sf(x: float, k: int) -> float:
    """P(X >= x) for a chi-square with ``k`` degrees of freedom (regularised gamma series)."""
    a, y = k / 2.0, x / 2.0
    if y <= 0:
        return 1.0
    term = total = 1.0 / a
    for n in range(1, 10_000):
        term *= y / (a + n)
        total += term
        if term < total * 1e-15:
            break
    lower = math.exp(a * math.log(y) - y - math.lgamma(a)) * total
    return max(0.0, 1.0 - lower)


def chi2_pvalue(counts: Counter, expected: dict[tuple[int, ...], float], n: int) -> float:
    """Pearson's test; cells expected below 5 are pooled into one."""
    stat, cells, pool_obs, pool_exp = 0.0, 0, 0, 0.0
    for key, p in expected.items():
        if p * n >= 5:
            stat += (counts.get(key, 0) - p * n) ** 2 / (p * n)
            cells += 1
        else:
            pool_obs += counts.get(key, 0)
            pool_exp += p * n
    pool_obs += sum(c for key, c in counts.items() if key not in expected)
    if pool_exp > 0:
        stat += (pool_obs - pool_exp) ** 2 / pool_exp
        cells += 1
    elif pool_obs:
        return 0.0  # an output the distribution gives probability 0
    return chi2_sf(stat, cells - 1)


ALPHABET = "ab c"
CONFIGS = [
    Sampling(temperature=1.0),
    Sampling(temperature=0.7, top_p=0.9),
    Sampling(temperature=1.5, top_k=3),
    Sampling(temperature=0.8, min_p=0.2),
    Sampling(temperature=1.2, top_k=4, top_p=0.8, min_p=0.05),
]


@pytest.mark.parametrize(
    "s", CONFIGS, ids=lambda s: f"T{s.temperature}k{s.top_k}p{s.top_p}m{s.min_p}"
)
def test_speculative_sampling_has_the_exact_distribution(s: Sampling) -> None:
    model = StandInModel(seed=3, order=2, alphabet=ALPHABET, eos_bias=-0.5)
    prompt = model.tokenize("ab c")
    n_tokens, n_samples = 3, 2500
    engine = Engine(model, [RandomDrafts(7)], always_draft())
    counts: Counter = Counter()
    drafted = accepted = 0
    for seed in range(n_samples):
        opts = GenerationOptions(max_tokens=n_tokens, sampling=replace(s, seed=seed))
        result = engine.generate(prompt, opts)
        counts[tuple(result.tokens)] += 1
        drafted += result.stats.drafted
        accepted += result.stats.accepted
    expected = exact_outputs(model, prompt, n_tokens, s)
    assert math.isclose(sum(expected.values()), 1.0, abs_tol=1e-9)
    assert 0 < accepted < drafted  # both acceptance and rejection were exercised
    assert chi2_pvalue(counts, expected, n_samples) > 1e-6


def test_chi_square_detects_a_wrong_distribution() -> None:
    """The test above has teeth: samples at another temperature fail it."""
    model = StandInModel(seed=3, order=2, alphabet=ALPHABET, eos_bias=-0.5)
    prompt = model.tokenize("ab c")
    engine = Engine(model)
    counts: Counter = Counter(
        tuple(engine.generate(prompt, GenerationOptions(3, sampling=Sampling(1.4, seed=i))).tokens)
        for i in range(2500)
    )
    expected = exact_outputs(model, prompt, 3, Sampling(temperature=1.0))
    assert chi2_pvalue(counts, expected, 2500) < 1e-6


def sample_opts(seed: int, max_tokens: int = 40, **kw: object) -> GenerationOptions:
    sampling = Sampling(temperature=0.9, top_p=0.95, seed=seed)
    return GenerationOptions(max_tokens, sampling=sampling, **kw)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), model_seed=st.integers(0, 50), draft_seed=st.integers(0, 99))
def test_same_seed_same_tokens_with_or_without_speculation(seed, model_seed, draft_seed):
    model = StandInModel(seed=model_seed, alphabet="ab(): \n=x", eos_bias=-2.0)
    prompt = model.tokenize("a(b): x = ")
    plain = Engine(model).generate(prompt, sample_opts(seed, speculative=False))
    again = Engine(model).generate(prompt, sample_opts(seed, speculative=False))
    spec = Engine(model, [RandomDrafts(draft_seed)], always_draft()).generate(
        prompt, sample_opts(seed)
    )
    assert plain.tokens == again.tokens == spec.tokens
    assert plain.text == spec.text


def test_different_seeds_differ() -> None:
    model = StandInModel(seed=1, alphabet="ab(): \n=x", eos_bias=-4.0)
    prompt = model.tokenize("a(b): x = ")
    texts = {Engine(model).generate(prompt, sample_opts(seed)).text for seed in range(8)}
    assert len(texts) > 4


def test_temperature_zero_is_greedy_whatever_the_truncation() -> None:
    model = StandInModel(seed=2, alphabet="ab(): \n=x", eos_bias=-3.0)
    prompt = model.tokenize("a(b): x = ")
    greedy = Engine(model).generate(prompt, GenerationOptions(40))
    other = Engine(model).generate(
        prompt, GenerationOptions(40, sampling=Sampling(top_k=2, top_p=0.5, seed=9))
    )
    assert greedy.tokens == other.tokens


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": -1.0},
        {"temperature": float("nan")},
        {"temperature": 1.0, "top_p": 1.5},
        {"temperature": 1.0, "min_p": -0.1},
        {"temperature": 1.0, "top_k": -2},
    ],
)
def test_bad_sampling_parameters_are_a_clear_error(kw) -> None:
    with pytest.raises(ValueError, match=next(iter(kw)) if len(kw) == 1 else list(kw)[1]):
        Sampling(**kw)


@pytest.mark.parametrize(
    "s",
    [
        Sampling(temperature=0.5, top_p=0.99),
        Sampling(temperature=1.0, top_p=0.3, min_p=0.5),
        Sampling(temperature=2.0, top_k=1000, top_p=0.9),
        Sampling(temperature=1.0, top_p=0.0),
        Sampling(temperature=1.0, min_p=1.0),
    ],
)
def test_distribution_matches_the_definition_on_a_large_row(s: Sampling) -> None:
    """A flat 5,000-token row makes ``top_p`` widen its first look past 256 tokens."""
    logits = np.random.default_rng(0).normal(0, 0.3, 5000).astype(np.float32)
    ids, probs = distribution(logits, s)
    assert list(ids) == sorted(ids)
    ref = reference_probs(logits, s)
    assert set(ids.tolist()) == set(np.flatnonzero(ref).tolist())
    assert np.allclose(probs, ref[ids], atol=1e-12)


@pytest.mark.parametrize("top_p", [0.3, 0.5, 0.9, 0.999])
def test_nucleus_widens_its_look_past_a_long_tail(top_p: float) -> None:
    """One likely token and a tail of 5,000 that each fall under the first look."""
    logits = np.full(5001, -8.0) + np.random.default_rng(1).normal(0, 0.01, 5001)
    logits[17] = 0.0
    s = Sampling(temperature=0.9, top_p=top_p)
    ids, probs = distribution(logits, s)
    ref = reference_probs(logits, s)
    assert set(ids.tolist()) == set(np.flatnonzero(ref).tolist())
    assert np.allclose(probs, ref[ids], atol=1e-12)


def test_distribution_respects_candidates() -> None:
    logits = np.array([5.0, 1.0, 2.0, 3.0, 0.0])
    ids, probs = distribution(logits, Sampling(temperature=1.0), np.array([1, 2, 4]))
    assert ids.tolist() == [1, 2, 4]
    assert math.isclose(float(probs.sum()), 1.0)
    assert probs[1] == max(probs)


def test_numpy_random_is_imported_with_the_module_not_by_the_first_generation():
    """Its import takes tens of milliseconds, which the first answer after a start paid."""
    import subprocess
    import sys

    code = "import sys, structspec.engine.sampling; print('numpy.random' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"

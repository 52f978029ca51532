"""Side-by-side runs of decoding modes on the same prompts, in one process.

Modes: ``greedy`` (the engine with no drafts), ``structspec`` (the engine with
its draft sources), ``pld`` (llama-cpp-python's own
``LlamaPromptLookupDecoding(num_pred_tokens=10)`` through its high-level
``Llama.generate``) and ``llama-server[:SPEC_TYPE]`` (llama.cpp's own server,
see ``bench/llama_server.py``). For fairness every run starts from a cold KV cache, and
the modes of one prompt run back to back in an order that changes from prompt
to prompt (``mode_order``) so that drift of a shared machine hits them alike
and no mode always runs right after the same other one.

Speed is measured the same way for every mode: ``decode_tps`` is tokens after
the first divided by the time after the first token (the prompt's prefill is
the same work in every mode), ``e2e_tps`` counts everything from the request.

With a ``Sampling`` of temperature above 0 every mode samples with the same
parameters: ``greedy`` is then plain sampling (the engine with no drafts),
``structspec`` speculative sampling with the same seed (the same text on a
model whose rows do not depend on the batch shape), ``pld`` and llama-server
llama.cpp's own sampler chain (top_k, top_p, min_p, temperature; the same
order as ``engine/sampling.py``) with its own random stream. Every one of them
accepts a draft token only when it equals the token sampled from its row, the
speculative-sampling rule for a deterministic draft, so each samples from the
same distribution as plain sampling.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structspec.bench.suites import Prompt
from structspec.engine.decode import Engine, GenerationOptions
from structspec.engine.sampling import Sampling
from structspec.engine.stats import PassTrace
from structspec.model.amx import plain_buffers_for_llama
from structspec.model.base import Model

MODES = ("greedy", "structspec", "pld")
#: ``structspec:lookup+rules`` is structspec with only those draft sources: an
#: ablation run side by side with the full engine.
ABLATION_PREFIX = "structspec:"


#: ``llama-server`` is llama.cpp's own server, greedy; ``llama-server:TYPE`` with
#: its ``--spec-type TYPE`` (``bench/llama_server.py``).
LLAMA_SERVER_MODE = "llama-server"


#: ``structspec serve`` over HTTP, in a subprocess (``bench/structspec_serve.py``).
SERVE_MODE = "serve"


def is_llama_server_mode(mode: str) -> bool:
    return mode == LLAMA_SERVER_MODE or mode.startswith(LLAMA_SERVER_MODE + ":")


def is_external_mode(mode: str) -> bool:
    """A mode that another program decodes: its text is not this engine's to check."""
    return mode == "pld" or is_llama_server_mode(mode)


def ablation_sources(mode: str) -> tuple[str, ...] | None:
    """The draft sources of an ablation mode ``structspec:NAME+NAME``, else ``None``."""
    if not mode.startswith(ABLATION_PREFIX):
        return None
    return tuple(n for n in mode[len(ABLATION_PREFIX) :].split("+") if n)


def mode_order(modes: Sequence[str], k: int) -> list[str]:
    """The order of the modes for the ``k``-th prompt (and repeat): a Williams design.

    Every mode goes first equally often, and every mode runs right after every
    other one equally often (over ``len(modes)`` prompts, twice that when the
    count is odd): a plain rotation keeps the cyclic order, so one mode would
    always follow the same neighbour and carry whatever that neighbour leaves
    behind (another program's threads, a cold cache).
    """
    n = len(modes)
    first: list[int] = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    if n % 2 and (k // n) % 2:
        first.reverse()
    return [modes[(j + k) % n] for j in first]


def comparison_bases(modes: Sequence[str]) -> list[str]:
    """Modes every other mode's speed is compared with: greedy, the ablations, the
    other programs (pld, llama-server) and, when ``serve`` runs, the in-process
    ``structspec`` (what the serve path costs)."""
    serve = SERVE_MODE in modes
    return [
        m
        for m in modes
        if m == "greedy"
        or ablation_sources(m) is not None
        or is_external_mode(m)
        or (serve and m == "structspec")
    ]


#: A token's logit may sit this far below its row's maximum through batch-shape
#: noise alone (calibrated on plain greedy output; see docs/MEASUREMENTS.md).
NEAR_TIE = 1.0


@dataclass
class Run:
    """One generation of one prompt in one mode."""

    prompt_id: str
    mode: str
    repeat: int
    tokens: list[int]
    seconds: float  # request to last token
    decode_seconds: float  # first token to last token
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    sources: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> drafted, accepted
    trace: list[PassTrace] = field(default_factory=list)
    #: The engine's own prefill, drafting and verification time (the engine's
    #: modes and ``serve``; ``None``: another program's).
    engine_seconds: float | None = None

    @property
    def decode_tps(self) -> float:
        n = len(self.tokens) - 1
        return n / self.decode_seconds if n > 0 and self.decode_seconds > 0 else 0.0

    @property
    def e2e_tps(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else 0.0


#: Temperature 0: every mode decodes greedily (the default).
GREEDY = Sampling()
#: llama.cpp's seed is 32 bits; this one value of it means "a random seed".
LLAMA_RANDOM_SEED = 0xFFFFFFFF


def llama_seed(sampling: Sampling) -> int | None:
    """The benchmark's seed as llama.cpp takes it (``None``: no seed, random)."""
    return None if sampling.seed is None else sampling.seed % (1 << 32)


def run_engine(
    engine: Engine,
    prompt: Prompt,
    tokens: Sequence[int],
    mode: str,
    repeat: int,
    max_tokens: int,
    sampling: Sampling = GREEDY,
) -> Run:
    engine.model.truncate(0)  # cold cache: no mode profits from another's prefill
    t0 = time.perf_counter()
    t_first = None
    gen = engine.stream(
        tokens,
        GenerationOptions(max_tokens=max_tokens, speculative=mode != "greedy", sampling=sampling),
        language=prompt.language,
    )
    for step in gen:
        if t_first is None and step.tokens:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    res = gen.result
    assert res is not None
    s = res.stats
    return Run(
        prompt.id,
        mode,
        repeat,
        res.tokens,
        t_end - t0,
        t_end - (t_first or t_end),
        passes=s.passes,
        drafted=s.drafted,
        accepted=s.accepted,
        sources={k: (v.drafted, v.accepted) for k, v in s.by_source().items()},
        trace=s.trace,
        engine_seconds=(s.prefill_ms + s.draft_ms + s.decode_ms) / 1000.0,
    )


class BaselineError(RuntimeError):
    """The llama-cpp-python baseline failed on a prompt."""


class PromptLookupBaseline:
    """llama-cpp-python's own prompt-lookup speculative decoding, greedy or sampled.

    Sampled, ``Llama.generate`` samples every verified row with llama.cpp's chain
    (top_k, typical_p 1 = off, top_p, min_p, temperature, then a draw seeded
    with the benchmark's seed) and keeps a draft token only when it equals the
    row's sample: plain sampling's distribution, from its own random stream.
    """

    def __init__(
        self, model_path: str, threads: int, n_ctx: int, sampling: Sampling = GREEDY
    ) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.sampling = sampling
        with plain_buffers_for_llama():  # not AMX's buffers: they crash (model/llama.py)
            self.llm = Llama(
                model_path=model_path,
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
                # With a draft model Llama keeps logits for every position, but sizes
                # its scores buffer by this argument: left False, the buffer holds
                # n_batch rows and a prompt longer than 512 tokens overruns it.
                # (Rows are allocated as touched: a long context costs only what is used.)
                logits_all=True,
                verbose=False,
            )

    def run(
        self,
        prompt: Prompt,
        tokens: Sequence[int],
        repeat: int,
        max_tokens: int,
        is_eog: Callable[[int], bool],
    ) -> Run:
        self.llm.reset()
        out: list[int] = []
        t0 = time.perf_counter()
        t_first = None
        s = self.sampling
        if s.greedy:
            gen = self.llm.generate(list(tokens), top_k=1, temp=0.0, repeat_penalty=1.0)
        else:
            # generate() builds its sampler from the seed of this moment: the same
            # seed for every prompt, like the engine's modes. set_seed, not
            # Llama(seed=...), which would take seed 0 for "random".
            seed = llama_seed(s)
            self.llm.set_seed(LLAMA_RANDOM_SEED if seed is None else seed)
            gen = self.llm.generate(
                list(tokens),
                top_k=s.top_k,
                top_p=s.top_p,
                min_p=s.min_p,
                typical_p=1.0,
                temp=s.temperature,
                repeat_penalty=1.0,
            )
        try:
            for tok in gen:
                if is_eog(tok):
                    break
                if t_first is None:
                    t_first = time.perf_counter()
                out.append(tok)
                if len(out) >= max_tokens:
                    break
        except (ValueError, RuntimeError) as exc:
            # llama-cpp-python's own speculative path can overrun its scores buffer
            # (seen once in a 164-prompt run): the baseline's failure, reported, not ours.
            self.llm.reset()
            raise BaselineError(f"pld failed on {prompt.id}: {exc}") from None
        finally:
            gen.close()
        t_end = time.perf_counter()
        return Run(prompt.id, "pld", repeat, out, t_end - t0, t_end - (t_first or t_end))


@dataclass
class Exactness:
    """Teacher-forced check of emitted tokens: exact argmax, near-tie, or off."""

    exact: int = 0
    near_tie: int = 0
    off: int = 0
    worst_gap: float = 0.0
    #: generations checked again one row per pass (``output_gaps``)
    rechecked: int = 0

    def add(self, gaps: Sequence[float], *, rechecked: bool = False) -> None:
        self.rechecked += rechecked
        for g in gaps:
            if g <= 0.0:
                self.exact += 1
            elif g <= NEAR_TIE:
                self.near_tie += 1
            else:
                self.off += 1
            self.worst_gap = max(self.worst_gap, g)


def teacher_forced_gaps(
    model: Model, prompt_tokens: Sequence[int], output: Sequence[int]
) -> list[float]:
    model.truncate(0)
    return [c.gap for c in model.teacher_forced(prompt_tokens, output)]


def stepwise_gaps(model: Model, prompt_tokens: Sequence[int], output: Sequence[int]) -> list[float]:
    """Each output token's gap to its row's argmax, the output fed one row per pass.

    That is how plain greedy decoding evaluates every position, the reference
    that the one-batch check (``teacher_forced_gaps``) approximates in fewer
    passes; the two differ by the batch-shape noise of docs/MEASUREMENTS.md §2.
    """
    if not output:
        return []
    model.truncate(0)
    model.prefill(prompt_tokens[:-1])
    gaps: list[float] = []
    for fed, token in zip([prompt_tokens[-1], *output[:-1]], output, strict=True):
        row = np.asarray(model.verify([fed]).logits[0])
        gaps.append(float(row.max() - row[token]))
    return gaps


def output_gaps(
    model: Model, prompt_tokens: Sequence[int], output: Sequence[int]
) -> tuple[list[float], bool]:
    """The gaps the exactness check counts, and whether the output was checked again.

    Prompt and output are evaluated in one batch; a generation with a token
    past ``NEAR_TIE`` there is checked again one row per pass
    (``stepwise_gaps``), and that check counts: a near-tie that the one
    batch's shape alone moved past the tolerance is noise, not an error.
    """
    gaps = teacher_forced_gaps(model, prompt_tokens, output)
    if max(gaps, default=0.0) <= NEAR_TIE:
        return gaps, False
    return stepwise_gaps(model, prompt_tokens, output), True


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile of ``values``, interpolated between ranks (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max, p10 and p90 of ``values``."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "p10": 0.0, "p90": 0.0}
    v = sorted(values)

    def q(f: float) -> float:
        return v[min(len(v) - 1, max(0, round(f * (len(v) - 1))))]

    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "p10": q(0.1), "p90": q(0.9)}


def summarize(
    runs: Sequence[Run], modes: Sequence[str], sampling: Sampling = GREEDY
) -> dict[str, Any]:
    """Per-mode totals, per-prompt speed ratios against greedy and pld, acceptance.

    ``identical_to_greedy`` counts the prompts whose text equals the ``greedy``
    mode's. Sampled, only the engine's own modes draw from the same random
    numbers as ``greedy`` (plain sampling), and only with a seed: the count is
    left out for the others.
    """
    text_compared = (
        (lambda m: not is_llama_server_mode(m))
        if sampling.greedy
        else (lambda m: sampling.seed is not None and not is_external_mode(m))
    )
    by: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        by.setdefault((r.prompt_id, r.mode), []).append(r)
    prompt_ids = list(dict.fromkeys(r.prompt_id for r in runs))
    out: dict[str, Any] = {"prompts": len(prompt_ids), "modes": {}}
    med_tps: dict[tuple[str, str], float] = {
        k: statistics.median(r.decode_tps for r in v) for k, v in by.items()
    }
    med_e2e: dict[tuple[str, str], float] = {
        k: statistics.median(r.e2e_tps for r in v) for k, v in by.items()
    }
    for mode in modes:
        rs = [r for r in runs if r.mode == mode]
        drafted = sum(r.drafted for r in rs)
        accepted = sum(r.accepted for r in rs)
        passes = sum(r.passes for r in rs)
        m: dict[str, Any] = {
            "runs": len(rs),
            "decode_tps": _aggregate_tps(rs),
            "e2e_tps": sum(len(r.tokens) for r in rs) / max(1e-9, sum(r.seconds for r in rs)),
            "tokens_per_pass": sum(len(r.tokens) for r in rs) / passes if passes else None,
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
        }
        outside = [r.seconds - r.engine_seconds for r in rs if r.engine_seconds is not None]
        if outside:  # the request's time around the engine's work (bookkeeping, HTTP)
            m["outside_engine_ms"] = 1000.0 * statistics.median(outside)
        per_source: dict[str, list[int]] = {}
        for r in rs:
            for name, (d, a) in r.sources.items():
                acc = per_source.setdefault(name, [0, 0])
                acc[0] += d
                acc[1] += a
        m["sources"] = {
            name: {
                "drafted": d,
                "accepted": a,
                "acceptance": a / d if d else 0.0,
                "share_of_accepted": a / accepted if accepted else 0.0,
            }
            for name, (d, a) in sorted(per_source.items())
        }
        for base in comparison_bases(modes):
            if base == mode:
                continue
            ratios = [
                med_tps[(p, mode)] / med_tps[(p, base)]
                for p in prompt_ids
                if med_tps.get((p, base)) and (p, mode) in med_tps
            ]
            m[f"ratio_vs_{base}"] = spread(ratios)
            m[f"ratios_vs_{base}"] = ratios
            m[f"e2e_ratio_vs_{base}"] = spread(
                [
                    med_e2e[(p, mode)] / med_e2e[(p, base)]
                    for p in prompt_ids
                    if med_e2e.get((p, base)) and (p, mode) in med_e2e
                ]
            )
            per_repeat: list[float] = []
            for rep in sorted({r.repeat for r in rs}):
                tps = _aggregate_tps([r for r in rs if r.repeat == rep])
                tps_base = _aggregate_tps([r for r in runs if r.mode == base and r.repeat == rep])
                if tps and tps_base:
                    per_repeat.append(tps / tps_base)
            m[f"aggregate_vs_{base}_per_repeat"] = spread(per_repeat)
        if mode != "greedy" and "greedy" in modes and text_compared(mode):
            same = sum(
                1
                for p in prompt_ids
                if (p, mode) in by
                and (p, "greedy") in by
                and by[(p, mode)][0].tokens == by[(p, "greedy")][0].tokens
            )
            m["identical_to_greedy"] = same
        out["modes"][mode] = m
    # aggregate ratios need every mode's totals: filled in after the loop
    for mode, m in out["modes"].items():
        for base in comparison_bases(modes):
            b = out["modes"].get(base)
            if base == mode or b is None:
                continue
            if b["decode_tps"]:
                m[f"aggregate_vs_{base}"] = m["decode_tps"] / b["decode_tps"]
            if b["e2e_tps"]:
                m[f"e2e_vs_{base}"] = m["e2e_tps"] / b["e2e_tps"]
    return out


def acceptance_by_position(runs: Sequence[Run], most: int = 16) -> list[tuple[int, int, float]]:
    """``(position, drafted, acceptance)`` of draft tokens by their place in the draft.

    Position ``i`` (1-based) counts the passes whose draft reached ``i`` tokens;
    it was accepted when the pass kept at least ``i`` of them.
    """
    reached = [0] * (most + 1)
    kept = [0] * (most + 1)
    for r in runs:
        for t in r.trace:
            for i in range(1, min(t.drafted, most) + 1):
                reached[i] += 1
                kept[i] += t.accepted >= i
    return [(i, reached[i], kept[i] / reached[i]) for i in range(1, most + 1) if reached[i]]


def _aggregate_tps(runs: Sequence[Run]) -> float:
    toks = sum(len(r.tokens) - 1 for r in runs)
    secs = sum(r.decode_seconds for r in runs)
    return toks / secs if secs else 0.0

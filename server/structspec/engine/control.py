"""Draft-length control: how many drafted tokens are worth one verification pass.

A pass that verifies ``k`` drafted tokens decodes ``k + 1`` rows (the pending
bonus token plus the draft) and costs ``t(k + 1)`` milliseconds. If ``p_i`` is
the probability that draft token ``i`` is accepted given that tokens
``1..i-1`` were, the pass yields in expectation

    E(k) = 1 + sum_{i=1..k} prod_{j=1..i} p_j          (the bonus always comes)

tokens, and we pick ``k`` to maximise ``E(k) / t(k + 1)``. Greedy decoding is
``k = 0`` at ``1 / t(1)``; a draft is only sent when its gain

    gain(k) = (E(k) / t(k + 1)) / (1 / t(1))

exceeds ``min_gain`` (1 by default). On CPU ``t`` is far from flat (every row
pays the output head) and not monotone (row counts that are multiples of 4 are
cheap), so a pass may be padded to a cheaper row count with further draft
tokens: they cost nothing extra and may be accepted.

- ``CostModel`` holds ``t(n)`` for ``n = 1..16`` (measured per model and
  machine, see ``measure_cost``).
- ``AcceptanceEstimator`` keeps ``p_i`` per source key and draft position as
  decayed acceptance counts.
- ``MarginGate`` scales the expectation by how the acceptance of the first
  draft token depends on the top-1/top-2 margin of the last verified row: a
  confident model is easier to predict.
- ``AgreementGate`` scales the first token's acceptance by whether another
  source drafts the same token; ``TokenClassGate`` scales each token's by
  its kind, the kind before it and whether the source doubts it (copies
  break at numbers, and where another occurrence of the copy went elsewhere);
  ``ProvenanceGate`` by how the text a copy is taken from came about (a
  token that broke an earlier copy tends to break this one).
- ``DraftPlanner`` scores every proposal, sent or not, by the text that
  followed it, so all of these learn from every pass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from structspec.drafts.base import Draft, DraftContext, DraftSource
from structspec.model.base import Model

MAX_ROWS = 16

#: Cuts a proposal to what a pass can verify (``None``: nothing); see ``DraftPlanner.plan``.
Clip = Callable[[Draft], Draft | None]


@dataclass(frozen=True)
class CostModel:
    """``ms[n - 1]`` is the time of one verification pass of ``n`` rows."""

    ms: tuple[float, ...]
    #: ``_padded[n - 1]`` is ``padded_rows(n)``, computed once: it is asked on every pass.
    _padded: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.ms or any(not (v > 0 and math.isfinite(v)) for v in self.ms):
            raise ValueError(f"a cost table needs positive times, got {self.ms!r}")
        padded = []
        for rows in range(1, len(self.ms) + 1):
            best = rows
            for n in range(rows, len(self.ms) + 1):
                if self.ms[n - 1] < self.ms[best - 1]:
                    best = n
            padded.append(best)
        object.__setattr__(self, "_padded", tuple(padded))

    @classmethod
    def linear(cls, base: float = 1.0, per_row: float = 0.0, rows: int = MAX_ROWS) -> CostModel:
        """``t(n) = base + per_row * (n - 1)``: a GPU-like flat table when ``per_row`` is small."""
        return cls(tuple(base + per_row * (n - 1) for n in range(1, rows + 1)))

    @property
    def max_rows(self) -> int:
        return len(self.ms)

    def t(self, rows: int) -> float:
        return self.ms[min(rows, self.max_rows) - 1]

    def padded_rows(self, rows: int) -> int:
        """The cheapest row count ``>= rows`` (pad to it when drafts allow)."""
        return self._padded[min(rows, self.max_rows) - 1]

    def best_k(self, probs: Sequence[float], scale: float = 1.0) -> tuple[int, float]:
        """Best number of draft tokens for conditional acceptance ``probs``, and its gain.

        ``scale`` multiplies the expected number of accepted drafts (the margin
        gate). The row count of each ``k`` is padded to the cheapest count the
        draft can fill.
        """
        t1 = self.ms[0]
        best_k, best_gain = 0, 1.0
        expected, survive = 1.0, 1.0
        n_avail = min(len(probs), self.max_rows - 1)
        for k in range(1, n_avail + 1):
            survive *= probs[k - 1]
            expected += scale * survive
            rows = min(self.padded_rows(k + 1), n_avail + 1)
            gain = (expected / self.t(rows)) * t1
            if gain > best_gain:
                best_k, best_gain = k, gain
        return best_k, best_gain


def measure_cost(
    run_rows: Callable[[int], None], *, rows: int = MAX_ROWS, reps: int = 5
) -> CostModel:
    """Time ``run_rows(n)`` (one verification pass of ``n`` rows) for ``n = 1..rows``.

    Sizes are interleaved across repetitions so that drift of a shared machine
    hits every size alike; the median of each size is kept as it is. A larger
    pass that measured cheaper than a smaller one (row counts that are
    multiples of 4 on CPU) is what ``CostModel.padded_rows`` pads drafts to.
    """
    samples: dict[int, list[float]] = {n: [] for n in range(1, rows + 1)}
    run_rows(1)  # warm-up
    for _ in range(reps):
        for n in range(1, rows + 1):
            t0 = time.perf_counter()
            run_rows(n)
            samples[n].append((time.perf_counter() - t0) * 1000.0)
    med = [sorted(v)[len(v) // 2] for _, v in sorted(samples.items())]
    return CostModel(tuple(med))


class ThreadCosts:
    """The cost table of the thread count the model decodes on now.

    On a CPU one row's pass is bound by reading the weights, which more
    threads barely speed up, while many rows are arithmetic that the threads
    share: on fewer threads a pass of ``n`` rows costs more times a pass of one
    (``docs/MEASUREMENTS.md`` §4). When other processes take the cores the
    model decodes on fewer threads (``model/threads.py``), and a draft judged
    against the all-threads table then costs more than it saves. Tables are
    measured at all ``most`` threads and at one; a count in between gets the
    row-by-row interpolation of the two.
    """

    def __init__(
        self, most: int, full: CostModel, one: CostModel, threads: Callable[[], int]
    ) -> None:
        self.most = max(1, most)
        self.full, self.one = full, one
        self._threads = threads
        self._tables: dict[int, CostModel] = {self.most: full, 1: one}

    def current(self) -> CostModel:
        """The table of the next decode's thread count."""
        k = min(max(1, self._threads()), self.most)
        table = self._tables.get(k)
        if table is None:
            w = (k - 1) / (self.most - 1)  # most > k > 1 here
            rows = min(self.full.max_rows, self.one.max_rows)
            table = CostModel(
                tuple((1 - w) * self.one.t(n) + w * self.full.t(n) for n in range(1, rows + 1))
            )
            self._tables[k] = table
        return table


class AcceptanceEstimator:
    """Rolling acceptance per source key and draft position.

    For each key and position ``i`` it keeps decayed counts of trials and
    successes of "draft token ``i`` accepted, given ``1..i-1`` were". A prior of
    ``prior_weight`` pseudo-trials at the source's prior rate starts it off and
    keeps rare keys sane; a ``source:tier`` key borrows its source's estimate
    as its prior.

    The decay is fast on purpose: the planner scores every proposal (see
    ``DraftPlanner._settle``), so a key is observed on most passes, and what
    its last few proposals did predicts the next one better than a long
    average (a copy that is running keeps running). The decay and prior
    weight were chosen on the replay recordings (``docs/MEASUREMENTS.md`` §3).
    """

    def __init__(
        self,
        priors: dict[str, float] | None = None,
        *,
        default_prior: float = 0.5,
        prior_weight: float = 6.0,
        decay: float = 0.7,
        max_k: int = MAX_ROWS - 1,
    ) -> None:
        self.priors = dict(priors or {})
        self.default_prior = default_prior
        self.prior_weight = prior_weight
        self.decay = decay
        self.max_k = max_k
        self._trials: dict[str, list[float]] = {}
        self._hits: dict[str, list[float]] = {}

    def _counts(self, key: str) -> tuple[list[float], list[float]]:
        if key not in self._trials:
            self._trials[key] = [0.0] * self.max_k
            self._hits[key] = [0.0] * self.max_k
        return self._trials[key], self._hits[key]

    def probs(self, key: str, k: int) -> list[float]:
        """Estimated acceptance of draft positions ``0..k-1`` for ``key``.

        Each position's prior is the estimate of the position before it (a
        draft that has been right so far tends to stay right), so positions
        never drafted yet do not look worse than the ones that were; position
        0 starts from the key's prior, or its source's estimate for a tier.
        """
        k = min(k, self.max_k)
        trials, hits = self._trials.get(key), self._hits.get(key)
        source, _, tier = key.partition(":")
        if key in self.priors:
            prior = self.priors[key]
        elif tier:
            prior = self.probs(source, 1)[0] if k else 0.0
        else:
            prior = self.priors.get(source, self.default_prior)
        w = self.prior_weight
        out: list[float] = []
        for i in range(k):
            if trials is not None and hits is not None:
                prior = (hits[i] + prior * w) / (trials[i] + w)
            out.append(prior)
        return out

    def prob(self, key: str, i: int) -> float:
        """Estimated acceptance of draft position ``i`` (0-based) for ``key``."""
        return self.probs(key, min(i, self.max_k - 1) + 1)[-1]

    def observe(self, key: str, drafted: int, accepted: int) -> None:
        """Positions ``< accepted`` succeeded, position ``accepted`` failed, the rest unseen."""
        if drafted <= 0:
            return
        for k in (key, key.partition(":")[0]) if ":" in key else (key,):
            trials, hits = self._counts(k)
            for i in range(min(accepted + 1, drafted, self.max_k)):
                trials[i] = trials[i] * self.decay + 1.0
                hits[i] = hits[i] * self.decay + (1.0 if i < accepted else 0.0)


class MarginGate:
    """Scales expected acceptance by the model's confidence at the last verified row.

    Margins (top-1 minus top-2 logit) fall into ``edges`` buckets; per bucket
    it tracks how often the first draft token is accepted, relative to all
    buckets. The ratio, shrunk towards 1 while a bucket has few samples, is
    the scale applied to the expected accepted drafts.
    """

    def __init__(
        self,
        edges: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0),
        *,
        weight: float = 8.0,
        decay: float = 0.995,
        bounds: tuple[float, float] = (0.1, 1.5),
    ) -> None:
        self.edges = tuple(edges)
        self.weight = weight
        self.decay = decay
        self.bounds = bounds
        n = len(self.edges) + 1
        self._trials = [0.0] * n
        self._hits = [0.0] * n

    def bucket(self, margin: float) -> int:
        for i, e in enumerate(self.edges):
            if margin < e:
                return i
        return len(self.edges)

    def scale(self, margin: float) -> float:
        total_t, total_h = sum(self._trials), sum(self._hits)
        if total_t < 1.0:
            return 1.0
        overall = (total_h + 0.5) / (total_t + 1.0)
        b = self.bucket(margin)
        rate = (self._hits[b] + overall * self.weight) / (self._trials[b] + self.weight)
        lo, hi = self.bounds
        return min(hi, max(lo, rate / overall))

    def observe(self, margin: float, accepted_first: bool) -> None:
        b = self.bucket(margin)
        self._trials = [t * self.decay for t in self._trials]
        self._hits = [h * self.decay for h in self._hits]
        self._trials[b] += 1.0
        self._hits[b] += 1.0 if accepted_first else 0.0


class TokenClassGate:
    """Scales the acceptance of each drafted token by what kind of token it is.

    Copies break at some kinds of tokens more than at others: replaying
    HumanEval greedy outputs, a long lookup copy's token after a number or
    operator is a number that differs from the copied one a third of the time,
    where other tokens follow the copy 96% of the time. Each drafted token
    gets a class, and per class the gate tracks how often such a token is
    accepted given the ones before it were, relative to all classes of its
    kind, shrunk towards 1 while a class has few samples:

    - a draft's first token: its kind (newline, space, word, number, other),
      against the first tokens' overall rate (the margin and agreement gates
      weigh it too);
    - a later token: the pair (kind of the token before it, its kind): where a
      copy breaks depends on both (on the HumanEval recording a copied number
      after an operator or bracket held about half the time, after another
      number 96%);
    - the draft's ``fork`` (``Draft.fork``: a token where another occurrence
      of the copied text continued differently) and the tokens before it get
      classes of their own. Replaying the HumanEval and mixed-suite
      recordings, a lookup draft's fork token was accepted 42% and 64% of the
      time where other later tokens were 93% and 91%, and the tokens before
      a fork 99% and 95%.

    With these classes (against kinds alone, no fork) the replay predicted
    1.281x against 1.261x on HumanEval and 1.250x against 1.250x on the
    mixed suite, and higher on both in each of four prompt orders.
    """

    KINDS = ("newline", "space", "word", "number", "other")

    def __init__(self, *, weight: float = 20.0, decay: float = 0.999) -> None:
        self.weight = weight
        self.decay = decay
        #: class -> [trials, hits] in units of ``_unit``: decaying every count
        #: is multiplying ``_unit`` by ``decay`` (the gate observes a few
        #: dozen tokens per pass). ``first:`` classes are a draft's first token.
        self._counts: dict[str, list[float]] = {}
        #: The same summed over first tokens (index 1) and later ones (index 0).
        self._totals = ([0.0, 0.0], [0.0, 0.0])
        self._unit = 1.0
        self._kind: dict[int, str] = {}

    def token_kind(self, model: Model, token: int) -> str:
        kind = self._kind.get(token)
        if kind is None:
            text = model.token_bytes(token).decode("utf-8", "replace")
            core = text.strip()
            if "\n" in text:
                kind = "newline"
            elif not core:
                kind = "space"
            elif core.isdigit():
                kind = "number"
            elif core.replace("_", "a").isalnum():
                kind = "word"
            else:
                kind = "other"
            self._kind[token] = kind
        return kind

    def classes(self, model: Model, draft: Draft) -> list[str] | None:
        """The class of each token of ``draft`` (``None``: the gate does not judge it)."""
        kinds = [self.token_kind(model, tok) for tok in draft.tokens]
        out = [f"first:{kinds[0]}"] + [f"{a}>{b}" for a, b in zip(kinds, kinds[1:], strict=False)]
        fork = draft.fork
        if fork is not None and 0 < fork < len(out):
            out[1:fork] = ["agreed"] * (fork - 1)
            out[fork] = "fork"
        return out

    def _overall(self, first: bool) -> tuple[float, float]:
        trials, hits = (v * self._unit for v in self._totals[first])
        return trials, (hits + 0.5) / (trials + 1.0)

    def scales(self, model: Model, draft: Draft) -> list[float]:
        """A factor per drafted token, 1 until later tokens have been observed."""
        later_trials, later = self._overall(False)
        classes = self.classes(model, draft) if later_trials >= 1.0 else None
        if classes is None:
            return [1.0] * len(draft.tokens)
        _, first = self._overall(True)
        out = []
        for i, cls in enumerate(classes):
            overall = first if i == 0 else later
            trials, hits = self._counts.get(cls, (0.0, 0.0))
            trials, hits = trials * self._unit, hits * self._unit
            rate = (hits + overall * self.weight) / (trials + self.weight)
            out.append(min(1.0 / overall, rate / overall))
        return out

    def observe(self, model: Model, draft: Draft, accepted: int) -> None:
        """Tokens before ``accepted`` held, the one at ``accepted`` did not."""
        classes = self.classes(model, draft)
        if classes is None:
            return
        for j in range(min(accepted + 1, len(classes))):
            self._unit *= self.decay
            if self._unit < 1e-100:  # rescale before the counts overflow
                for counts in (*self._counts.values(), *self._totals):
                    counts[0] *= self._unit
                    counts[1] *= self._unit
                self._unit = 1.0
            hit = 1.0 / self._unit if j < accepted else 0.0
            for counts in (self._counts.setdefault(classes[j], [0.0, 0.0]), self._totals[j == 0]):
                counts[0] += 1.0 / self._unit
                counts[1] += hit


class ProvenanceGate(TokenClassGate):
    """Scales the acceptance of each copied token by how the text it copies came about.

    A lookup draft's ``Draft.provenance`` says, per token, whether the copied
    token was itself predictable by a copy when it was written (``c``/``C``),
    broke one (``x``/``X``), had no earlier match (``-``), or lies past the
    text (``o``). The classes are those letters, the first token's apart
    (``first:`` them); rates are relative to all first or all later tokens,
    as in ``TokenClassGate``, whose factors this one multiplies. Drafts
    without a provenance (other sources) are not judged.

    Replaying both recordings in four prompt orders under both committed cost
    tables, it lifted the mean slowest prompt in all four (recording, table)
    pairs and the mean predicted speed-up in three (HumanEval 1.274x to 1.287x,
    and with the 2-thread table 1.417x to 1.424x and the mixed suite 1.402x
    to 1.420x); the mixed suite with the recordings' table stayed level
    (1.250x to 1.248x). See ``docs/BENCHMARKS-replay.md``.
    """

    def __init__(self, *, weight: float = 20.0, decay: float = 0.9999) -> None:
        # A slow decay: how a copied token came about predicts alike across
        # prompts (decay 0.9995 and 0.999 were each a little worse on the replay).
        super().__init__(weight=weight, decay=decay)

    def classes(self, model: Model, draft: Draft) -> list[str] | None:
        letters = draft.provenance
        if len(letters) != len(draft.tokens) or not letters:
            return None
        return [f"first:{letters[0]}", *letters[1:]]


def _situation(draft: Draft, drafts: Sequence[Draft]) -> str:
    """How the other sources' drafts of the same pass relate to ``draft``'s first token."""
    others = [d.tokens[0] for d in drafts if d.source != draft.source]
    if not others:
        return "alone"
    return "agree" if draft.tokens[0] in others else "disagree"


class AgreementGate:
    """Scales a draft's first-token acceptance by whether other sources guess alike.

    Two sources that reach the same next token by different means are rarely
    both wrong, and a source contradicted by another is often wrong: on the
    proposals of the HumanEval and mixed-suite recordings, a rule's first
    token is accepted 95% of the time when another source drafts it too and
    8% when another drafts something else, a two-token lookup match's 98% and
    17%. Per source and situation (``agree``, ``disagree``, ``alone``) it
    tracks first-token acceptance relative to the source's overall rate,
    shrunk towards 1 while a situation has few samples.
    """

    def __init__(
        self,
        *,
        weight: float = 8.0,
        decay: float = 0.999,
        bounds: tuple[float, float] = (0.1, 1.5),
    ) -> None:
        self.weight = weight
        self.decay = decay
        self.bounds = bounds
        #: (source, situation or "" for all) -> [trials, hits], decayed.
        self._counts: dict[tuple[str, str], list[float]] = {}

    def scale(self, source: str, situation: str) -> float:
        total = self._counts.get((source, ""))
        if total is None or total[0] < 1.0:
            return 1.0
        overall = (total[1] + 0.5) / (total[0] + 1.0)
        trials, hits = self._counts.get((source, situation), (0.0, 0.0))
        rate = (hits + overall * self.weight) / (trials + self.weight)
        lo, hi = self.bounds
        return min(hi, max(lo, rate / overall))

    def observe(self, source: str, situation: str, accepted_first: bool) -> None:
        for key in ((source, ""), (source, situation)):
            counts = self._counts.setdefault(key, [0.0, 0.0])
            counts[0] = counts[0] * self.decay + 1.0
            counts[1] = counts[1] * self.decay + (1.0 if accepted_first else 0.0)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one pass verifies: ``draft`` (possibly padded) and the gain expected of it."""

    draft: Draft
    gain: float


class DraftPlanner:
    """Asks every source for a draft and keeps the one with the best expected gain.

    A draft is sent when its expected gain exceeds ``min_gain``, or
    ``min_gain_behind`` while the generation's drafts have so far cost more than
    they saved (``balance_ms < 0``). The stricter bar when behind bounds what a
    generation that drafts badly can lose against greedy decoding; on the
    replay recordings 1.1 lifts the slowest prompts and costs HumanEval little
    (``docs/MEASUREMENTS.md`` §3).
    """

    def __init__(
        self,
        cost: CostModel,
        acceptance: AcceptanceEstimator | None = None,
        gate: MarginGate | None = None,
        *,
        classes: TokenClassGate | None = None,
        agreement: AgreementGate | None = None,
        provenance: ProvenanceGate | None = None,
        min_gain: float = 1.0,
        min_gain_behind: float = 1.1,
    ) -> None:
        self.cost = cost
        self.acceptance = acceptance or AcceptanceEstimator()
        self.gate = gate
        self.classes = classes
        self.agreement = agreement
        self.provenance = provenance
        self.min_gain = min_gain
        self.min_gain_behind = min_gain_behind
        #: Milliseconds this generation's drafts saved (negative: lost) against
        #: greedy, by the cost table: sum of (accepted + 1) * t(1) - t(rows).
        self.balance_ms = 0.0
        #: Proposals of this generation not scored yet: (length of the text
        #: when proposed, the draft, agreement situation), and the text they
        #: continue.
        self._shadow: list[tuple[int, Draft, str]] = []
        self._ctx: DraftContext | None = None
        self._generation = -1

    def start_generation(self) -> None:
        """A new generation keeps its own balance (statistics carry over)."""
        self.balance_ms = 0.0
        self._settle(final=True)

    def plan(
        self,
        ctx: DraftContext,
        sources: Sequence[DraftSource],
        limit: int,
        margin: float,
        *,
        clip: Clip | None = None,
    ) -> Plan | None:
        """The draft worth verifying next (at most ``limit`` tokens), or ``None``: a plain step.

        ``clip`` cuts each proposal to what the pass can use (the engine's stop
        strings and token healing) before it is priced, so a proposal is judged,
        and learnt from, by the tokens that would be verified.
        """
        if ctx is not self._ctx or ctx.generation != self._generation:
            self._settle(final=True)
            self._ctx, self._generation = ctx, ctx.generation
        self._settle()
        limit = min(limit, self.cost.max_rows - 1)
        if limit <= 0:
            return None
        scale = self.gate.scale(margin) if self.gate else 1.0
        floor = self.min_gain if self.balance_ms >= 0.0 else self.min_gain_behind
        best: Plan | None = None
        start = len(ctx.tokens)
        drafts = list(self.proposals(ctx, sources, limit, clip))
        for draft in drafts:
            tokens = draft.tokens
            situation = _situation(draft, drafts) if self.agreement is not None else ""
            self._shadow.append((start, draft, situation))
            probs = self.acceptance.probs(draft.key, len(tokens))
            if self.agreement is not None:
                probs[0] = min(1.0, probs[0] * self.agreement.scale(draft.source, situation))
            if self.classes is not None:
                factors = self.classes.scales(ctx.model, draft)
                probs = [min(1.0, p * f) for p, f in zip(probs, factors, strict=True)]
            if self.provenance is not None:
                factors = self.provenance.scales(ctx.model, draft)
                probs = [min(1.0, p * f) for p, f in zip(probs, factors, strict=True)]
            k, gain = self.cost.best_k(probs, scale)
            if k == 0 or gain <= floor:
                continue
            if best is not None and gain <= best.gain:
                continue
            # Pad to the cheapest row count the draft can fill: free extra guesses.
            rows = min(self.cost.padded_rows(k + 1), len(tokens) + 1)
            best = Plan(draft.head(rows - 1), gain)
        return best

    @staticmethod
    def proposals(
        ctx: DraftContext, sources: Sequence[DraftSource], limit: int, clip: Clip | None = None
    ) -> Iterator[Draft]:
        """Each source's draft, cut to what the buffer's policy lets it draft now (and ``clip``)."""
        for source in sources:
            ctx.max_tokens = ctx.policy.cap(source.name, limit)
            if ctx.max_tokens <= 0:
                continue
            draft = source.propose(ctx)
            if draft is None or not draft.tokens:
                continue
            usable = draft.head(ctx.max_tokens)
            clipped = clip(usable) if clip is not None else usable
            if clipped is not None and clipped.tokens:
                yield clipped

    def _settle(self, *, final: bool = False) -> None:
        """Score every proposal whose fate the text now tells, sent or not.

        The text that followed a proposal is the model's own (the output is
        the greedy output whatever was drafted), so a proposal the planner
        declined is scored as if it had been sent, once the output has grown
        past its first wrong token or its end. Every key is thereby observed
        whenever its source proposes, not only when it wins a pass: no estimate
        sticks below the break-even point for want of trials. ``final`` (the
        generation ended) scores what is left on the tokens known so far.
        """
        if self._ctx is None or not self._shadow:
            return
        text = self._ctx.tokens
        keep: list[tuple[int, Draft, str]] = []
        for start, draft, situation in self._shadow:
            key, tokens = draft.key, draft.tokens
            known = len(text) - start
            accepted = 0
            while (
                accepted < len(tokens)
                and accepted < known
                and tokens[accepted] == text[start + accepted]
            ):
                accepted += 1
            if accepted < min(known, len(tokens)) or accepted == len(tokens):
                self.acceptance.observe(key, len(tokens), accepted)
                if self.classes is not None:
                    self.classes.observe(self._ctx.model, draft, accepted)
                if self.provenance is not None:
                    self.provenance.observe(self._ctx.model, draft, accepted)
            elif final:
                self.acceptance.observe(key, accepted, accepted)  # later positions unseen
            else:
                keep.append((start, draft, situation))
                continue
            if self.agreement is not None and known > 0:
                self.agreement.observe(key.partition(":")[0], situation, accepted > 0)
        self._shadow = keep

    def observe(self, plan: Plan, accepted: int, margin: float) -> None:
        """The pass of ``plan`` accepted ``accepted`` tokens (its source's key is scored by
        ``_settle`` with every other proposal)."""
        rows = len(plan.draft.tokens) + 1
        self.balance_ms += (accepted + 1) * self.cost.t(1) - self.cost.t(rows)
        if self.gate is not None:
            self.gate.observe(margin, accepted > 0)

"""Replay recorded greedy outputs through the planner and the draft sources, without the model.

Why: the decode loop's output is the greedy output whatever the drafts (see
``structspec.engine.decode``), so what a change to the planner or a draft
source can alter is only *which passes* are made: which source drafts, what
it drafts, how much of it is accepted. Given the model's greedy choices and
the top-1/top-2 margin of each row, recorded once on the real model, every
pass is determined, and so is its predicted cost from a fixed cost table. The
replay therefore runs the real planner and the real sources in milliseconds
per prompt, deterministically. A SHA-256 over every pass (source, drafted
tokens, accepted length) says whether a restructuring changed anything the
model would see; a second one over every proposal of every source, kept by
the planner or not, covers sources that rarely win a pass.

What the replay cannot know: rows after a rejected draft token. They are
never read by the decode loop (it reads argmax and margin up to the first
rejection only), so ``ReplayModel.verify`` fills them with ``-1``.

An editor recording (``recording_from_trace``, from the language server's
trace, ``completion/trace.py``) holds one prompt per generation, in the
server's order, and per prompt also what the editor's draft sources read (the
text after the cursor, the document's latest generations, the other buffers),
the generation's own options, and its kind (``completion``, ``cancelled`` by an
edit, ``pregeneration``). A generation the editor cut short (its first line
was done, an edit cancelled it) is replayed up to the recorded tokens only
(``max_tokens`` = what it generated), so the replay does not count the rows a
live draft spent past that point; one that ended at a stop string is
replayed with its stop strings, and rows past its end count as rejected.
A generation token healing backed up over a partial word is replayed from
its healed prompt with the same constraint (``Engine.stream(healed=...)``):
drafts are cut where they would not reproduce the removed bytes, as live.

Record: ``structspec benchmark --record OUT.json --limit 40 --max-tokens 128``;
an editor recording: ``structspec benchmark --suite editor --record OUT.json``
(the trace is kept beside it, ``OUT.json.trace.jsonl``).
Replay: ``structspec benchmark --replay OUT.json``. The recordings are
``bench/recording.py``; the report of a replay is ``bench/replay_report.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structspec.bench.recording import RecordedPrompt, Recording, ReplayError
from structspec.drafts.base import Draft, DraftContext, DraftSource
from structspec.engine.control import Clip, CostModel, DraftPlanner, Plan
from structspec.engine.decode import Engine, GenerationOptions
from structspec.engine.healing import Healing, vocab_index
from structspec.engine.stats import PassTrace
from structspec.model.base import FimTokens, Model, Rows, TokenCheck


class _RecordedLogits(Sequence[np.ndarray]):
    """A recording holds each row's argmax and margin, not its logits.

    Greedy decoding never reads them. Token healing reads them for the rows it
    constrains: a recorded row is then a one-hot vector at its recorded token,
    whose constrained argmax is that token (the recorded output met the
    constraint). A row the recording does not know, or sampling (which would
    draw from the one-hot vector, not the model), must fail loudly rather
    than replay something the recording lacks.
    """

    def __init__(self, argmax: Sequence[int], n_vocab: int) -> None:
        self._argmax = argmax
        self._n_vocab = n_vocab

    def __len__(self) -> int:
        return len(self._argmax)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice) or self._argmax[i] < 0:
            raise ReplayError("a recording has no logits: replay greedy generations only")
        row = np.zeros(self._n_vocab, dtype=np.float32)
        row[self._argmax[i]] = 1.0
        return row


class ReplayModel:
    """A ``Model`` that answers ``verify`` from a recorded greedy sequence.

    The tokenizer is ``vocab``'s (the sources read text); the cache is a list.
    ``expect`` sets the sequence (prompt followed by the greedy output) that
    the next generation follows.
    """

    def __init__(self, vocab: Model, n_ctx: int = 4096) -> None:
        self.vocab = vocab
        self.name = vocab.name
        self.n_ctx = n_ctx
        self.n_vocab = vocab.n_vocab
        self._cache: list[int] = []
        self._full: tuple[int, ...] = ()
        self._margins: tuple[float, ...] = ()
        self._n_prompt = 0
        self._past_end = False

    def expect(self, prompt: RecordedPrompt) -> None:
        self._full = prompt.prompt + prompt.output
        self._margins = prompt.margins
        self._n_prompt = len(prompt.prompt)
        self._cache = []
        # A generation that ended at a stop string: a draft may run past its last
        # token (the stop ends the pass there), and those rows are unknown.
        self._past_end = bool(prompt.stop)

    # -- tokenizer: the real one ------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]:
        return self.vocab.tokenize(text, add_bos=add_bos)

    def token_bytes(self, token: int) -> bytes:
        if token < 0:  # an unknown row's token was emitted
            raise ReplayError("the generation ran past the recorded output")
        return self.vocab.token_bytes(token)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.vocab.detokenize(tokens)

    def is_eog(self, token: int) -> bool:
        return token >= 0 and self.vocab.is_eog(token)

    def bos_token(self) -> int | None:
        return self.vocab.bos_token()

    def fim_tokens(self) -> FimTokens | None:
        return self.vocab.fim_tokens()

    # -- the cache, answered from the recording ---------------------------
    @property
    def cached_tokens(self) -> Sequence[int]:
        return self._cache

    def prefill(self, tokens: Sequence[int]) -> int:
        self._cache = list(tokens)
        return 0

    def verify(self, tokens: Sequence[int]) -> Rows:
        base = len(self._cache)
        on_track = self._cache == list(self._full[:base])
        argmax: list[int] = []
        margins: list[float] = []
        for i, tok in enumerate(tokens):
            pos = base + i
            on_track = on_track and pos < len(self._full) and self._full[pos] == tok
            nxt = pos + 1
            if on_track and nxt < len(self._full):
                argmax.append(self._full[nxt])
                margins.append(self._margins[nxt - self._n_prompt])
            elif on_track and not self._past_end:
                raise ReplayError("the generation ran past the recorded output")
            else:
                argmax.append(-1)
                margins.append(0.0)
        self._cache.extend(tokens)
        return Rows(argmax, margins, _RecordedLogits(argmax, self.n_vocab))

    def truncate(self, n: int) -> None:
        del self._cache[max(0, n) :]

    def truth(self, n: int) -> tuple[int, ...]:
        """The recorded greedy tokens that follow the first ``n`` tokens of the sequence."""
        return self._full[n:]

    def teacher_forced(self, prompt: Sequence[int], output: Sequence[int]) -> list[TokenCheck]:
        return []


#: Kinds of pass in the loss breakdown: no draft sent; the draft's first token
#: rejected; a draft longer than its accepted part needed (rows that a shorter
#: draft would not have paid for); a draft whose rows all paid.
PASS_KINDS = ("plain", "rejected", "overlong", "fitted")

#: Sent draft lengths grouped in the breakdown (upper bounds).
LENGTH_BUCKETS = (1, 3, 7, 15)


@dataclass
class PassLoss:
    """Passes of one kind, their accepted and drafted tokens, and the time they lost.

    The loss of a pass is its predicted time minus the time the best proposal
    of that pass would have needed for the same tokens: the oracle's rate
    (``OraclePlanner``: a source's draft cut to what the model accepts) at the
    same position, so it says where a control loses, pass by pass, without
    replaying the oracle's different path.
    """

    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    loss_ms: float = 0.0

    def add(self, drafted: int, accepted: int, loss_ms: float) -> None:
        self.passes += 1
        self.drafted += drafted
        self.accepted += accepted
        self.loss_ms += loss_ms


def best_cut(cost: CostModel, tokens: Sequence[int], future: Sequence[int]) -> tuple[int, float]:
    """The rows worth sending of draft ``tokens`` when ``future`` follows, and their tokens per ms.

    The accepted tokens, padded to the cheapest row count the draft fills;
    ``(0, 0.0)`` when its first token is wrong.
    """
    accepted = 0
    while (
        accepted < len(tokens) and accepted < len(future) and tokens[accepted] == future[accepted]
    ):
        accepted += 1
    if not accepted:
        return 0, 0.0
    rows = min(cost.padded_rows(accepted + 1), len(tokens) + 1)
    return rows, (accepted + 1) / cost.t(rows)


def best_rate(cost: CostModel, drafts: Iterable[Sequence[int]], future: Sequence[int]) -> float:
    """Tokens per millisecond of the best choice among ``drafts`` (or none) given ``future``."""
    return max([1.0 / cost.t(1), *(best_cut(cost, tokens, future)[1] for tokens in drafts)])


@dataclass
class KindResult:
    """The generations of one kind in a replay: prompts, tokens, greedy and predicted ms."""

    prompts: int = 0
    tokens: int = 0
    greedy_ms: float = 0.0
    predicted_ms: float = 0.0

    def add(self, tokens: int, greedy_ms: float, predicted_ms: float) -> None:
        self.prompts += 1
        self.tokens += tokens
        self.greedy_ms += greedy_ms
        self.predicted_ms += predicted_ms

    @property
    def speedup(self) -> float:
        return self.greedy_ms / self.predicted_ms if self.predicted_ms else 0.0


@dataclass
class ReplayResult:
    """What a replay predicts, and the hash of every pass it made."""

    digest: str
    prompts: int = 0
    tokens: int = 0
    passes: int = 0
    drafted: int = 0
    accepted: int = 0
    #: Predicted milliseconds: the cost table's ``t(rows)`` summed over passes.
    predicted_ms: float = 0.0
    #: The same tokens decoded greedily: ``t(1)`` per token.
    greedy_ms: float = 0.0
    by_source: dict[str, list[int]] = field(default_factory=dict)  # key -> [drafted, accepted]
    #: SHA-256 over every proposal of every source, kept by the planner or not.
    proposals_digest: str = ""
    mismatches: list[str] = field(default_factory=list)
    #: Predicted speed-up of each prompt, by id.
    per_prompt: dict[str, float] = field(default_factory=dict)
    #: Where the control lost time against the best proposal of each pass
    #: (``PassLoss``), by kind of pass and by sent draft length.
    losses: dict[str, PassLoss] = field(default_factory=dict)
    by_length: dict[str, PassLoss] = field(default_factory=dict)
    #: An editor recording's prompts by kind of generation (``RecordedPrompt.kind``).
    by_kind: dict[str, KindResult] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.greedy_ms / self.predicted_ms if self.predicted_ms else 0.0

    @property
    def slowest(self) -> tuple[str, float]:
        """The prompt with the lowest predicted speed-up, and that speed-up."""
        if not self.per_prompt:
            return "", 0.0
        pid = min(self.per_prompt, key=lambda k: self.per_prompt[k])
        return pid, self.per_prompt[pid]


class OraclePlanner(DraftPlanner):
    """A control that knows the future: the bound a planner over the same sources can reach.

    On every pass it asks each source for its longest draft, as the real
    planner does, counts how many of its tokens the model would accept (the
    recorded greedy continuation), and sends the source and length with the
    most tokens per millisecond under the cost table: ``(a + 1) / t(rows)``
    where ``a`` tokens are accepted and ``rows`` is the cheapest row count that
    holds them, against ``1 / t(1)`` for a plain step. It is greedy per pass,
    and what it does not know is what the sources would propose after other
    choices; the gap between it and ``DraftPlanner`` is what control can win.
    """

    def __init__(self, cost: CostModel, truth: Callable[[int], Sequence[int]]) -> None:
        super().__init__(cost)
        self.truth = truth

    def plan(
        self,
        ctx: DraftContext,
        sources: Sequence[DraftSource],
        limit: int,
        margin: float,
        *,
        clip: Clip | None = None,
    ) -> Plan | None:
        limit = min(limit, self.cost.max_rows - 1)
        if limit <= 0:
            return None
        future = self.truth(len(ctx.tokens))
        best: Plan | None = None
        best_rate = 1.0 / self.cost.t(1)
        for draft in self.proposals(ctx, sources, limit, clip):
            rows, rate = best_cut(self.cost, draft.tokens, future)
            if rows and rate > best_rate:
                best_rate = rate
                best = Plan(draft.head(rows - 1), rate)
        return best

    def observe(self, plan: Plan, accepted: int, margin: float) -> None:
        pass


def prompt_orders(prompts: Sequence[RecordedPrompt]) -> dict[str, tuple[RecordedPrompt, ...]]:
    """The prompts in four orders: as recorded, reversed, even then odd, rotated by half.

    The planner's statistics carry from prompt to prompt, so one different pass
    early changes later ones and a change's prediction moves by a few tenths of
    a per cent with the order alone; a change that helps should help in each.
    """
    p = tuple(prompts)
    half = len(p) // 2
    return {
        "recorded": p,
        "reversed": p[::-1],
        "even-odd": p[::2] + p[1::2],
        "rotated": p[half:] + p[:half],
    }


#: Builds the engine to replay through, from the replay model and the cost table
#: (the composition root's own assembly, so the replay runs what users run).
EngineFactory = Callable[[Model, CostModel], Engine]


def replay(
    recording: Recording,
    vocab: Model,
    make_engine: EngineFactory,
    *,
    prompts: Iterable[RecordedPrompt] | None = None,
    oracle: bool = False,
    cost: CostModel | None = None,
) -> ReplayResult:
    """Run every recorded prompt through one engine (its statistics carry over, as in a run).

    ``oracle`` replaces the engine's planner by ``OraclePlanner`` over the same sources.
    ``cost`` replaces the recording's cost table, for the planner and the prediction alike.
    """
    cost = cost or CostModel(recording.cost_ms)
    model = ReplayModel(vocab)
    engine = make_engine(model, cost)
    if oracle:
        engine.planner = OraclePlanner(cost, model.truth)
    proposals = hashlib.sha256()
    #: Each pass's proposals, by the length of the text they continue.
    offered: dict[int, list[tuple[int, ...]]] = {}
    engine.sources = [_Logged(s, proposals, offered) for s in engine.sources]
    h = hashlib.sha256()
    result = ReplayResult(digest="")
    for rec in recording.prompts if prompts is None else prompts:
        model.expect(rec)
        offered.clear()
        max_tokens = recording.max_tokens if rec.max_tokens is None else rec.max_tokens
        drafts: list[tuple[int, ...]] = []
        verify = model.verify

        def logged(
            tokens: Sequence[int],
            verify: Callable[[Sequence[int]], Rows] = verify,
            drafts: list[tuple[int, ...]] = drafts,
        ) -> Rows:
            drafts.append(tuple(tokens[1:]))
            return verify(tokens)

        model.verify = logged  # type: ignore[method-assign]
        try:
            gen = engine.stream(
                rec.prompt,
                GenerationOptions(max_tokens=max_tokens, stop=rec.stop),
                language=rec.language,
                corpus=rec.corpus,
                suffix_tokens=rec.suffix,
                recent_suggestions=rec.recent,
                healed=Healing(rec.healed, 0, vocab_index(vocab)) if rec.healed else None,
            )
            out = gen.run()
        finally:
            del model.verify
        expected = [t for t in rec.output if not vocab.is_eog(t)][:max_tokens]
        if out.tokens != expected:
            result.mismatches.append(rec.id)
        result.prompts += 1
        result.tokens += len(out.tokens)
        prompt_ms = 0.0
        position = len(gen.prompt)
        for trace, draft in zip(out.stats.trace, drafts, strict=True):
            _account(
                result,
                cost,
                trace,
                offered.get(position, ()),
                rec.output[position - len(gen.prompt) :],
            )
            position += trace.accepted + 1
            h.update(
                f"{rec.id}\t{trace.index}\t{trace.source}\t"
                f"{','.join(map(str, draft))}\t{trace.accepted}\n".encode()
            )
            result.passes += 1
            result.drafted += trace.drafted
            result.accepted += trace.accepted
            prompt_ms += cost.t(trace.drafted + 1)
            if trace.drafted:
                s = result.by_source.setdefault(trace.source, [0, 0])
                s[0] += trace.drafted
                s[1] += trace.accepted
        # Greedy makes one pass per token, plus the one that chose the end of generation.
        greedy_passes = len(out.tokens) + (out.stop_reason == "eos")
        result.greedy_ms += cost.t(1) * greedy_passes
        result.predicted_ms += prompt_ms
        if rec.kind:
            kind = result.by_kind.setdefault(rec.kind, KindResult())
            kind.add(len(out.tokens), cost.t(1) * greedy_passes, prompt_ms)
        result.per_prompt[rec.id] = cost.t(1) * greedy_passes / prompt_ms if prompt_ms else 0.0
    result.digest = h.hexdigest()
    result.proposals_digest = proposals.hexdigest()
    return result


def _account(
    result: ReplayResult,
    cost: CostModel,
    trace: PassTrace,
    offered: Sequence[tuple[int, ...]],
    future: Sequence[int],
) -> None:
    """Add one pass to the loss breakdown (``PassLoss``)."""
    ms = cost.t(trace.drafted + 1)
    # Never negative but for rounding: the best proposal includes the one sent.
    loss = max(0.0, ms - (trace.accepted + 1) / best_rate(cost, offered, future))
    needed = cost.t(min(cost.padded_rows(trace.accepted + 1), trace.drafted + 1))
    if not trace.drafted:
        kind = "plain"
    elif not trace.accepted:
        kind = "rejected"
    elif ms > needed:
        kind = "overlong"
    else:
        kind = "fitted"
    result.losses.setdefault(kind, PassLoss()).add(trace.drafted, trace.accepted, loss)
    if trace.drafted:
        bound = next(b for b in LENGTH_BUCKETS if trace.drafted <= b)
        low = max((b for b in LENGTH_BUCKETS if b < bound), default=0) + 1
        label = str(bound) if low == bound else f"{low}-{bound}"
        result.by_length.setdefault(label, PassLoss()).add(trace.drafted, trace.accepted, loss)


class _Logged:
    """A draft source whose every proposal (kept or not) goes into a hash and ``offered``."""

    def __init__(
        self, source: DraftSource, digest: Any, offered: dict[int, list[tuple[int, ...]]]
    ) -> None:
        self.source = source
        self.name = source.name
        self.priors = getattr(source, "priors", {})
        self._digest = digest
        self._offered = offered

    def propose(self, ctx: DraftContext) -> Draft | None:
        draft = self.source.propose(ctx)
        text = "-" if draft is None else f"{draft.key}:{','.join(map(str, draft.tokens))}"
        self._digest.update(f"{len(ctx.tokens)}\t{self.name}\t{ctx.max_tokens}\t{text}\n".encode())
        if draft is not None and draft.tokens:
            self._offered.setdefault(len(ctx.tokens), []).append(draft.tokens[: ctx.max_tokens])
        return draft

    def observe(self, draft: Draft, accepted: int) -> None:
        self.source.observe(draft, accepted)

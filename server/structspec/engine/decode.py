"""The decode loop: greedy and speculative decoding are one loop.

State between passes: the model's KV cache holds the context except its last
token, the *pending* token (the model's own choice from the previous pass, not
yet evaluated). One pass:

1. a planner picks a draft ``d_1..d_k`` (``k = 0`` is a plain greedy step)
   among the sources' proposals, each cut first to what the pass can use
   (``Generation._usable``): before a token that would end the text at a stop
   string (the row after it would choose a token never emitted, and the
   model's own bonus token gives that token when the draft before it is
   accepted) and before one token healing rules out. The planner prices the
   cut draft: a long proposal that a line's end cuts to one token is not
   worth its pass, and is not sent;
2. the model verifies ``[pending, d_1, ..., d_k]`` in one batch; row ``i``
   gives ``a_i = argmax(logits_i)``, the greedy choice after ``pending, d_1..d_i``;
3. the accepted length is the longest ``m`` with ``d_i == a_{i-1}`` for all
   ``i <= m``; the pass emits ``d_1..d_m`` and the bonus ``a_m``;
4. rows after ``d_m`` are rolled back from the cache; ``a_m`` becomes pending.

Every emitted token is some row's argmax given exactly the tokens before it, so
the output is the greedy output whatever the draft: drafting changes speed,
never text. Greedy decoding is the same loop with no planner.

Two things generalise "the row's argmax" to "the row's token" without changing
the loop: token healing (``healing.py``) restricts the rows that must
reproduce the removed end of the prompt to the tokens consistent with it (the
row's token is then the constrained argmax, and a draft token outside the
constraint ends the draft), and sampling (``sampling.py``) makes the row's
token a draw at a uniform number fixed per output position, which keeps the
acceptance rule exact for sampling too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from structspec.drafts.base import (
    Draft,
    DraftContext,
    DraftSource,
    SourcePolicy,
    prepare_source,
)
from structspec.engine.control import DraftPlanner, Plan, ThreadCosts
from structspec.engine.healing import Healing, plan_healing
from structspec.engine.sampling import Sampler, Sampling
from structspec.engine.stats import GenerationStats
from structspec.engine.stops import TextStream
from structspec.model.base import Interrupted, Model, Rows

#: Rows a pass may add beyond the current context: the pending token plus the
#: largest draft. The prompt is fitted so that generation never runs into it.
PASS_ROWS_RESERVE = 16
#: Fewest tokens a generation keeps before its prompt is cut to make room (``fit_prompt``).
GENERATION_FLOOR = 16


class EngineError(ValueError):
    """A request the engine cannot serve (the message is for the user)."""


@dataclass(frozen=True)
class GenerationOptions:
    """What to generate.

    ``speculative=False`` decodes without drafts (the same text, slower).
    ``token_healing``: when the prompt ends mid-word, back it up over the
    partial word and let the model finish it (``healing.py``); the text
    returned starts at the prompt's end all the same. ``sampling``:
    ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (``sampling.py``;
    the default, temperature 0, is greedy).
    """

    max_tokens: int = 128
    stop: tuple[str, ...] = ()
    speculative: bool = True
    token_healing: bool = False
    sampling: Sampling = Sampling()


@dataclass(frozen=True, slots=True)
class Step:
    """The outcome of one verification pass."""

    tokens: tuple[int, ...]
    text: str
    drafted: int
    accepted: int


@dataclass
class GenerationResult:
    text: str
    tokens: list[int]
    prompt_tokens: list[int]
    stats: GenerationStats
    warnings: list[str] = field(default_factory=list)
    #: Bytes at the start of the output's bytes that token healing took from
    #: the prompt (the caller has them already: they are not in ``text``).
    healed_bytes: int = 0
    #: Only when the generation was started with ``margins=True`` (a trace for
    #: the replay, ``bench/replay.py``): the top-1/top-2 margin of the row that
    #: chose each token of ``tokens``, then that of the end-of-generation token
    #: when the model chose one (``end_token``).
    margins: list[float] = field(default_factory=list)
    end_token: int | None = None

    @property
    def stop_reason(self) -> str:
        return self.stats.stop_reason


def accepted_length(draft: Sequence[int], argmax: Sequence[int]) -> int:
    """Longest ``m`` such that ``draft[i] == argmax[i]`` for all ``i < m``.

    ``argmax[i]`` is the model's choice after the pending token and
    ``draft[:i]``, so it is exactly what ``draft[i]`` must equal.
    """
    m = 0
    while m < len(draft) and draft[m] == argmax[m]:
        m += 1
    return m


def valid_prefix(draft: tuple[int, ...], n_vocab: int) -> tuple[int, ...]:
    """``draft`` up to its first token outside the vocabulary.

    A source's bug must not reach the model.
    """
    for i, tok in enumerate(draft):
        if not 0 <= tok < n_vocab:
            return draft[:i]
    return draft


def fit_prompt(
    tokens: Sequence[int], n_ctx: int, max_tokens: int, bos: int | None
) -> tuple[list[int], int, int]:
    """Fit ``tokens`` and the generation into the context.

    Returns ``(prompt, dropped, max_tokens)``. A prompt that fits with the
    whole generation is kept; one that fits with at least ``GENERATION_FLOOR``
    tokens of it is kept too, and the generation clamped to the room left
    (llama-server's way: the prompt is what the user wrote, a long answer
    only asked for). Else the prompt is truncated from the left (keeping a
    leading BOS) so that ``prompt + max_tokens + a pass`` fits, with
    ``max_tokens`` clamped to half the context when it alone would not fit.
    """
    max_tokens = max(0, max_tokens)
    if len(tokens) + max_tokens + PASS_ROWS_RESERVE <= n_ctx:
        return list(tokens), 0, max_tokens
    left = n_ctx - len(tokens) - PASS_ROWS_RESERVE
    if left >= min(max_tokens, GENERATION_FLOOR):
        return list(tokens), 0, left
    max_tokens = min(max_tokens, (n_ctx - PASS_ROWS_RESERVE) // 2)
    room = n_ctx - max_tokens - PASS_ROWS_RESERVE
    keep_bos = bool(tokens) and bos is not None and tokens[0] == bos
    head = [tokens[0]] if keep_bos else []
    tail = list(tokens[len(tokens) - (room - len(head)) :])
    return head + tail, len(tokens) - len(head) - len(tail), max_tokens


class Engine:
    """Generates from one model with a set of draft sources and a planner.

    The planner's statistics live as long as the engine: acceptance learnt on
    one request informs the next. ``policy`` (asked once per generation) says
    which sources may draft for the buffer and how far, usually from its
    language's domain. ``stream`` is not reentrant; callers that share an
    engine serialise on it (the LSP and HTTP servers hold a lock).
    """

    def __init__(
        self,
        model: Model,
        sources: Sequence[DraftSource] = (),
        planner: DraftPlanner | None = None,
        policy: Callable[[DraftContext], SourcePolicy] | None = None,
        costs: ThreadCosts | None = None,
    ) -> None:
        self.model = model
        self.sources = list(sources)
        self.planner = planner
        self.policy = policy
        #: When set, the planner's cost table follows the model's thread count.
        self.costs = costs
        self._generation = 0

    def generate(
        self,
        prompt_tokens: Sequence[int],
        options: GenerationOptions | None = None,
        **kwargs: object,
    ) -> GenerationResult:
        """Run a generation to the end and return its result."""
        gen = self.stream(prompt_tokens, options, **kwargs)  # type: ignore[arg-type]
        for _ in gen:
            pass
        assert gen.result is not None
        return gen.result

    def prepare(
        self,
        context_tokens: Sequence[int],
        *,
        corpus: Sequence[Sequence[int]] = (),
        language: str | None = None,
        stop: Callable[[], bool] = lambda: False,
    ) -> None:
        """Idle time: the draft sources digest what a generation will hand them, until ``stop()``.

        A source indexes a new corpus a slice per generation (``propose`` is on
        the decode path, ``drafts.base``); this indexes the rest, so that the
        next generation given the same ``corpus`` lists finds them ready.
        ``context_tokens``: the prompt such a generation would start from (an
        unnamed buffer's language is sniffed from it). No output changes: only
        where the work is done.
        """
        ctx = DraftContext(
            model=self.model,
            tokens=list(context_tokens),
            n_prompt=len(context_tokens),
            corpus=corpus,
            language=language,
        )
        if self.policy is not None and self.sources:
            ctx.policy = self.policy(ctx)
        for source in self.sources:
            if stop():
                return
            if ctx.policy.allows(source.name):
                prepare_source(source, ctx, stop)

    def stream(
        self,
        prompt_tokens: Sequence[int],
        options: GenerationOptions | None = None,
        *,
        corpus: Sequence[Sequence[int]] = (),
        language: str | None = None,
        suffix_tokens: Sequence[int] = (),
        recent_suggestions: Sequence[Sequence[int]] = (),
        cancelled: Callable[[], bool] | None = None,
        sources: Sequence[DraftSource] | None = None,
        cursor: int | None = None,
        margins: bool = False,
        healed: Healing | None = None,
    ) -> Generation:
        """Start a generation; iterate it for one ``Step`` per pass.

        ``cursor``: where in ``prompt_tokens`` the generated text goes, for
        token healing (default: the end). A fill-in-the-middle prompt
        (``PRE prefix SUF suffix MID``) passes the index of ``SUF``: the partial
        word at the end of the prefix moves into the generated middle.

        ``corpus``, ``suffix_tokens`` and ``recent_suggestions`` are token
        lists for the draft sources (``DraftContext``); they never change the
        output. ``margins``: keep each chosen token's margin in the result
        (``GenerationResult.margins``; it reads one more margin per accepted
        draft token, so only a trace asks for it). ``healed``: a heal already
        applied to ``prompt_tokens`` (the replay of a traced generation,
        ``bench/replay.py``): the first tokens are constrained to reproduce its
        ``removed`` bytes as if ``token_healing`` had planned it.
        """
        self._generation += 1
        return Generation(
            self,
            prompt_tokens,
            options or GenerationOptions(),
            corpus=corpus,
            language=language,
            suffix_tokens=suffix_tokens,
            recent_suggestions=recent_suggestions,
            cancelled=cancelled,
            sources=self.sources if sources is None else list(sources),
            generation=self._generation,
            cursor=cursor,
            margins=margins,
            healed=healed,
        )


class Generation:
    """One generation in progress. Iterate it; ``result`` is set once it ends.

    Abandoning the iteration (or ``cancelled()`` turning true) ends it between
    passes, with the model's cache consistent for the next request. A decode
    interrupted part-way (``model.base.Interrupt``) ends it there, as
    cancelled, with what the passes before it wrote.
    """

    def __init__(
        self,
        engine: Engine,
        prompt_tokens: Sequence[int],
        options: GenerationOptions,
        *,
        corpus: Sequence[Sequence[int]],
        language: str | None,
        suffix_tokens: Sequence[int] = (),
        recent_suggestions: Sequence[Sequence[int]] = (),
        cancelled: Callable[[], bool] | None,
        sources: Sequence[DraftSource],
        generation: int,
        cursor: int | None = None,
        margins: bool = False,
        healed: Healing | None = None,
    ) -> None:
        model = engine.model
        bos = model.bos_token()
        if not prompt_tokens:
            if bos is None:
                raise EngineError("the prompt is empty and the model has no BOS token")
            prompt_tokens = [bos]
        end = len(prompt_tokens) if cursor is None else cursor
        if not 0 <= end <= len(prompt_tokens):
            raise EngineError(f"cursor {cursor} is outside the prompt of {len(prompt_tokens)}")
        self.healing: Healing | None = (
            plan_healing(prompt_tokens[:end], model) if options.token_healing else None
        )
        if healed is not None:  # the prompt is healed already
            self.healing = healed
        elif self.healing is not None:
            start = end - self.healing.n_tokens
            prompt_tokens = [*prompt_tokens[:start], *prompt_tokens[end:]]
        #: Bytes of ``healing.removed`` the output has reproduced (they are not emitted).
        self.healed = 0
        prompt, dropped, max_tokens = fit_prompt(
            prompt_tokens, model.n_ctx, options.max_tokens, bos
        )
        self.engine = engine
        self.options = options
        self.sampler = Sampler(options.sampling)
        self.max_tokens = max_tokens
        self.prompt = prompt
        self.cancelled = cancelled or (lambda: False)
        self.stats = GenerationStats(
            prompt_tokens=len(prompt),
            truncated_prompt_tokens=dropped,
            healed_tokens=self.healing.n_tokens if self.healing else 0,
        )
        self.warnings: list[str] = []
        if dropped:
            self.warnings.append(
                f"prompt of {len(prompt_tokens)} tokens truncated from the left by {dropped} "
                f"to fit the context of {model.n_ctx}"
            )
        if max_tokens < options.max_tokens:
            self.warnings.append(f"max_tokens clamped to {max_tokens} by the context size")
        self.ctx = DraftContext(
            model=model,
            tokens=list(prompt),
            n_prompt=len(prompt),
            corpus=corpus,
            language=language,
            suffix_tokens=suffix_tokens,
            recent_suggestions=recent_suggestions,
            generation=generation,
        )
        if engine.policy is not None and sources:
            self.ctx.policy = engine.policy(self.ctx)
        self.sources = [s for s in sources if self.ctx.policy.allows(s.name)]
        self.output: list[int] = []
        #: ``None`` unless asked for: the margin of the row that chose each token.
        self.margins: list[float] | None = [] if margins else None
        self.end_token: int | None = None
        self.text = TextStream(options.stop)
        self.result: GenerationResult | None = None

    def run(self) -> GenerationResult:
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def __iter__(self) -> Iterator[Step]:
        try:
            yield from self._passes()
        finally:
            self._finish()

    def _passes(self) -> Iterator[Step]:
        model, stats, planner = self.engine.model, self.stats, self.engine.planner
        speculative = self.options.speculative and planner is not None and bool(self.sources)
        if speculative and planner is not None:
            planner.start_generation()
        t0 = time.perf_counter()
        try:
            stats.reused_tokens = model.prefill(self.prompt[:-1])
        except Interrupted:
            stats.stop_reason = "cancelled"
            return
        stats.prefill_ms = (time.perf_counter() - t0) * 1000.0
        pending = self.prompt[-1]
        margin = float("inf")
        while not stats.stop_reason:
            if self.cancelled():
                stats.stop_reason = "cancelled"
                break
            remaining = self.max_tokens - len(self.output)
            if remaining <= 0:
                stats.stop_reason = "length"
                break
            room = model.n_ctx - len(model.cached_tokens) - 1
            if room <= 0:
                stats.stop_reason = "context"
                break
            t_plan = time.perf_counter()
            plan: Plan | None = None
            if speculative and planner is not None:
                if self.engine.costs is not None:
                    planner.cost = self.engine.costs.current()
                # The bonus token always comes: a draft longer than remaining - 1 is waste.
                limit = min(remaining - 1, room - 1)
                plan = planner.plan(self.ctx, self.sources, limit, margin, clip=self._usable)
            draft = plan.draft.tokens if plan else ()
            t_verify = time.perf_counter()
            base = len(model.cached_tokens)
            try:
                rows = model.verify([pending, *draft])
            except Interrupted:  # the cache is as before this pass
                stats.stop_reason = "cancelled"
                break
            chosen = self._row_tokens(rows, draft)
            m = len(chosen) - 1
            model.truncate(base + 1 + m)
            t_done = time.perf_counter()
            stats.draft_ms += (t_verify - t_plan) * 1000.0
            stats.record_pass(
                plan.draft.key if plan else "", len(draft), m, (t_done - t_verify) * 1000.0
            )
            if plan is not None and planner is not None:
                planner.observe(plan, m, margin)
                self._feedback(plan.draft, m)
            margin = rows.margin[m]
            if self.margins is not None:
                # Read now: a row's margin is valid only until the next decode.
                self.margins.extend(float(rows.margin[i]) for i in range(m))
                self.margins.append(float(margin))
            step = self._emit(chosen, len(draft), m)
            pending = chosen[m]
            yield step

    def _usable(self, draft: Draft) -> Draft | None:
        """What of ``draft`` this pass can verify; ``None`` when nothing is left.

        It ends before the first token outside the vocabulary (a source's bug
        must not reach the model), the first that token healing does not allow,
        and the first that would end the text at a stop string: such a token is
        never worth a row, since the row after it chooses a token that is never
        emitted, and when the draft before it is accepted the pass's bonus
        token is that token anyway (the model's own choice). While token
        healing reproduces the prompt's end the draft's text is not yet output,
        so the stop strings do not cut it.
        """
        model = self.engine.model
        tokens = self._healing_prefix(valid_prefix(draft.tokens, model.n_vocab))
        healing = self.healing is not None and self.healing.active(self.healed)
        if tokens and self.options.stop and not healing:
            cut = self.text.stop_at([model.token_bytes(t) for t in tokens])
            if cut is not None:
                tokens = tokens[:cut]
        if not tokens:
            return None
        return draft if len(tokens) == len(draft.tokens) else draft.head(len(tokens))

    def _healing_prefix(self, draft: tuple[int, ...]) -> tuple[int, ...]:
        """``draft`` up to its first token that the healing constraint does not allow."""
        healing, done = self.healing, self.healed
        if healing is None or not healing.active(done):
            return draft
        for i, tok in enumerate(draft):
            after = healing.advance(done, self.engine.model.token_bytes(tok))
            if after is None:
                return draft[:i]
            done = after
        return draft

    def _row_tokens(self, rows: Rows, draft: Sequence[int]) -> list[int]:
        """Each row's token up to the first that differs from the draft.

        Returns the accepted draft tokens followed by the bonus token: row
        ``i``'s token is the argmax (the constrained argmax while healing, a
        sample when sampling) given ``pending, draft[:i]``, so it is exactly
        what ``draft[i]`` must equal.
        """
        healing, done = self.healing, self.healed
        greedy = self.sampler.sampling.greedy
        if greedy and (healing is None or not healing.active(done)):
            m = accepted_length(draft, rows.argmax)  # plain greedy: no logits read
            return [*draft[:m], rows.argmax[m]]
        position = len(self.output)
        chosen: list[int] = []
        for i in range(len(draft) + 1):
            constrained = healing is not None and healing.active(done)
            if greedy and not constrained:
                tok = rows.argmax[i]
            else:
                allowed = healing.allowed(done) if healing is not None and constrained else None
                tok = self.sampler.choose(rows.logits[i], position + i, allowed)
            chosen.append(tok)
            if i == len(draft) or draft[i] != tok:
                break
            if healing is not None and constrained:
                after = healing.advance(done, self.engine.model.token_bytes(tok))
                assert after is not None  # the row's token is one the constraint allows
                done = after
        return chosen

    def _emit(self, new: list[int], drafted: int, accepted: int) -> Step:
        """Append ``new`` to the output, applying EOS, stop strings and max tokens."""
        model, stats = self.engine.model, self.stats
        emitted: list[int] = []
        delta = ""
        for tok in new:
            if model.is_eog(tok):
                stats.stop_reason = "eos"
                self.end_token = tok
                break
            emitted.append(tok)
            self.output.append(tok)
            self.ctx.tokens.append(tok)
            piece = model.token_bytes(tok)
            if self.healing is not None and self.healing.active(self.healed):
                # The removed end of the prompt is the caller's already: emit only what follows.
                strip = min(len(piece), len(self.healing.removed) - self.healed)
                self.healed += strip
                piece = piece[strip:]
            delta += self.text.push(piece)
            if self.text.stopped:
                stats.stop_reason = "stop"
                break
            if len(self.output) >= self.max_tokens:
                stats.stop_reason = "length"
                break
        if stats.stop_reason and stats.stop_reason != "stop":
            delta += self.text.finish()
        return Step(tuple(emitted), delta, drafted, accepted)

    def _feedback(self, draft: Draft, accepted: int) -> None:
        for source in self.sources:
            if source.name == draft.source:
                source.observe(draft, accepted)

    def _finish(self) -> None:
        if self.result is not None:
            return
        if not self.stats.stop_reason:
            self.stats.stop_reason = "cancelled"
        self.text.finish()
        self.stats.tokens = len(self.output)
        margins: list[float] = []
        if self.margins is not None:
            # Rows of a pass past a stop, past max_tokens or past the end of generation chose
            # nothing that was kept.
            margins = self.margins[: len(self.output) + (self.end_token is not None)]
        self.result = GenerationResult(
            text=self.text.text,
            tokens=list(self.output),
            prompt_tokens=list(self.prompt),
            stats=self.stats,
            warnings=self.warnings,
            healed_bytes=self.healed,
            margins=margins,
            end_token=self.end_token,
        )

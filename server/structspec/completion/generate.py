"""One completion, start to end, on the worker thread: a plain function, no asyncio.

``run_completion`` takes what the service gathered on the event loop (the
text, the cursor, the other open documents, the settings) and the worker's
engine, and returns the cleaned suggestion text:

1. a prompt that stays stable while typing (``prompt``; the cut is kept per
   document through ``cut_hint``), with snippets of the other open documents
   before it when ``project_context`` is on (``snippets``);
2. the corpus of the open buffers, when an enabled draft source reads one;
3. the prompt's prefill in chunks (``prewarm``). Once ``max_latency_ms``
   has passed since the request it goes on only while no other request waits
   for the worker (``keep_evaluating``), under ``warming`` (the status says
   so), and the request is answered when it ends: the user is still waiting
   there (a newer keystroke cancels it). Stopped for another request, the
   request answers nothing (``EmptyReason.PROMPT_UNFINISHED``); what was
   evaluated stays cached for the next request there;
4. the engine's stream, stopped by the single-line/block mode, by
   cancellation between passes, and by the generation budget: once the model
   has written for ``max_generation_ms`` (half of it while other processes
   hold the cores: ``generation_budget``), the word being written is finished
   and the suggestion ends there. A block answers with its first line as soon
   as that line is complete. Either way the rest comes from pre-generation
   (the outcome's continuation holds every token written);
5. clean-up (``suggest``).

The outcome carries the model's output as a ``Continuation`` (the tokens
behind it included), and ``continue_generation`` is pre-generation: it extends
a continuation past what was shown, on the same KV slot, while the user reads.

For the editor's draft sources it also passes what the enabled ones read
(``draft_inputs``, as the entries of ``structspec.sources`` declare): the corpus, the
text after the cursor and the document's latest generations; it returns this
generation's own (``Outcome.generated``) for the next.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from structspec.completion.cache import Continuation, Extension
from structspec.completion.corpus import CorpusCache, DocumentSnapshot
from structspec.completion.prewarm import (
    PREFILL_CHUNK,
    PromptRate,
    prefill_in_chunks,
    reusable_prefix,
)
from structspec.completion.prompt import (
    Prompt,
    PromptBuilder,
    choose_window,
    file_name,
    first_window,
)
from structspec.completion.snippets import Neighbour, Snippet, SnippetChooser
from structspec.completion.suggest import (
    BLOCK,
    LINE,
    CursorContext,
    clean,
    cut_block,
    loop_start,
)
from structspec.completion.trace import Replayable
from structspec.completion.trace import enabled as tracing
from structspec.completion.trace import record as trace_generation
from structspec.completion.types import EmptyReason
from structspec.config import Settings
from structspec.engine.decode import Engine, Generation, GenerationOptions, GenerationResult
from structspec.engine.stats import GenerationStats
from structspec.model.base import Model
from structspec.model.extras import contended
from structspec.sources import EditorInputs, editor_inputs


@dataclass
class Outcome:
    """What a completion produced: ``text`` ``None`` when nothing is to be shown."""

    text: str | None = None
    stats: GenerationStats | None = None
    cancelled: bool = False
    #: Where the prompt window started (kept per document for the next request).
    cut: int | None = None
    #: The prefill stopped before it ended (the service finishes it when idle).
    unfinished: bool = False
    #: Why ``text`` is ``None`` (``None`` while there is text).
    empty: EmptyReason | None = None
    #: The prompt's last tokens and what the model generated after them, also
    #: when cancelled (a source reading recent suggestions drafts from it next time).
    generated: tuple[int, ...] = ()
    #: The model's whole output from the cursor (``text`` is its cleaned first
    #: part), for pre-generation to continue; ``None`` when cancelled.
    continuation: Continuation | None = None


@dataclass(frozen=True)
class CompletionInput:
    """A completion's inputs, taken on the event loop (immutable while it runs)."""

    uri: str
    text: str
    offset: int
    language: str
    cursor: CursorContext
    settings: Settings
    others: Sequence[DocumentSnapshot] = ()
    #: ``time.perf_counter()`` when the request arrived (the latency budget counts from it).
    t0: float = 0.0
    #: The document's latest ``Outcome.generated``, newest first.
    recent_suggestions: Sequence[tuple[int, ...]] = ()


#: Prompt tokens kept in front of a generation in ``Outcome.generated``: enough
#: to re-align a suggestion after the user deletes or retypes a few characters.
GENERATED_CONTEXT_TOKENS = 32


def first_line_done(text: str) -> int | None:
    """End of the first non-blank line of ``text`` once that line is complete, else ``None``."""
    start = 0
    while (newline := text.find("\n", start)) >= 0:
        if text[start:newline].strip():
            return newline
        start = newline + 1
    return None


def word_end(text: str, start: int) -> int | None:
    """The first end of a word or line in ``text`` at or after ``start``, once it is written.

    A word ends where a word character is followed by anything else; a line
    ends at its newline; and the text ends before a run of two whitespace
    characters or more, once its second is written (no word is being written
    there: a model writing nothing but spaces would otherwise go on to
    ``max_tokens``, past every budget). ``None`` while the text after
    ``start`` has none of them.
    """
    for i in range(max(start, 1), len(text)):
        ch, before = text[i], text[i - 1]
        if ch == "\n" or (_is_word(before) and not _is_word(ch)):
            return i
        if ch.isspace() and before.isspace():
            return i - 1
    return None


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def extension(engine: Engine, result: GenerationResult) -> Extension:
    """What a generation wrote at the cursor (the bytes token healing took back excluded)."""
    data = b"".join(engine.model.token_bytes(t) for t in result.tokens)
    return Extension((*result.tokens,), data[result.healed_bytes :], result.stop_reason == "eos")


#: Share of ``max_generation_ms`` a suggestion gets while other processes hold the cores.
CONTENDED_GENERATION_SHARE = 0.5


def why_empty(written: str, stop_reason: str, cut: bool = False) -> EmptyReason:
    """Why a generation that wrote ``written`` (before clean-up) shows nothing.

    ``stop_reason`` is the engine's; ``cut``: a rule of this module ended it
    (a loop, a block's dedent, the generation budget).
    """
    if written.strip():
        return EmptyReason.CLEANED_AWAY
    if cut or stop_reason == "stop":
        return EmptyReason.STOP_RULE
    return EmptyReason.MODEL_EMPTY


def generation_budget(model: Model, settings: Settings) -> float:
    """Seconds the model writes one suggestion before finishing the word it is on.

    ``max_generation_ms``; half of it while other processes hold the cores
    (``contended``: the thread governor runs decodes on fewer threads). A pass
    is then two to three times slower (``docs/MEASUREMENTS.md`` §4), so a
    suggestion cut at the same budget would come at the budget where the quiet
    machine's came well before it; with half the budget it comes sooner and
    shorter, and the rest of the line is pre-generated while it is on screen.
    """
    share = CONTENDED_GENERATION_SHARE if contended(model) else 1.0
    return settings.max_generation_ms * share / 1000.0


def build_prompt(
    prompts: PromptBuilder,
    snippets: SnippetChooser,
    job: CompletionInput,
    cut_hint: int | None,
    *,
    full: bool = False,
    window_tokens: int | None = None,
    top: bool = False,
) -> Prompt:
    """The job's prompt, with project context when it is on.

    The window follows the window policy (``prompt.choose_window``): at a
    new place a first window the machine evaluates within the latency target
    (``prompt.first_window``), the full one where it is cached. ``full``:
    the full window at ``cut_hint`` (pre-warm growing a first one), of
    ``window_tokens`` when given, else the setting's. ``top``: that window
    is the document's top (``cut_hint`` 0), whose snippets every cursor in
    it keeps (``SnippetChooser``).
    """
    settings = job.settings
    context: list[Snippet] = []
    if settings.project_context:
        neighbours = [Neighbour(o.uri, file_name(o.uri), o.revision, o.text) for o in job.others]
        context = snippets.choose(job.uri, job.text, job.offset, neighbours, top=top)

    def build(window_tokens: int, hint: int | None) -> Prompt:
        return prompts.build(
            job.text,
            job.offset,
            uri=job.uri,
            language=job.language,
            cut_hint=hint,
            max_tokens=settings.max_tokens,
            window_tokens=window_tokens,
            context=context,
        )

    if full or not settings.prefix_reuse:
        return build(settings.window_tokens if window_tokens is None else window_tokens, cut_hint)
    model = prompts.model
    size = first_window(model, prompts.rate, settings.max_tokens, settings.window_tokens)
    return choose_window(model, build, cut_hint, settings.window_tokens, size)


@dataclass(frozen=True)
class DraftInputs:
    """What a generation passes its draft sources from the editor (empty: not read)."""

    corpus: list[list[int]] = field(default_factory=list)
    suffix: list[int] = field(default_factory=list)
    recent: Sequence[tuple[int, ...]] = ()


def draft_inputs(
    model: Model, corpus: CorpusCache, job: CompletionInput, prompt: Prompt | None = None
) -> DraftInputs:
    """Gather what the enabled sources read: the corpus (given the ``prompt``), suffix, recent.

    Which of them is read is the sources' declaration (``structspec.sources``);
    without speculation no source runs and nothing is gathered.
    """
    settings = job.settings
    wanted = editor_inputs(settings.source_names()) if settings.speculative else EditorInputs()
    tokens_corpus: list[list[int]] = []
    if wanted.corpus and prompt is not None:
        tokens_corpus = corpus.collect(
            model,
            text=job.text,
            cut=prompt.cut,
            suffix_start=prompt.suffix_end,
            others=job.others,
        )
    suffix = corpus.suffix(model, job.text, job.offset) if wanted.suffix else []
    recent = job.recent_suggestions if wanted.recent_suggestions else ()
    return DraftInputs(tokens_corpus, suffix, recent)


def prepare_drafts(
    engine: Engine,
    corpus: CorpusCache,
    job: CompletionInput,
    prompt: Prompt,
    stop: Callable[[], bool],
) -> None:
    """Idle time: what a request with ``prompt`` hands the draft sources, made ready.

    The corpus it would search is tokenized (``CorpusCache.prepare``) and the
    sources digest it (``Engine.prepare``), so that request spends its time on
    the model. Stops between pieces of work when ``stop()``.
    """
    settings = job.settings
    if not settings.speculative:
        return
    lists: list[list[int]] = []
    if editor_inputs(settings.source_names()).corpus:
        found = corpus.prepare(
            engine.model,
            stop,
            text=job.text,
            cut=prompt.cut,
            suffix_start=prompt.suffix_end,
            others=job.others,
        )
        if found is None:
            return
        lists = found
    engine.prepare(prompt.tokens, corpus=lists, language=job.language or None, stop=stop)


def run_completion(
    engine: Engine,
    prompts: PromptBuilder,
    corpus: CorpusCache,
    snippets: SnippetChooser,
    job: CompletionInput,
    *,
    cut_hint: int | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] | None = None,
    progress: Callable[[str], None] | None = None,
    keep_evaluating: Callable[[], bool] = lambda: False,
    warming: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> Outcome:
    """Generate and clean one suggestion (see the module docstring).

    ``clock`` (default ``time.perf_counter``) must be the clock ``job.t0`` was read from.
    ``progress`` is called after every verification pass with the text written so
    far (before clean-up), from the thread that runs the generation.
    ``keep_evaluating()``: whether the prompt's evaluation may go on past
    ``max_latency_ms`` (checked between chunks; by default it stops there),
    inside ``warming()``.
    """
    clock = clock or time.perf_counter
    model = engine.model
    settings = job.settings
    prompt = build_prompt(prompts, snippets, job, cut_hint)
    inputs = draft_inputs(model, corpus, job, prompt)
    if cancelled():
        return Outcome(cancelled=True, cut=prompt.cut, empty=EmptyReason.CANCELLED)
    if not settings.prefix_reuse:
        model.truncate(0)  # evaluate the whole prompt again (the benchmark's baseline)
    reused = reusable_prefix(model, prompt.tokens[:-1])
    t_prefill = clock()
    if not _prefill(model, prompt, job, cancelled, clock, prompts.rate, keep_evaluating, warming):
        if cancelled():
            return Outcome(cancelled=True, cut=prompt.cut, empty=EmptyReason.CANCELLED)
        return Outcome(cut=prompt.cut, unfinished=True, empty=EmptyReason.PROMPT_UNFINISHED)
    generation_start = clock()
    budget = generation_budget(model, settings)
    generation, options = _start(engine, prompt, job, inputs, cancelled)
    text, early = _write(
        generation, job.cursor, lambda: clock() - generation_start > budget, progress
    )
    result = generation.result
    stats = result.stats if result is not None else None
    if stats is not None:
        # The chunks evaluated above are part of this request's prefill.
        stats.prefill_ms += (generation_start - t_prefill) * 1000.0
        stats.reused_tokens = min(stats.reused_tokens, reused)
    generated: tuple[int, ...] = ()
    if result is not None:  # STRUCTSPEC_TRACE: the benchmark's exactness check and replay
        kind = "cancelled" if cancelled() else "completion"
        _trace(kind, generation, result, job, options, inputs)
        if result.tokens:
            generated = (*result.prompt_tokens[-GENERATED_CONTEXT_TOKENS:], *result.tokens)
    if cancelled():
        return Outcome(
            stats=stats,
            cancelled=True,
            cut=prompt.cut,
            generated=generated,
            empty=EmptyReason.CANCELLED,
        )
    continuation: Continuation | None = None
    sees_rest = prompt.suffix_end > prompt.offset  # a FIM prompt with a suffix
    if result is not None:
        start = Continuation("", (*result.prompt_tokens,), sees_rest=sees_rest)
        continuation = start.extended(extension(engine, result))
        if not early:
            text = result.text
    cleaned = clean(text, job.cursor, job.cursor.mode, sees_rest=sees_rest)
    return Outcome(
        cleaned,
        stats,
        cut=prompt.cut,
        generated=generated,
        continuation=continuation,
        empty=None if cleaned else why_empty(text, stats.stop_reason if stats else "", early),
    )


def _start(
    engine: Engine,
    prompt: Prompt,
    job: CompletionInput,
    inputs: DraftInputs,
    cancelled: Callable[[], bool],
) -> tuple[Generation, GenerationOptions]:
    """Start the engine's stream for the prompt, in the cursor's single-line or block mode."""
    settings = job.settings
    options = GenerationOptions(
        max_tokens=settings.max_tokens,
        stop=("\n",) if job.cursor.mode == LINE else (),
        speculative=settings.speculative,
        token_healing=settings.token_healing,
    )
    generation = engine.stream(
        prompt.tokens,
        options,
        corpus=inputs.corpus,
        language=job.language or None,
        suffix_tokens=inputs.suffix,
        recent_suggestions=inputs.recent,
        cancelled=cancelled,
        # Token healing acts where the cursor is (``Prompt.insert_at``).
        cursor=prompt.insert_at,
        margins=tracing(),
    )
    return generation, options


def _prefill(
    model: Model,
    prompt: Prompt,
    job: CompletionInput,
    cancelled: Callable[[], bool],
    clock: Callable[[], float],
    rate: PromptRate,
    keep_evaluating: Callable[[], bool],
    warming: Callable[[], AbstractContextManager[object]],
) -> bool:
    """Evaluate the prompt but its last chunk: within ``max_latency_ms``, then while allowed.

    Past the budget it goes on only while ``keep_evaluating()`` (no other
    request waits for the worker), inside ``warming()``.
    """
    tokens = prompt.tokens[:-1]
    budget = job.settings.max_latency_ms / 1000.0
    leave = PREFILL_CHUNK  # the engine evaluates the last chunk itself
    if prefill_in_chunks(
        model,
        tokens,
        lambda: cancelled() or clock() - job.t0 > budget,
        leave=leave,
        deadline=job.t0 + budget,
        clock=clock,
        rate=rate,
    ):
        return True
    if cancelled() or not keep_evaluating():
        return False
    with warming():
        return prefill_in_chunks(
            model, tokens, lambda: cancelled() or not keep_evaluating(), leave=leave, rate=rate
        )


def _write(
    generation: Generation,
    cursor: CursorContext,
    over_budget: Callable[[], bool],
    progress: Callable[[str], None] | None,
) -> tuple[str, bool]:
    """Read the engine's stream: ``(text, early)``, early when stopped before the engine ended.

    It stops at a loop (that line dropped), at the end of a block's first line,
    and, once ``over_budget()``, at the end of the word being written.
    """
    text = ""
    mark: int | None = None
    steps = iter(generation)
    try:
        for step in steps:
            before = len(text)
            text += step.text
            if progress is not None:
                progress(text)
            loop = loop_start(text)
            if loop is not None:  # the model is stuck in a loop: that line is dropped
                return text[:loop], True
            if cursor.mode == BLOCK:
                text, dedented = cut_block(text, cursor)
                line_end = first_line_done(text)
                if dedented or line_end is not None:
                    # The rest of a block comes from pre-generation.
                    return (text if line_end is None else text[:line_end]), True
            if mark is None and over_budget():
                mark = before  # finish the word being written, then stop
            if mark is not None and (end := word_end(text, mark)) is not None:
                return text[:end], True
    finally:
        # Closing the generator ends the generation now (its result is final).
        steps.close()  # type: ignore[attr-defined]
    return text, False


#: Lines pre-generation writes past the end of what the user was shown.
PREGENERATE_LINES = 2


def pregeneration_wanted(continuation: Continuation, shown: int) -> bool:
    """Pre-generation has more to write after the first ``shown`` characters of
    ``continuation``: the model has not ended it, and fewer than
    ``PREGENERATE_LINES`` lines after them are complete."""
    return not continuation.ended and continuation.lines_after(shown) < PREGENERATE_LINES


def continue_generation(
    engine: Engine,
    corpus: CorpusCache,
    job: CompletionInput,
    continuation: Continuation,
    shown: int,
    *,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[Extension, GenerationResult | None]:
    """Pre-generation: what the model writes after ``continuation``.

    It writes until ``continuation`` holds ``PREGENERATE_LINES`` complete lines
    after its first ``shown`` characters, the model ends it, ``max_tokens``
    more tokens, or ``cancelled()`` (between passes; what was written until
    then is returned). The sequence continues greedily from
    ``continuation.tokens``, whose start is still in the model's KV cache, so
    the first pass costs one row.
    """
    settings = job.settings
    if not pregeneration_wanted(continuation, shown):
        return Extension((), b""), None
    lines = continuation.lines_after(shown)
    suffix_tokens = draft_inputs(engine.model, corpus, job).suffix
    options = GenerationOptions(max_tokens=settings.max_tokens, speculative=settings.speculative)
    generation = engine.stream(
        continuation.tokens,
        options,
        language=job.language or None,
        suffix_tokens=suffix_tokens,
        cancelled=cancelled,
        margins=tracing(),
    )
    steps = iter(generation)
    written = ""
    try:
        for step in steps:
            lines += step.text.count("\n")
            written += step.text
            if lines >= PREGENERATE_LINES or loop_start(written) is not None:
                break
    finally:
        steps.close()  # type: ignore[attr-defined]
    result = generation.result
    if result is None:
        return Extension((), b""), None
    trace_generation(  # STRUCTSPEC_TRACE
        result.prompt_tokens,
        result.tokens,
        replayable=_replayable("pregeneration", job, options, result, suffix_tokens),
    )
    return extension(engine, result), result


def _trace(
    kind: str,
    generation: Generation,
    result: GenerationResult,
    job: CompletionInput,
    options: GenerationOptions,
    inputs: DraftInputs,
) -> None:
    """Record a completion's generation for replay (``STRUCTSPEC_TRACE``; else nothing)."""
    healing = generation.healing
    trace_generation(
        result.prompt_tokens,
        result.tokens,
        healing.removed if healing else b"",
        _replayable(kind, job, options, result, inputs.suffix, inputs.recent, inputs.corpus),
    )


def _replayable(
    kind: str,
    job: CompletionInput,
    options: GenerationOptions,
    result: GenerationResult,
    suffix_tokens: Sequence[int],
    recent: Sequence[Sequence[int]] = (),
    corpus: Sequence[Sequence[int]] = (),
) -> Replayable:
    """What a replay of this generation needs (``completion/trace.py``)."""
    return Replayable(
        kind=kind,
        language=job.language or None,
        max_tokens=options.max_tokens,
        stop=options.stop,
        stop_reason=result.stop_reason,
        margins=result.margins,
        end_token=result.end_token,
        suffix=suffix_tokens,
        recent=recent,
        corpus=corpus,
    )

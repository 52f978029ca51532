"""Prefill in chunks that can be abandoned: pre-warming and the latency budget.

A prompt of a few thousand tokens takes seconds to evaluate on a CPU. Two
things need that evaluation to stop part-way without losing what was done:

- **Pre-warm.** When a document is opened, or the user pauses after editing
  somewhere else, its prompt window is evaluated into a KV slot in the
  background so that the first suggestion there does not pay the whole
  prefill. A real request abandons it between two chunks.
- **The prompt budget** (``maxLatencyMs``). A request whose prefill would run
  past the budget stops between chunks and answers nothing; what was evaluated
  stays cached, so the next keystroke continues where this one stopped.

Chunks go through ``Model.prefill`` on growing prefixes of the prompt, which
reuses what is cached and evaluates only the new chunk. The first chunk starts
where the best KV slot already agrees with the prompt (never truncating a slot
below what it holds of this prompt).

Every chunk is also a measurement: its tokens over its seconds feed the
prompt rate (``PromptRate``, a running median kept by the prompt builder),
which sizes the window of a first answer at a new place
(``prompt.first_window``), starting from the rate measured when the model
loaded.

Without the editor's cursor report (Helix, Emacs, Sublime) the places worth
warming are where the user last edited or asked (``Places``, a few per
document, kept in step with edits).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence

from structspec.model.base import Interrupted, Model, common_prefix_len
from structspec.model.extras import kv_slots, prefix_cache

#: Tokens evaluated between two checks of the stop condition.
PREFILL_CHUNK = 128
#: Seconds without edits or requests before a document is pre-warmed.
PREWARM_IDLE_S = 0.5
#: Share of the prompt window an opened document's pre-warm fills (the rest: header, suffix).
WINDOW_SHARE = 0.85
#: Characters of an opened document tokenized per token of room, at most.
_MAX_CHARS_PER_TOKEN = 8
#: Prefill chunks whose rate the median is taken over (the latest ones).
RATE_SAMPLES = 16
#: A chunk that evaluated fewer tokens is not measured: its fixed costs would dominate.
RATE_MIN_TOKENS = 64
#: Prompt tokens/s assumed before any chunk was measured: below what the default
#: model evaluates on 2 cores (450-960 tokens/s, ``docs/MEASUREMENTS.md``), so
#: the first window is the smallest one (``prompt.FIRST_WINDOW_MIN``) until a
#: measurement says the machine can do more.
DEFAULT_PROMPT_RATE = 400.0
#: Places of edits and requests kept per document (the current one and the
#: places pre-warm visits after it); no more than the model's KV slots hold.
PLACES_KEPT = 3
#: Two places closer than this (characters, about 30 lines) are one place: their
#: windows overlap almost entirely, and typing moves the place a character a key.
PLACE_CHARS = 1024


class PromptRate:
    """Prompt tokens per second of the latest prefill chunks: a running median.

    The median of the last ``RATE_SAMPLES`` chunks, so one chunk slowed by a
    neighbour process (or sped up by a state read back from the prefix cache)
    does not move it. Before any chunk: ``initial``, the model's rate measured
    at load (``runtime.model_rates``), else ``DEFAULT_PROMPT_RATE``. Read and
    written on the worker thread only.
    """

    def __init__(self, initial: float | None = None) -> None:
        self._samples: deque[float] = deque(maxlen=RATE_SAMPLES)
        self._initial = DEFAULT_PROMPT_RATE if initial is None else initial
        self._measured_at_load = initial is not None

    def observe(self, tokens: int, seconds: float) -> None:
        """A chunk evaluated ``tokens`` tokens in ``seconds``."""
        if tokens >= RATE_MIN_TOKENS and seconds > 0:
            self._samples.append(tokens / seconds)

    @property
    def measured(self) -> bool:
        return bool(self._samples)

    @property
    def known(self) -> bool:
        """Measured by a chunk, or at load: not the assumed ``DEFAULT_PROMPT_RATE``."""
        return bool(self._samples) or self._measured_at_load

    @property
    def tokens_per_s(self) -> float:
        """The median of the latest chunks; the initial rate before any."""
        return statistics.median(self._samples) if self._samples else self._initial


class Places:
    """A document's latest places of edits and requests, newest first (offsets in its text).

    At most ``PLACES_KEPT``; a place within ``PLACE_CHARS`` of a kept one
    replaces it. Edits move the places after them (``edited``), so a place
    stays where the user was when text above it grows or shrinks. Kept on the
    event loop (``jobs.Session``).
    """

    def __init__(self) -> None:
        self._at: list[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._at))

    @property
    def latest(self) -> int | None:
        return self._at[0] if self._at else None

    def visit(self, offset: int) -> None:
        """The user edited or asked at ``offset``: the newest place."""
        kept = [at for at in self._at if abs(at - offset) >= PLACE_CHARS]
        self._at = [offset, *kept][:PLACES_KEPT]

    def edited(self, end: int | None, delta: int, length: int) -> None:
        """An edit ended at ``end`` (after it) and changed the length by ``delta``.

        The edited region ended at ``end - delta`` before: places from there on
        move by ``delta``; places inside a deleted region fall to ``end``.
        Without an ``end`` (the whole text replaced, or edits the store cannot
        place) the places only stay inside the text.
        """
        if end is None:
            self._at = [min(at, length) for at in self._at]
            return
        old_end = end - delta
        moved = [at + delta if at >= old_end else min(at, end) for at in self._at]
        self._at = [max(0, min(at, length)) for at in moved]


def reusable_prefix(model: Model, tokens: Sequence[int]) -> int:
    """Tokens of ``tokens`` some KV slot of ``model`` already holds."""
    slotted = kv_slots(model)
    if slotted is not None:
        return slotted.reusable_prefix(tokens)
    return common_prefix_len(model.cached_tokens, tokens)


def restorable_prefix(model: Model, tokens: Sequence[int]) -> int:
    """Tokens of ``tokens`` the model's on-disk prefix cache would read back (0: none).

    A state read back costs milliseconds where its evaluation costs seconds,
    so after a restart a window saved before counts as cached
    (``prompt.to_evaluate``). Only what the model itself would restore:
    ``RESTORE_MIN`` tokens or more (``model.prefix_cache``).
    """
    cache = prefix_cache(model)
    return 0 if cache is None else cache.restorable(tokens)[1]


def prefill_in_chunks(
    model: Model,
    tokens: Sequence[int],
    stop: Callable[[], bool],
    chunk: int = PREFILL_CHUNK,
    leave: int = 0,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    rate: PromptRate | None = None,
) -> bool:
    """Evaluate ``tokens`` chunk by chunk until done (``True``) or ``stop()`` (``False``).

    ``leave``: stop (done) once at most that many tokens remain, for a caller
    whose own prefill evaluates the rest in one go. ``deadline`` (a ``clock()``
    time): stop too before a chunk that, at the speed of the chunks before it,
    would end past it with the ``leave`` tokens after it. A chunk takes 100 ms
    on a quiet machine but several times that while other processes hold the
    cores, so checking only the time already spent would let the budget run
    over by a chunk and the rest. A chunk interrupted part-way
    (``model.base.Interrupt``) stops it too (``False``). ``rate``: each
    chunk's tokens/s is recorded there (the tokens it evaluated: those a
    state read back from the prefix cache spared are not counted). A state
    read back for the whole prompt (``SlottedModel.prefill_part``) may spare
    the chunks after the first one too: they are skipped.
    """
    done = reusable_prefix(model, tokens)
    slotted = kv_slots(model)  # chooses the KV slot for the whole prompt
    started, evaluated = clock(), 0
    while len(tokens) - done > leave:
        if stop():
            return False
        step = min(chunk, len(tokens) - done)
        if deadline is not None and evaluated:
            per_token = (clock() - started) / evaluated
            after = min(leave, len(tokens) - done - step)
            if clock() + per_token * (step + after) > deadline:
                return False
        t = clock()
        try:
            if slotted is not None:
                held = slotted.prefill_part(tokens, done + step)
            else:
                held = model.prefill(tokens[: done + step])
        except Interrupted:  # stopped part-way: the chunks before it stay cached
            return False
        fresh = max(0, done + step - max(done, held))  # neither reused nor read back
        if rate is not None:
            rate.observe(fresh, clock() - t)
        done = max(done + step, held)  # a state read back may hold chunks past this one
        evaluated += fresh
    return True


def opening_offset(model: Model, text: str, room: int) -> int:
    """Where to place the cursor of an opened document's pre-warm prompt.

    The end of the last line that fits ``WINDOW_SHARE`` of the window from the
    top (the whole document when it fits): the window then starts at the top
    and its tokens are a prefix of the prompt for any cursor above that line,
    which is where prefix reuse picks them up.
    """
    head = text[: room * _MAX_CHARS_PER_TOKEN]
    tokens = model.tokenize(head, add_bos=False)
    keep = int(room * WINDOW_SHARE)
    if len(tokens) <= keep and len(head) == len(text):
        return len(text)
    end = len(model.detokenize(tokens[:keep]))
    nl = text.rfind("\n", 0, end)
    return nl if nl > 0 else end

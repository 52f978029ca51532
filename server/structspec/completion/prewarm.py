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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from structspec.model.base import Interrupted, Model, common_prefix_len
from structspec.model.extras import kv_slots

#: Tokens evaluated between two checks of the stop condition.
PREFILL_CHUNK = 128
#: Seconds without edits or requests before a document is pre-warmed.
PREWARM_IDLE_S = 0.5
#: Share of the prompt window an opened document's pre-warm fills (the rest: header, suffix).
WINDOW_SHARE = 0.85
#: Characters of an opened document tokenized per token of room, at most.
_MAX_CHARS_PER_TOKEN = 8


def reusable_prefix(model: Model, tokens: Sequence[int]) -> int:
    """Tokens of ``tokens`` some KV slot of ``model`` already holds."""
    slotted = kv_slots(model)
    if slotted is not None:
        return slotted.reusable_prefix(tokens)
    return common_prefix_len(model.cached_tokens, tokens)


def prefill_in_chunks(
    model: Model,
    tokens: Sequence[int],
    stop: Callable[[], bool],
    chunk: int = PREFILL_CHUNK,
    leave: int = 0,
    *,
    deadline: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> bool:
    """Evaluate ``tokens`` chunk by chunk until done (``True``) or ``stop()`` (``False``).

    ``leave``: stop (done) once at most that many tokens remain, for a caller
    whose own prefill evaluates the rest in one go. ``deadline`` (a ``clock()``
    time): stop too before a chunk that, at the speed of the chunks before it,
    would end past it with the ``leave`` tokens after it. A chunk takes 100 ms
    on a quiet machine but several times that while other processes hold the
    cores, so checking only the time already spent would let the budget run
    over by a chunk and the rest. A chunk interrupted part-way
    (``model.base.Interrupt``) stops it too (``False``).
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
        try:
            if slotted is not None:
                slotted.prefill_part(tokens, done + step)
            else:
                model.prefill(tokens[: done + step])
        except Interrupted:  # stopped part-way: the chunks before it stay cached
            return False
        done += step
        evaluated += step
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

"""What a model loaded from a GGUF file offers beyond the engine's ``Model``.

The engine needs only ``Model``. Some callers want more when it is there: the
file the model came from (a cost-table cache key, the ``pld`` baseline), its
GGUF metadata and chat template (the chat endpoint), and a ``close`` that frees
the native memory at once. ``gguf_extras(model)`` is the one way to ask: it
returns the model typed as ``GGUFModel``, or ``None`` for a model without a
file (the stand-in), instead of each caller probing attributes.

A model whose decodes run on a varying number of CPU threads says how many
the next one uses, and can be pinned to a count (``ThreadedModel``, asked
through ``threaded(model)``): the draft planner judges drafts against the cost
table of that many threads, and the table of each count is measured pinned.

A model with several KV slots (one per recent document) also says how much of
a prompt some slot holds, and evaluates a prompt in chunks in the slot the
whole prompt will use (``SlottedModel``, asked through ``kv_slots(model)``):
pre-warm and the latency budget's chunked prefill need both.

A model whose decodes another thread can stop part-way
(``InterruptibleModel``, through ``interrupted_by(model, stop)``) lets a
keystroke take the worker from background work (pre-warm's prefill chunk,
pre-generation's pass) at once instead of after that decode: a chunk of 128
tokens takes a quarter of a second on a quiet 2-core machine and several
times that under load.

A model with an on-disk prompt-prefix cache (``prefix_cache(model)``) restores
from it inside ``prefill`` but saves to it only when asked
(``save_prefixes(model)``), at idle time.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Protocol, runtime_checkable

from structspec.model.base import Interrupt, Model
from structspec.model.prefix_cache import PrefixCache


@runtime_checkable
class GGUFModel(Model, Protocol):
    """A ``Model`` backed by a GGUF file and a native context."""

    path: Path
    #: The file llama.cpp loaded: ``path`` or its widened copy (``model/widen.py``).
    weights: Path
    threads: int
    #: The code computing a verification pass's output head (``"structspec"``,
    #: ``"llama.cpp"``): a cost table measured with one does not hold for the other.
    head: str

    def metadata(self, key: str) -> str | None:
        """A GGUF metadata value as a string, ``None`` when absent."""
        ...

    def chat_template(self) -> str | None: ...

    def close(self) -> None:
        """Free the native model and context now (idempotent)."""
        ...


@runtime_checkable
class SlottedModel(Model, Protocol):
    """A ``Model`` whose KV cache has several slots."""

    def reusable_prefix(self, tokens: Sequence[int]) -> int:
        """Tokens of ``tokens`` the best slot already holds (what ``prefill`` would reuse)."""
        ...

    def prefill_part(self, tokens: Sequence[int], n: int) -> int:
        """``prefill(tokens[:n])`` in the slot ``prefill(tokens)`` would use.

        The slot may then hold more of ``tokens`` (a saved state read back for
        all of them); returns what it held of them before evaluating.
        """
        ...


@runtime_checkable
class ThreadedModel(Model, Protocol):
    """A ``Model`` whose decodes run on a number of CPU threads that may change."""

    threads: int  # the most threads a decode uses

    @property
    def decode_threads(self) -> int:
        """Threads of the next decode."""
        ...

    def threads_pinned(self, threads: int) -> AbstractContextManager[None]:
        """Every decode inside runs on ``threads`` threads."""
        ...


@runtime_checkable
class InterruptibleModel(Model, Protocol):
    """A ``Model`` whose decodes can be stopped part-way from another thread."""

    def interrupted_by(self, stop: Interrupt) -> AbstractContextManager[None]:
        """Decodes inside stop part-way once ``stop`` is set (raising ``Interrupted``)."""
        ...


def interrupted_by(model: Model, stop: Interrupt) -> AbstractContextManager[None]:
    """``model.interrupted_by(stop)`` where the model offers it; else decodes run to their end."""
    if isinstance(model, InterruptibleModel):
        return model.interrupted_by(stop)
    return nullcontext()


def threaded(model: Model) -> ThreadedModel | None:
    """``model`` as a ``ThreadedModel`` when it is one, else ``None``."""
    return model if isinstance(model, ThreadedModel) else None


def contended(model: Model) -> bool:
    """Other processes hold the cores: the next decode runs on fewer threads than the model has.

    The thread governor's verdict (``model/threads.py``); ``False`` for a model
    whose thread count does not change.
    """
    threads = threaded(model)
    return threads is not None and threads.decode_threads < threads.threads


def kv_slots(model: Model) -> SlottedModel | None:
    """``model`` as a ``SlottedModel`` when it is one, else ``None``."""
    return model if isinstance(model, SlottedModel) else None


def gguf_extras(model: Model) -> GGUFModel | None:
    """``model`` as a ``GGUFModel`` when it is one, else ``None``."""
    return model if isinstance(model, GGUFModel) else None


@runtime_checkable
class SavesPrefixes(Model, Protocol):
    """A ``Model`` with an on-disk prefix cache that it fills when told the time is idle."""

    def save_prefixes(self, *, closing: bool = False) -> int:
        """Save what its KV cache holds and the prefix cache lacks; how many entries it wrote.

        ``closing``: the model is released next, so what it holds may be cut first.
        """
        ...


def save_prefixes(model: Model, *, closing: bool = False) -> int:
    """Idle time: ``model`` saves evaluated prefixes to its on-disk cache; how many (0: none due).

    Never inside work a request waits on: a save writes megabytes. ``closing``:
    the last save, before the model is released.
    """
    if prefix_cache(model) is None or not isinstance(model, SavesPrefixes):
        return 0
    return model.save_prefixes(closing=closing)


def prefix_cache(model: Model) -> PrefixCache | None:
    """``model``'s on-disk prompt-prefix cache (``model/prefix_cache.py``), if it has one."""
    cache = getattr(model, "prefix_cache", None)  # LlamaModel and the stand-in carry one
    return cache if isinstance(cache, PrefixCache) else None


def close_model(model: Model | None) -> None:
    """Free ``model``'s native memory now if it holds any."""
    extras = gguf_extras(model) if model is not None else None
    if extras is not None:
        extras.close()

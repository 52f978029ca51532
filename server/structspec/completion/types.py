"""What goes in and out of the completion service, free of any editor protocol.

Columns are in the document store's position encoding. The LSP shapes of
these live in ``structspec.lsp.convert``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from structspec.engine.stats import GenerationStats

#: ``Status.state`` values.
IDLE = "idle"
BUSY = "busy"
ERROR = "error"
#: ``Status.model`` until a model is loaded.
NOT_LOADED = "not loaded"
#: ``Status.message`` starts with it while the worker evaluates a prompt the user
#: waits for past ``maxLatencyMs``, or pre-warms one (``Status.warming``).
WARMING = "warming"


class EmptyReason(StrEnum):
    """Why a request was answered with no suggestion (the log line, ``emptyReasons``).

    Only ``MODEL_EMPTY`` and ``STOP_RULE`` are the model's own choice; the
    others say where an answer was lost.
    """

    #: The model ended without text: end of sequence, or only blanks.
    MODEL_EMPTY = "model-empty"
    #: A stop rule ended it before any text: in single-line mode the model's
    #: first token ends the line; a loop; a block that dedents at once.
    STOP_RULE = "stop-rule"
    #: The model wrote text and the clean-up (``suggest.clean``) dropped it:
    #: it restates the text after the cursor, or is only what closes a bracket,
    #: or, in the middle of a line the model did not see, does not join it.
    CLEANED_AWAY = "cleaned-away"
    #: The prompt's evaluation stopped before it ended: another request needed
    #: the worker (what was evaluated stays cached); with ``backend``: no text
    #: within ``maxLatencyMs``.
    PROMPT_UNFINISHED = "prompt-unfinished"
    #: A newer keystroke's request cancelled it, or the server is shutting down.
    CANCELLED = "cancelled"
    #: The document changed while it ran: the answer was for an older text.
    STALE = "stale"
    #: No model (or backend) could be loaded or reached.
    NO_MODEL = "no-model"
    #: The generation failed (logged with its traceback).
    ERROR = "error"
    #: The document is not open, or its language is not in ``languages``.
    NOT_SERVED = "not-served"


@dataclass(frozen=True)
class SelectedItem:
    """The item selected in the editor's completion menu: ``text`` replacing the
    request's line from column ``start`` to ``end`` (``start <= character <= end``).

    A request naming one is answered as if the item were accepted: at the end
    of ``text``, in the document with the item applied, so that the suggestion
    continues the item (VS Code shows an inline suggestion beside its menu only
    where it does).
    """

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class CompletionRequest:
    """A cursor in an open document; ``invoked``: asked for explicitly (no debounce);
    ``selected``: the completion menu's selected item, if the editor named one."""

    uri: str
    line: int
    character: int
    invoked: bool = False
    selected: SelectedItem | None = None


@dataclass(frozen=True)
class Suggestion:
    """Text to insert at the cursor, with what a protocol layer needs to present it.

    ``line_suffix`` is the text after the cursor on its line; ``word_prefix``
    the identifier characters before it (completion menus filter on them).
    ``replaces``: the columns after ``character`` that ``text`` replaces (the
    rest of the line after them is ``line_suffix``): 0, except after a
    request's ``SelectedItem``, where ``character`` is the item's start,
    ``text`` starts with the item's text and replaces what the item does.
    """

    id: str
    uri: str
    text: str
    line: int
    character: int
    line_end_character: int
    line_suffix: str
    word_prefix: str
    word_start_character: int
    mode: str
    source: str  # "model" or "cache"
    latency_ms: float
    stats: GenerationStats | None = None
    replaces: int = 0


@dataclass(frozen=True)
class ModelCost:
    """What the loaded model costs here: its measured rates and what they chose.

    ``window_tokens``: the prompt window in use (``windowTokens``, adaptive
    unless set); ``first_suggestion_s``: the expected wait for a first
    suggestion at a new place (its first window's evaluation, then the
    generation budget).
    """

    prompt_tps: float
    decode_tps: float
    window_tokens: int
    first_suggestion_s: float

    def measures(self) -> dict[str, float]:
        """By the measure names of the ``structspec_model_cost`` metric (``metrics.py``)."""
        return {
            "prompt_tokens_per_second": self.prompt_tps,
            "decode_tokens_per_second": self.decode_tps,
            "window_tokens": float(self.window_tokens),
            "first_suggestion_seconds": self.first_suggestion_s,
        }


@dataclass(frozen=True)
class Status:
    """The service's state (``IDLE``, ``BUSY``, ``ERROR``) and its running numbers."""

    state: str
    model: str
    tokens_per_second: float | None
    acceptance: float
    last_latency_ms: float | None
    message: str = ""
    counters: dict[str, Any] = field(default_factory=dict)
    #: The worker is evaluating a prompt ahead of its answer (``message``: ``warming <file>``).
    warming: bool = False
    #: What the loaded model costs on this machine (``None``: none loaded, or a backend).
    cost: ModelCost | None = None

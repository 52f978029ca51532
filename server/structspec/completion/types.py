"""What goes in and out of the completion service, free of any editor protocol.

Columns are in the document store's position encoding. The LSP shapes of
these live in ``structspec.lsp.convert``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from structspec.engine.stats import GenerationStats

#: ``Status.state`` values.
IDLE = "idle"
BUSY = "busy"
ERROR = "error"
#: ``Status.model`` until a model is loaded.
NOT_LOADED = "not loaded"


@dataclass(frozen=True)
class CompletionRequest:
    """A cursor in an open document; ``invoked``: asked for explicitly (no debounce)."""

    uri: str
    line: int
    character: int
    invoked: bool = False


@dataclass(frozen=True)
class Suggestion:
    """Text to insert at the cursor, with what a protocol layer needs to present it.

    ``line_suffix`` is the text after the cursor on its line; ``word_prefix``
    the identifier characters before it (completion menus filter on them).
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

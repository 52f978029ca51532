"""The service's state and what it tells the user, on the event loop.

``StatusBoard`` holds the state (``IDLE``, ``BUSY``, ``ERROR``), the model's
name, the count of requests on the worker and whether the worker is warming
(evaluating a prompt past a request's ``maxLatencyMs``, or pre-warming: state
``BUSY``, message ``warming <file>``, ``Status.warming``). It sends
``on_status`` after every change and ``on_message(level, text)`` for what the
user should read (``error``, ``warning`` or ``info``). A failing callback is logged, never
raised: a broken transport must not break completion. It keeps the loaded
model's rates (``rates``) and says what the model costs here (``Status.cost``).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable

from structspec.completion.documents import uri_path
from structspec.completion.prompt import first_window_tokens
from structspec.completion.stats import AcceptanceStats
from structspec.completion.types import (
    BUSY,
    ERROR,
    IDLE,
    NOT_LOADED,
    WARMING,
    ModelCost,
    Status,
)
from structspec.config import Settings
from structspec.rates import Rates, first_suggestion_s

log = logging.getLogger(__name__)


def model_cost(rates: Rates, settings: Settings) -> ModelCost:
    """What a model at ``rates`` costs with ``settings``: the window, the first-suggestion time.

    A first suggestion at a new place waits for its first window
    (``prompt.first_window_tokens`` of the ``windowTokens`` budget; 0 counts
    as the context size; at most what the prompt rate evaluates in 2 s,
    ``rates.first_window_cap``, however large ``windowTokens`` is), then for
    the generation budget.
    """
    budget = settings.window_tokens or settings.context_size
    first = first_window_tokens(rates.prompt_tps, budget)
    return ModelCost(
        rates.prompt_tps,
        rates.decode_tps,
        settings.window_tokens,
        first_suggestion_s(rates, first, settings.max_generation_ms),
    )


class StatusBoard:
    """State, model name and requests in flight; ``on_status``/``on_message`` on the loop."""

    def __init__(
        self,
        stats: AcceptanceStats,
        on_status: Callable[[Status], None] | None,
        on_message: Callable[[str, str], None] | None,
        settings: Callable[[], Settings] = Settings,
    ) -> None:
        self._stats = stats
        self._settings = settings
        #: The loaded model's prompt and decode rates (``None``: none, or a backend).
        self.rates: Rates | None = None
        self._on_status = on_status
        self._on_message = on_message
        self.state = IDLE
        self._message = ""
        self.model_name = NOT_LOADED
        #: Requests submitted to the worker and not answered yet.
        self.busy = 0
        self._warming = False

    def status(self) -> Status:
        stats = self._stats
        return Status(
            self.state,
            self.model_name,
            stats.last_tokens_per_second,
            stats.acceptance,
            stats.last_latency_ms,
            self._message,
            stats.to_dict(),
            self._warming,
            self.cost(),
        )

    def cost(self) -> ModelCost | None:
        """What the loaded model costs here with the settings in use."""
        return None if self.rates is None else model_cost(self.rates, self._settings())

    def set_state(self, state: str, message: str) -> None:
        self.state, self._message = state, message
        self.emit()

    def emit(self) -> None:
        if self._on_status is not None:
            try:
                self._on_status(self.status())
            except Exception:  # a broken transport must not break completion
                log.exception("status notification failed")

    def message_user(self, level: str, text: str) -> None:
        if self._on_message is not None:
            try:
                self._on_message(level, text)
            except Exception:
                log.exception("message to the user failed")

    def request_started(self) -> None:
        self.busy += 1
        if self.busy == 1 and self.state != ERROR:
            self.set_state(BUSY, "")

    def request_ended(self) -> None:
        self.busy -= 1
        if self.busy == 0 and self.state == BUSY:
            self.set_state(IDLE, "")

    def warming(self, uri: str | None) -> None:
        """The worker started warming ``uri`` (a prompt ahead of its answer), or ended (None)."""
        self._warming = uri is not None
        if self.state == ERROR:  # the error stays on screen
            self.emit()
        elif uri is not None:
            self.set_state(BUSY, f"{WARMING} {posixpath.basename(uri_path(uri))}")
        elif self._message.startswith(WARMING):
            self.set_state(BUSY if self.busy else IDLE, "")
        else:
            self.emit()

    def warm_done(self, error: str | None) -> None:
        """A warm-up ended: ``error`` is its message (the user was told by ``model_failed``)."""
        if error is not None:
            self.set_state(ERROR, error)
        elif self.busy == 0:
            self.set_state(IDLE, "")

    def model_failed(self, message: str) -> None:
        """Nothing serves completions now (a load that failed freed the model; a backend
        that fails is reported loaded again once it works): no model, no rates."""
        self.model_name, self.rates = NOT_LOADED, None
        self.set_state(ERROR, message)
        self.message_user("error", message)

    def model_loaded(self, name: str, warnings: list[str], rates: Rates | None = None) -> None:
        self.model_name, self.rates = name, rates
        if self.state == ERROR:
            self.set_state(BUSY if self.busy else IDLE, "")
        for w in warnings:
            self.message_user("warning", w)
        self.emit()

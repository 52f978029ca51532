"""The service's state and what it tells the user, on the event loop.

``StatusBoard`` holds the state (``IDLE``, ``BUSY``, ``ERROR``), the model's
name and the count of requests on the worker, and sends ``on_status`` after
every change and ``on_message(level, text)`` for what the user should read
(``error``, ``warning`` or ``info``). A failing callback is logged, never
raised: a broken transport must not break completion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from structspec.completion.stats import AcceptanceStats
from structspec.completion.types import BUSY, ERROR, IDLE, NOT_LOADED, Status

log = logging.getLogger(__name__)


class StatusBoard:
    """State, model name and requests in flight; ``on_status``/``on_message`` on the loop."""

    def __init__(
        self,
        stats: AcceptanceStats,
        on_status: Callable[[Status], None] | None,
        on_message: Callable[[str, str], None] | None,
    ) -> None:
        self._stats = stats
        self._on_status = on_status
        self._on_message = on_message
        self.state = IDLE
        self._message = ""
        self.model_name = NOT_LOADED
        #: Requests submitted to the worker and not answered yet.
        self.busy = 0

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
        )

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

    def warm_done(self, error: str | None) -> None:
        """A warm-up ended: ``error`` is its message (the user was told by ``model_failed``)."""
        if error is not None:
            self.set_state(ERROR, error)
        elif self.busy == 0:
            self.set_state(IDLE, "")

    def model_failed(self, message: str) -> None:
        self.set_state(ERROR, message)
        self.message_user("error", message)

    def model_loaded(self, name: str, warnings: list[str]) -> None:
        self.model_name = name
        if self.state == ERROR:
            self.set_state(BUSY if self.busy else IDLE, "")
        for w in warnings:
            self.message_user("warning", w)
        self.emit()

"""A stand-in that notes the thread of its creation and of each decode."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from structspec.model.base import Rows
from structspec.model.standin import StandInModel


class RecordingModel(StandInModel):
    """The stand-in, noting the thread of its creation and of each decode."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threads = {"load": threading.get_ident()}
        self.decodes: set[int] = set()

    def prefill(self, tokens: Sequence[int]) -> int:
        self.decodes.add(threading.get_ident())
        return super().prefill(tokens)

    def verify(self, tokens: Sequence[int]) -> Rows:
        self.decodes.add(threading.get_ident())
        return super().verify(tokens)

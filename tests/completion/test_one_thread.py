"""The language server makes every model call on its one worker thread.

An OpenMP build of llama.cpp keeps a thread team per calling thread; a model
loaded on one thread and decoded on another leaves a second team that slows
every pass (``model/threads.py``, "One thread for llama.cpp's calls").
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.helpers.recording_model import RecordingModel

from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings


def test_the_language_server_loads_and_decodes_the_model_on_one_thread():
    made: list[RecordingModel] = []

    def open_model(spec: str, **kw: Any) -> RecordingModel:
        made.append(RecordingModel(seed=0, eos_bias=-3.0))
        return made[-1]

    async def scenario() -> None:
        svc = CompletionService(
            Settings(model="standin", debounce_ms=0, max_tokens=16, sources=("lookup",)),
            on_status=lambda _s: None,
            on_message=lambda _level, _text: None,
            open_model=open_model,
        )
        svc.open_document("u", "python", 1, "def f(x):\n    return x\n\ny = ")
        for col in (4, 4):
            await svc.complete(CompletionRequest("u", 3, col))
        svc.close()

    asyncio.run(scenario())
    assert len(made) == 1
    model = made[0]
    assert model.decodes, "no decode ran"
    assert model.decodes == {model.threads["load"]}
    assert model.threads["load"] != threading.get_ident()

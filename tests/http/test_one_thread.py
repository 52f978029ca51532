"""``structspec serve`` makes every model call on its engine's worker thread.

An OpenMP build of llama.cpp keeps a thread team per calling thread; a model
loaded on the main thread and decoded on the worker leaves a second team that
slows every pass (``model/threads.py``, "One thread for llama.cpp's calls").
The stand-in records the thread of its load and of every prefill and
verification pass.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

import pytest
from starlette.testclient import TestClient
from tests.helpers.http_server import standin_engine
from tests.helpers.recording_model import RecordingModel

from structspec.commands import serve
from structspec.config import Settings
from structspec.engine.decode import Engine
from structspec.http.worker import EngineWorker
from structspec.metrics import Metrics


def test_serve_loads_and_decodes_the_model_on_one_thread(monkeypatch: pytest.MonkeyPatch):
    made: list[RecordingModel] = []

    def load_engine(settings: Settings, **kwargs: Any) -> Engine:
        made.append(RecordingModel(seed=0, eos_bias=-3.0))
        return standin_engine(made[0])

    monkeypatch.setattr("structspec.runtime.load_engine", load_engine)
    args = argparse.Namespace(max_queue=4, max_body_bytes=1 << 20, body_timeout=10.0, greedy=False)
    app, what, shutdown = serve._model_app(args, Settings(model="standin"))
    with TestClient(app) as client:
        for prompt in ("def f(x):\n", "class A:\n"):
            r = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 8})
            assert r.status_code == 200
    shutdown()
    model = made[0]
    assert model.decodes, "no decode ran"
    assert model.decodes == {model.threads["load"]}
    assert model.threads["load"] != threading.get_ident()


def test_a_loader_that_fails_raises_in_the_caller():
    def load() -> Engine:
        raise RuntimeError("no such model")

    with pytest.raises(RuntimeError, match="no such model"):
        EngineWorker(load, Metrics())


def test_an_engine_given_ready_is_served_as_before():
    engine = standin_engine()
    worker = EngineWorker(engine, Metrics())
    try:
        assert worker.engine is engine
    finally:
        worker.close()

"""Every empty answer has a reason, and a prompt evaluated past maxLatencyMs still answers."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import pytest
from tests.helpers.scripted import ScriptedModel

from structspec.completion import generate as generate_module
from structspec.completion import prompt as prompt_module
from structspec.completion import request as request_module
from structspec.completion.documents import Range, TextChange
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.completion.types import BUSY, IDLE, Status
from structspec.config import Settings
from structspec.model.base import ModelError

URI = "file:///p/a.py"
OTHER = "file:///p/b.py"
#: A file whose prompt takes several chunks (each one second on the scripted clock).
LONG = "".join(f"value_{i} = compute({i}, step=2)\n" for i in range(60))


def make_service(model, statuses: list[Status] | None = None, **settings) -> CompletionService:
    base = dict(model="standin", debounce_ms=0, max_tokens=16, sources=("lookup",))
    base.update(settings)

    def opened(spec, **kw):
        if model is None:
            raise ModelError("structspec: no model here")
        return model

    on_status = statuses.append if statuses is not None else None
    return CompletionService(Settings(**base), open_model=opened, on_status=on_status)


async def ask(svc: CompletionService, uri: str, text: str, offset: int):
    line = text.count("\n", 0, offset)
    character = offset - (text.rfind("\n", 0, offset) + 1)
    return await svc.complete(CompletionRequest(uri, line, character, invoked=True))


async def wait_for(condition, timeout: float = 60.0) -> None:
    """Wait (not a timing assertion) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def one_answer(model, text: str, offset: int, caplog, **settings):
    svc = make_service(model, **settings)
    svc.open_document(URI, "python", 1, text)
    with caplog.at_level(logging.INFO, logger="structspec.completion.request"):
        answer = await ask(svc, URI, text, offset)
    reasons = svc.stats.to_dict()["emptyReasons"]
    svc.close()
    assert svc.join()
    return answer, reasons


# -- the reasons -----------------------------------------------------------------


async def test_the_model_ending_at_once_is_model_empty(caplog):
    text = "def f():\n    "
    answer, reasons = await one_answer(ScriptedModel(""), text, len(text), caplog)
    assert answer is None
    assert reasons == {"model-empty": 1}
    assert "no suggestion (model-empty) at a.py:2:4" in caplog.text


async def test_a_line_the_model_ends_at_once_is_the_stop_rule(caplog):
    text = "x = f(a)\n"
    answer, reasons = await one_answer(ScriptedModel("\nyz"), text, len("x = f("), caplog)
    assert answer is None
    assert reasons == {"stop-rule": 1}


async def test_text_that_restates_the_rest_of_the_line_is_cleaned_away(caplog):
    text = "value = compute(1)\n"
    cursor = len("value = ")
    answer, reasons = await one_answer(ScriptedModel("compute(1)\n"), text, cursor, caplog)
    assert answer is None
    assert reasons == {"cleaned-away": 1}
    assert "no suggestion (cleaned-away)" in caplog.text
    # The same model where the line is empty answers: the clean-up made the difference.
    fresh = "value = \n"
    shown, _ = await one_answer(ScriptedModel("compute(1)\n"), fresh, cursor, caplog)
    assert shown is not None and shown.text == "compute(1)"


async def test_no_model_and_a_document_not_open(caplog):
    svc = make_service(None)
    svc.open_document(URI, "python", 1, "x = 1\n")
    assert await ask(svc, URI, "x = 1\n", 5) is None
    assert await ask(svc, OTHER, "", 0) is None
    assert svc.stats.to_dict()["emptyReasons"] == {"no-model": 1, "not-served": 1}
    assert svc.stats.empty == 2
    svc.close()
    assert svc.join()


class GatedScript(ScriptedModel):
    """A scripted model whose prefills wait for ``gate`` once ``hold`` is set."""

    def __init__(self, script: str) -> None:
        super().__init__(script)
        self.hold = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def prefill(self, tokens: Sequence[int]) -> int:
        if self.hold:
            self.entered.set()
            self.gate.wait(30)
        return super().prefill(tokens)


async def test_a_newer_keystroke_cancels():
    text = "def f():\n    "
    model = GatedScript("x = 1\n")
    svc = make_service(model)
    svc.open_document(URI, "python", 1, text)
    model.hold = True
    first = asyncio.ensure_future(ask(svc, URI, text, len(text)))
    await wait_for(model.entered.is_set)
    job = svc._sessions[URI].job
    assert job is not None
    # A request elsewhere in the same document: the first one's job is cancelled.
    second = asyncio.ensure_future(ask(svc, URI, text, len("def f():\n  ")))
    await wait_for(job.cancelled)
    model.hold = False
    model.gate.set()
    assert await first is None
    await second
    assert svc.stats.to_dict()["emptyReasons"] == {"cancelled": 1}
    svc.close()
    assert svc.join()


async def test_an_edit_while_the_model_works_makes_its_answer_stale():
    text = "def f():\n    "
    model = GatedScript("x = 1\n")
    svc = make_service(model)
    svc.open_document(URI, "python", 1, text)
    model.hold = True
    answer = asyncio.ensure_future(ask(svc, URI, text, len(text)))
    await wait_for(model.entered.is_set)
    svc.change_document(URI, 2, [TextChange("# c\n", Range(0, 0, 0, 0))])
    model.hold = False
    model.gate.set()
    assert await answer is None
    assert svc.stats.to_dict()["emptyReasons"] == {"stale": 1}
    svc.close()
    assert svc.join()


# -- a prompt evaluated past maxLatencyMs -------------------------------------------


class Clock:
    """The service's clock: every prefill chunk takes one second."""

    now = 1000.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(request_module, "time", clock)  # the request's t0
    monkeypatch.setattr(generate_module, "time", clock)  # the budget during prefill
    return clock


class SlowScript(GatedScript):
    """Each prefill takes a second on ``clock``; records the prefills (tokens, reused)."""

    def __init__(self, script: str, clock: Clock) -> None:
        super().__init__(script)
        self.clock = clock
        self.prefills: list[tuple[int, int]] = []

    def prefill(self, tokens: Sequence[int]) -> int:
        self.clock.now += 1.0
        reused = super().prefill(tokens)
        self.prefills.append((len(tokens), reused))
        return reused


SCRIPT = "total = 0\n"


async def test_a_prompt_past_max_latency_is_evaluated_to_the_end_and_answers(clock, caplog):
    # What the model writes there with all the time it needs.
    reference, _ = await one_answer(ScriptedModel(SCRIPT), LONG, len(LONG), caplog)
    assert reference is not None and reference.text == "total = 0"

    statuses: list[Status] = []
    model = SlowScript(SCRIPT, clock)
    svc = make_service(model, statuses, max_latency_ms=2500, max_generation_ms=600_000)
    svc.open_document(URI, "python", 1, LONG)
    t0 = clock.now
    answer = await ask(svc, URI, LONG, len(LONG))
    # The chunks that fit the 2.5 s budget, then the rest evaluated after it (a
    # second each), and answered.
    assert clock.now - t0 > 2.5
    assert answer is not None and answer.text == reference.text
    assert svc.stats.empty == 0
    warming = [s for s in statuses if s.warming]
    assert warming and all(s.state == BUSY and s.message == "warming a.py" for s in warming)
    assert statuses[-1].state == IDLE and not statuses[-1].warming
    svc.close()
    assert svc.join()


async def test_another_request_stops_the_evaluation_past_the_budget(clock, caplog, monkeypatch):
    # A first window of the whole window: several chunks are left past the budget.
    monkeypatch.setattr(prompt_module, "FIRST_WINDOW_MIN", 1536)
    model = SlowScript(SCRIPT, clock)
    svc = make_service(model, max_latency_ms=2500, max_generation_ms=600_000)
    svc.open_document(URI, "python", 1, LONG)
    svc.open_document(OTHER, "python", 1, "x = 1\n")
    model.hold = True  # the first prefill past the budget waits (the one chunk within it too)
    first = asyncio.ensure_future(ask(svc, URI, LONG, len(LONG)))
    await wait_for(model.entered.is_set)
    model.gate.set()  # the chunk within the budget
    model.entered.clear()
    model.gate.clear()
    await wait_for(model.entered.is_set)  # the first chunk past it
    await wait_for(lambda: svc.status().warming)  # (the status is told on the loop)
    assert svc.status().message == "warming a.py"
    other = asyncio.ensure_future(ask(svc, OTHER, "x = 1\n", 5))
    await wait_for(svc._worker.requests_waiting)
    model.hold = False
    model.gate.set()
    with caplog.at_level(logging.INFO, logger="structspec.completion.request"):
        assert await first is None
    await other
    assert svc.stats.to_dict()["emptyReasons"] == {"prompt-unfinished": 1}
    assert "no suggestion (prompt-unfinished) at a.py:61:0" in caplog.text
    evaluated = [n for n, _ in model.prefills[:2]]
    assert evaluated == [128, 256]  # stopped after the chunk in progress
    # The next request there answers (the worker is free again).
    answer = await ask(svc, URI, LONG, len(LONG))
    assert answer is not None and answer.text == "total = 0"
    svc.close()
    assert svc.join()

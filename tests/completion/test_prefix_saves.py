"""The on-disk prefix cache is written at idle time, never on a request's path.

A save writes the whole KV state (megabytes on the real model), so the worker
saves after a request is answered (its idle slot) and at shutdown; the prefill
a request waits on only reads back. On the stand-in: the answer comes before
the save, and after a restart the saved prefix is restored and gives the same
suggestion as an evaluated one.
"""

from __future__ import annotations

import threading
from pathlib import Path

from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings
from structspec.model.prefix_cache import SAVE_GAP, PrefixCache
from structspec.model.standin import StandInModel

URI = "file:///p/a.py"
#: A document whose prompt is well past ``SAVE_GAP`` stand-in tokens.
TEXT = "".join(f"value_{i} = compute({i}, step=2)\n" for i in range(60)) + "total = "


class SaveGate(StandInModel):
    """A stand-in whose saves wait until the test opens the gate, and say whether it was open.

    A save inside the request would hold back its answer until the gate's
    timeout: the answer would then come after a closed-gate save.
    """

    def __init__(self, gate: threading.Event) -> None:
        super().__init__(eos_bias=-3.0)
        self.gate = gate
        self.gate_open_at_save: list[bool] = []
        self.closing_at_save: list[bool] = []

    def save_prefixes(self, *, closing: bool = False) -> int:
        if len(self.cached_tokens) >= SAVE_GAP:  # something to save (not the warm-up's slot)
            self.gate_open_at_save.append(self.gate.wait(timeout=30))
        self.closing_at_save.append(closing)
        return super().save_prefixes(closing=closing)


def service(model: StandInModel, folder: Path | None) -> CompletionService:
    if folder is not None:
        model.prefix_cache = PrefixCache(folder, model.identity())
    settings = Settings(model="standin", debounce_ms=0, max_tokens=16, sources=("lookup",))
    return CompletionService(settings, open_model=lambda spec, **kw: model)


async def answer_once(svc: CompletionService) -> str | None:
    svc.open_document(URI, "python", 1, TEXT)
    line = TEXT.count("\n")
    result = await svc.complete(CompletionRequest(URI, line, len("total = "), invoked=True))
    svc.close()
    assert svc.join()
    return None if result is None else result.text


async def test_the_answer_comes_before_the_save_and_a_restart_restores_it(tmp_path):
    gate = threading.Event()
    first = SaveGate(gate)
    svc = service(first, tmp_path)
    svc.open_document(URI, "python", 1, TEXT)
    line = TEXT.count("\n")
    answer = await svc.complete(CompletionRequest(URI, line, len("total = "), invoked=True))
    assert first.prefix_cache is not None
    assert first.prefix_cache.saves == 0  # answered with nothing written yet
    gate.set()
    svc.close()
    assert svc.join()
    assert first.gate_open_at_save and all(first.gate_open_at_save)
    assert first.prefix_cache.saves >= 1
    # Only the last save, before the model is released, may cut what it holds.
    assert first.closing_at_save[-1] and not any(first.closing_at_save[:-1])
    assert answer is not None and answer.text

    restarted = StandInModel(eos_bias=-3.0)
    again = await answer_once(service(restarted, tmp_path))
    assert restarted.prefix_cache is not None and restarted.prefix_cache.hits >= 1
    assert restarted.prefilled_tokens < first.prefilled_tokens  # restored, not evaluated
    evaluated = await answer_once(service(StandInModel(eos_bias=-3.0), None))
    assert again == evaluated == answer.text


def test_a_prefill_alone_writes_nothing(tmp_path):
    model = StandInModel()
    model.prefix_cache = PrefixCache(tmp_path, model.identity())
    model.prefill(model.tokenize(TEXT))
    assert list(tmp_path.iterdir()) == []
    assert model.save_prefixes() == 1
    assert model.save_prefixes() == 0  # nothing new since

"""The adaptive defaults in the completion service, on the stand-in with scripted rates."""

from __future__ import annotations

import asyncio

from tests.completion.conftest import SCRIPTED_PROMPT_RATE
from tests.completion.test_prewarm import PY, RecordingStandIn, wait_for

from structspec.completion.prewarm import DEFAULT_PROMPT_RATE, PromptRate
from structspec.completion.prompt import (
    FIM_SUFFIX_TOKENS,
    SUFFIX_MIN,
    first_window_tokens,
    suffix_budget,
)
from structspec.completion.service import CompletionRequest, CompletionService, Status
from structspec.config import Settings
from structspec.lsp.convert import status_json
from structspec.model.standin import StandInModel
from structspec.rates import Rates, adaptive_defaults

#: Qwen2.5-Coder-1.5B at Q4_K_M on 2 cores (docs/BENCHMARKS-shapes.md).
CODER_1_5B = Rates(163.1, 11.6)


def service(rates: Rates | None, explicit=(), **settings) -> tuple[CompletionService, list[Status]]:
    statuses: list[Status] = []
    model = StandInModel(eos_bias=-3.0)
    svc = CompletionService(
        Settings(model="standin", debounce_ms=0, sources=("lookup",), **settings),
        explicit=explicit,
        on_status=statuses.append,
        open_model=lambda spec, **kw: model,
        model_rates=lambda model, announce: rates,
    )
    return svc, statuses


def loaded(svc: CompletionService) -> bool:
    return svc.status().model != "not loaded"


def test_the_rates_choose_the_defaults_once_the_model_is_loaded():
    async def scenario():
        svc, statuses = service(CODER_1_5B)
        before = svc.settings
        svc.configure(svc.settings)
        await wait_for(lambda: loaded(svc))
        after = svc.settings
        svc.open_document("u", "python", 1, "x = 1\ny = ")
        suggestion = await svc.complete(CompletionRequest("u", 1, 4))
        prompt_rate = svc._worker.host.prompts.rate
        svc.close()
        assert svc.join()
        return before, after, suggestion, statuses, prompt_rate

    before, after, suggestion, statuses, prompt_rate = asyncio.run(scenario())
    assert before == Settings(model="standin", debounce_ms=0, sources=("lookup",))
    chosen = adaptive_defaults(CODER_1_5B)
    assert (after.window_tokens, after.max_generation_ms, after.max_tokens) == (
        chosen["window_tokens"],
        chosen["max_generation_ms"],
        chosen["max_tokens"],
    )
    assert suggestion is not None
    # the first-window policy starts from the rate measured at load
    assert prompt_rate.known
    cost = statuses[-1].cost
    assert cost is not None
    assert (cost.prompt_tps, cost.decode_tps, cost.window_tokens) == (163.1, 11.6, 326)
    # the first window is the whole (adaptive) window here: 326 tokens, then 173 ms
    assert cost.first_suggestion_s == 326 / 163.1 + 0.173
    payload = status_json(statuses[-1])["cost"]
    assert payload == {
        "promptTokensPerSecond": 163.1,
        "decodeTokensPerSecond": 11.6,
        "windowTokens": 326,
        "firstSuggestionMs": 2172,
    }


def test_explicit_settings_win_over_the_rates():
    async def scenario():
        svc, _ = service(
            CODER_1_5B, explicit={"max_tokens", "window_tokens"}, max_tokens=8, window_tokens=900
        )
        svc.configure(svc.settings, explicit={"max_tokens", "window_tokens"})
        await wait_for(lambda: loaded(svc))
        settings = svc.settings
        svc.close()
        assert svc.join()
        return settings

    settings = asyncio.run(scenario())
    assert (settings.max_tokens, settings.window_tokens) == (8, 900)
    assert settings.max_generation_ms == adaptive_defaults(CODER_1_5B)["max_generation_ms"]


def test_without_rates_the_static_defaults_stay():
    async def scenario():
        svc, statuses = service(None)
        svc.configure(svc.settings)
        await wait_for(lambda: loaded(svc))
        settings = svc.settings
        svc.close()
        assert svc.join()
        return settings, statuses

    settings, statuses = asyncio.run(scenario())
    assert settings == Settings(model="standin", debounce_ms=0, sources=("lookup",))
    assert statuses[-1].cost is None
    assert status_json(statuses[-1])["cost"] is None


def test_a_failing_measurement_costs_only_the_adaptive_defaults():
    def broken(model, announce):
        raise RuntimeError("no clock")

    async def scenario():
        svc = CompletionService(
            Settings(model="standin", debounce_ms=0, sources=("lookup",)),
            open_model=lambda spec, **kw: StandInModel(eos_bias=-3.0),
            model_rates=broken,
        )
        svc.open_document("u", "python", 1, "x = 1\ny = ")
        suggestion = await svc.complete(CompletionRequest("u", 1, 4))
        settings = svc.settings
        svc.close()
        assert svc.join()
        return suggestion, settings

    suggestion, settings = asyncio.run(scenario())
    assert suggestion is not None
    assert settings.window_tokens == Settings().window_tokens


def test_the_prompt_rate_starts_from_the_measured_one():
    assert PromptRate(163.1).tokens_per_s == 163.1
    assert PromptRate(163.1).known
    assert PromptRate().tokens_per_s == DEFAULT_PROMPT_RATE
    assert not PromptRate().known
    rate = PromptRate(163.1)
    rate.observe(128, 0.25)  # a chunk measured (conftest scripts its rate): it takes over
    assert rate.tokens_per_s == SCRIPTED_PROMPT_RATE


def test_the_suffix_is_what_a_keystroke_evaluates_in_its_share():
    assert suffix_budget(163.1) == SUFFIX_MIN  # 16 tokens: a tenth of a second
    assert suffix_budget(669.0) == 66
    assert suffix_budget(10_000.0) == FIM_SUFFIX_TOKENS
    assert suffix_budget(1.0) == SUFFIX_MIN


def test_first_window_tokens():
    assert first_window_tokens(163.1, 326) == 326  # the floor (512) is above the budget
    assert first_window_tokens(669.0, 1338) == 512  # the floor
    assert first_window_tokens(4000.0, 1536) == 1000  # a quarter second at the rate
    # a slow model: what 2 s evaluate, below the floor and whatever the budget
    assert first_window_tokens(163.1, 1536) == 326
    assert first_window_tokens(42.9, 128) == 85


#: ``PromptRate.observe`` as it measures (conftest.py scripts it at 1,000 tokens/s).
_OBSERVE = PromptRate.observe


def _scripted_chunks(monkeypatch, tokens_per_s: float) -> None:
    """Every prefill chunk measures ``tokens_per_s`` (the model's measured rate)."""
    monkeypatch.setattr(
        PromptRate, "observe", lambda self, n, s: _OBSERVE(self, n, n / tokens_per_s)
    )


def test_an_explicit_window_is_capped_at_a_new_place_and_grown_by_prewarm(monkeypatch):
    """windowTokens 1536 on Qwen2.5-Coder-1.5B's rates: a first answer from 326 tokens (2 s)."""
    _scripted_chunks(monkeypatch, CODER_1_5B.prompt_tps)
    model = RecordingStandIn(n_ctx=4096, eos_bias=-3.0)
    uri = "file:///p/a.py"

    async def scenario():
        svc = CompletionService(
            Settings(model="standin", debounce_ms=0, sources=("lookup",), window_tokens=1536),
            explicit={"window_tokens"},
            open_model=lambda spec, **kw: model,
            model_rates=lambda model, announce: CODER_1_5B,
        )
        svc.open_document(uri, "python", 1, PY)
        await wait_for(lambda: svc.stats.prewarmed == 1)  # the top of the document
        cost = svc.status().cost
        model.prefills.clear()
        await svc.complete(CompletionRequest(uri, 110, 5, invoked=True))  # a jump
        first = max(n for n, _ in model.prefills)
        first_cut = svc._sessions[uri].cut
        await wait_for(lambda: svc.stats.prewarmed == 2)  # pre-warm grew the window there
        grown_cut = svc._sessions[uri].cut
        model.prefills.clear()
        await svc.complete(CompletionRequest(uri, 110, 4, invoked=True))
        after = model.prefills[0]
        settings = svc.settings
        svc.close()
        assert svc.join()
        return cost, first, first_cut, grown_cut, after, settings

    cost, first, first_cut, grown_cut, after, settings = asyncio.run(scenario())
    assert settings.window_tokens == 1536  # the explicit setting stays the window in effect
    assert first <= 326 + 1  # BOS and a window evaluated in 2 s at 163.1 tokens/s
    assert grown_cut < first_cut  # pre-warm grew it to the 1536-token window
    tokens, reused = after
    assert tokens > 600 and reused >= tokens - 2  # the full window, cached
    # the status counts the cap: 326 tokens at 163.1 tokens/s, then the generation budget
    assert cost is not None and cost.window_tokens == 1536
    generation_s = adaptive_defaults(CODER_1_5B)["max_generation_ms"] / 1000.0
    assert cost.first_suggestion_s == 326 / 163.1 + generation_s


def test_a_fast_model_keeps_its_first_window():
    async def scenario(rates: Rates):
        svc, statuses = service(rates, explicit={"window_tokens"}, window_tokens=1536)
        svc.configure(svc.settings, explicit={"window_tokens"})
        await wait_for(lambda: loaded(svc))
        svc.close()
        assert svc.join()
        return statuses[-1].cost

    cost = asyncio.run(scenario(Rates(669.0, 61.7)))  # the default model on 2 cores
    assert cost is not None and cost.first_suggestion_s == 512 / 669.0 + 0.234  # the floor
    cost = asyncio.run(scenario(CODER_1_5B))
    assert cost is not None and cost.first_suggestion_s == 326 / 163.1 + 0.173  # the cap

"""``structspec_model_cost``: what the model costs here, from the metrics to the status."""

from __future__ import annotations

from structspec.commands.status import model_cost_line
from structspec.completion.status import model_cost
from structspec.config import Settings
from structspec.metrics import MODEL_COST_MEASURES, Metrics, snapshot
from structspec.rates import Rates, adapt


def test_the_model_cost_goes_through_the_metrics_to_the_status_line():
    rates = Rates(163.1, 11.6)
    cost = model_cost(rates, adapt(Settings(), rates, explicit=()))
    metrics = Metrics(model="qwen.gguf")
    metrics.set_model_cost(cost.measures())
    snap = snapshot(metrics.render().decode())
    assert set(snap.model_cost) == set(MODEL_COST_MEASURES)
    assert snap.model_cost["window_tokens"] == 326
    assert snap.to_dict()["model_cost"] == snap.model_cost
    line = model_cost_line(snap.model_cost)
    assert line == (
        "prompt 163 tok/s, decode 11.6 tok/s; window 326 tokens, "
        "first suggestion at a new place in about 2.17 s"
    )


def test_no_cost_before_it_is_known():
    snap = snapshot(Metrics(model="m").render().decode())
    assert snap.model_cost == {}
    assert model_cost_line(snap.model_cost) == ""


def test_an_explicit_window_is_the_one_reported():
    rates = Rates(163.1, 11.6)
    cost = model_cost(rates, adapt(Settings(window_tokens=1536), rates, {"window_tokens"}))
    # the first window is what 2 s evaluate (326 tokens), below the 512-token floor of the
    # 1,536 budget: 2 s, then 173 ms
    assert cost.window_tokens == 1536
    assert round(cost.first_suggestion_s, 2) == round(326 / 163.1 + 0.173, 2)

"""Assemble a ready engine from settings: model, draft sources, cost model, planner.

This is the one place the surfaces (CLI, LSP, HTTP) get an engine from, so
they never touch llama.cpp themselves.

Model specs: a GGUF path; empty for the embedded default model (assembled from
its PyPI package on first use, path announced once); or ``standin[:SEED]``,
the deterministic numpy toy model used by the tests (not a language model).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from structspec.config import Settings
from structspec.drafts.base import DraftSource
from structspec.drafts.domain import domain_policy
from structspec.drafts.registry import build_sources
from structspec.engine.control import AdaptiveKController, CostModel, DraftPlanner, EntropyGate
from structspec.engine.decode import Engine
from structspec.model.base import Model, ModelError
from structspec.model.standin import StandInModel

Announce = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def priors_for(sources: Sequence[DraftSource]) -> dict[str, float]:
    """The controller's starting acceptance estimates, from the sources' own modules.

    A source module defines ``PRIORS`` keyed ``source`` or ``source:tier``
    (measured acceptance); a key without one starts at the controller's default.
    """
    priors: dict[str, float] = {}
    for source in sources:
        priors.update(getattr(sys.modules[type(source).__module__], "PRIORS", {}))
    return priors


def open_model(
    spec: str,
    *,
    context_size: int = 4096,
    threads: int = 2,
    announce: Announce = _stderr,
    slots: int = 1,
) -> Model:
    """Open the model named by ``spec`` (see the module docstring).

    ``slots``: independent KV caches of ``context_size`` each (a GGUF model
    only); the language server keeps one per recently edited document.
    """
    if spec == "standin" or spec.startswith("standin:"):
        seed = spec.partition(":")[2] or "0"
        if not seed.isdigit():
            raise ModelError(f"standin model seed must be an integer, not {seed!r}")
        return StandInModel(seed=int(seed), n_ctx=context_size, eos_bias=-3.0)
    from structspec.model.llama import LlamaModel, default_model_path

    path = spec or str(default_model_path(announce))
    return LlamaModel.load(path, n_ctx=context_size, threads=threads, slots=slots)


def cost_model_for(model: Model, announce: Announce = _stderr) -> CostModel:
    """The verification cost table of ``model`` on this machine (measured once, cached)."""
    from structspec.model.llama import LlamaModel

    if isinstance(model, LlamaModel):
        return model.cost_model(announce)
    # The stand-in is a CPU-free toy: give it a CPU-like table so control is exercised.
    return CostModel(tuple(1.0 + 0.35 * (n - 1) for n in range(1, 17)))


def make_planner(cost: CostModel, sources: Sequence[DraftSource] = ()) -> DraftPlanner:
    return DraftPlanner(cost, AdaptiveKController(priors_for(sources)), EntropyGate())


def load_engine(
    settings: Settings,
    *,
    model: Model | None = None,
    sources: Sequence[str] | None = None,
    announce: Announce = _stderr,
) -> Engine:
    """An engine for ``settings`` (``model`` reuses an open one; ``sources`` overrides)."""
    if model is None:
        model = open_model(
            settings.model,
            context_size=settings.context_size,
            threads=settings.threads,
            announce=announce,
        )
    return assemble_engine(model, settings, cost_model_for(model, announce), sources=sources)


def assemble_engine(
    model: Model, settings: Settings, cost: CostModel, *, sources: Sequence[str] | None = None
) -> Engine:
    """The engine of ``settings`` over an open ``model`` with the cost table ``cost``."""
    names = settings.source_names() if sources is None else tuple(sources)
    built = build_sources(names, model, rules_file=settings.rules_file)
    return Engine(model, built, make_planner(cost, built), policy=domain_policy)

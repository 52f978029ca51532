"""The engine: decode loops and draft control. Pure logic over the ``Model`` protocol."""

from structspec.engine.control import (
    AcceptanceEstimator,
    CostModel,
    DraftPlanner,
    MarginGate,
    measure_cost,
)
from structspec.engine.decode import (
    Engine,
    EngineError,
    Generation,
    GenerationOptions,
    GenerationResult,
    Step,
    accepted_length,
    fit_prompt,
)
from structspec.engine.sampling import Sampling
from structspec.engine.stats import GenerationStats, PassTrace, SourceStats

__all__ = [
    "AcceptanceEstimator",
    "CostModel",
    "DraftPlanner",
    "Engine",
    "EngineError",
    "MarginGate",
    "Generation",
    "GenerationOptions",
    "GenerationResult",
    "GenerationStats",
    "PassTrace",
    "Sampling",
    "SourceStats",
    "Step",
    "accepted_length",
    "fit_prompt",
    "measure_cost",
]

"""The side-by-side suites: every mode on every prompt in one process, interleaved.

``run_side_by_side`` opens the model once, builds the engines of the
structspec modes over it (``greedy`` is the full engine with drafts off; an
ablation ``structspec:A+B`` its own engine with only those sources) and the
external baselines (``pld``, ``llama-server[:TYPE]``) and ``structspec serve`` over HTTP
(``serve``), then runs each prompt in every mode, in an order that changes
per prompt and repeat so that drift of a shared machine hits every mode alike
and no mode always follows the same one (``harness.mode_order``), optionally
after a rest before every request (an editor's requests come after the user
paused, not back to back). Greedy output is checked token by token against
the teacher-forced argmax as it goes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structspec.bench.harness import (
    GREEDY,
    SERVE_MODE,
    BaselineError,
    Exactness,
    PromptLookupBaseline,
    Run,
    ablation_sources,
    is_external_mode,
    is_llama_server_mode,
    mode_order,
    output_gaps,
    run_engine,
    summarize,
)
from structspec.bench.llama_server import LlamaServerBaseline, LlamaServerError
from structspec.bench.structspec_serve import ServeBaseline, ServeError, ServeOptions
from structspec.bench.suites import Prompt
from structspec.engine.sampling import Sampling
from structspec.errors import UserError
from structspec.model.extras import gguf_extras

if TYPE_CHECKING:
    from structspec.config import Settings
    from structspec.engine.decode import Engine
    from structspec.model.base import Model


@dataclass(frozen=True)
class SideBySide:
    """What ``run_side_by_side`` measured: every run and the summary over them."""

    runs: list[Run]
    #: Each prompt's token ids, by prompt id.
    prompt_tokens: dict[str, list[int]]
    #: ``harness.summarize``'s, with the sampling, the baseline's failures and
    #: (greedy, when checked) the exactness counts per mode.
    summary: dict[str, Any]
    #: The model, with the code that computes its output head when known.
    model_name: str


@dataclass(frozen=True)
class RunOptions:
    """How to run: the modes, how many tokens and repeats, how to sample, what to check."""

    modes: Sequence[str]
    max_tokens: int
    repeat: int
    sampling: Sampling = GREEDY
    #: The teacher-forced check of greedy output (never run when sampling).
    exactness: bool = True
    #: Measure the verification cost table again before running.
    recalibrate: bool = False
    #: llama.cpp's ``llama-server`` binary, for the llama-server modes.
    llama_server: str | None = None
    #: Seconds of rest before every request (0: back to back).
    rest_s: float = 0.0


def run_side_by_side(settings: Settings, prompts: Sequence[Prompt], plan: RunOptions) -> SideBySide:
    """Open the model, build every mode and run the prompts (``UserError``: a mode cannot run)."""
    from structspec.runtime import cost_model_for, load_engine, open_model, thread_costs_for

    model = open_model(
        settings.model,
        context_size=settings.context_size,
        threads=settings.threads,
        widen=settings.widen_weights,
    )
    if plan.recalibrate:  # measured again into the cache, where every engine below reads it
        thread_costs_for(model, cost_model_for(model, refresh=True), refresh=True)
    engine = load_engine(settings, model=model)
    engines = {m: engine for m in ("greedy", "structspec")}  # greedy: no drafts
    for mode in plan.modes:
        names = ablation_sources(mode)
        if names is not None:
            engines[mode] = load_engine(settings, model=model, sources=names)
    server_modes = [m for m in plan.modes if is_llama_server_mode(m)]
    extras = gguf_extras(model)
    if extras is None and ("pld" in plan.modes or server_modes):
        first = "pld" if "pld" in plan.modes else server_modes[0]
        raise UserError(f"the {first} mode needs a GGUF model")
    path = str(extras.path) if extras is not None else ""
    pld = None
    if "pld" in plan.modes:
        pld = PromptLookupBaseline(
            path, settings.threads, n_ctx=settings.context_size, sampling=plan.sampling
        )
    servers: dict[str, LlamaServerBaseline | ServeBaseline] = {}
    try:
        if SERVE_MODE in plan.modes:
            options = ServeOptions(
                path or settings.model,  # the stand-in by name
                settings.threads,
                settings.context_size,
                settings.sources,
                settings.rules_file,
            )
            servers[SERVE_MODE] = ServeBaseline(options, sampling=plan.sampling)
        for mode in server_modes:
            assert plan.llama_server is not None  # the command asks for it
            servers[mode] = LlamaServerBaseline(
                plan.llama_server,
                mode,
                path,
                settings.threads,
                settings.context_size,
                sampling=plan.sampling,
            )
        result = _run(plan, engines, model, prompts, pld, servers)
    except (LlamaServerError, ServeError) as exc:
        raise UserError(str(exc)) from None
    finally:
        for server in servers.values():
            server.close()
    # which code computes the output head: the greedy and structspec modes share it
    name = f"{model.name} (output head: {extras.head})" if extras is not None else model.name
    return SideBySide(*result, model_name=name)


def _run(
    plan: RunOptions,
    engines: dict[str, Engine],
    model: Model,
    prompts: Sequence[Prompt],
    pld: PromptLookupBaseline | None,
    servers: dict[str, LlamaServerBaseline | ServeBaseline],
) -> tuple[list[Run], dict[str, list[int]], dict[str, Any]]:
    """Every prompt in every mode, in ``mode_order``; the runs, prompt tokens and summary."""
    from tqdm import tqdm

    modes = list(plan.modes)
    runs: list[Run] = []
    baseline_failures: list[str] = []
    prompt_tokens: dict[str, list[int]] = {}
    # Sampled output has no argmax to be checked against (report.SAMPLING_PROOF instead).
    check_exactness = plan.sampling.greedy and plan.exactness
    exact = {m: Exactness() for m in modes if not is_external_mode(m)}
    bar = tqdm(
        total=len(prompts) * plan.repeat * len(modes),
        desc="benchmark",
        unit="run",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
    )
    for i, prompt in enumerate(prompts):
        tokens = model.tokenize(prompt.prompt)
        prompt_tokens[prompt.id] = tokens
        for rep in range(plan.repeat):
            for mode in mode_order(modes, i + rep):
                if plan.rest_s:
                    time.sleep(plan.rest_s)
                if mode == "pld":
                    assert pld is not None
                    try:
                        runs.append(pld.run(prompt, tokens, rep, plan.max_tokens, model.is_eog))
                    except BaselineError as exc:
                        baseline_failures.append(str(exc))
                        print(f"structspec: warning: {exc}", file=sys.stderr)
                elif mode in servers:
                    runs.append(servers[mode].run(prompt, tokens, rep, plan.max_tokens))
                else:
                    runs.append(
                        run_engine(
                            engines[mode], prompt, tokens, mode, rep, plan.max_tokens, plan.sampling
                        )
                    )
                bar.update(1)
        if check_exactness:
            for mode in exact:
                out = next(r.tokens for r in runs if r.prompt_id == prompt.id and r.mode == mode)
                gaps, rechecked = output_gaps(model, tokens, out)
                exact[mode].add(gaps, rechecked=rechecked)
    bar.close()
    summary = summarize(runs, modes, plan.sampling)
    summary["sampling"] = vars(plan.sampling)
    summary["baseline_failures"] = baseline_failures
    summary["rest_s"] = plan.rest_s
    if check_exactness:
        summary["exactness"] = {m: vars(e) for m, e in exact.items()}
    return runs, prompt_tokens, summary

"""The composition root: a ready engine from settings (model, draft sources, cost table, planner).

This is the one place the surfaces (CLI, LSP, HTTP) get an engine from, so
they never touch llama.cpp themselves. It also owns what spans layers: the
verification cost table (measured here over the model's own ``verify`` pass
and cached per model file, threads and machine), the model's prompt and decode
rates (``model_rates``, cached alike; they choose the adaptive defaults of
``structspec.rates``) and the per-source fallback of
a long-running server (``load_available_engine``: a source that cannot be
built costs that source only).

Model specs: a GGUF path; empty for the embedded default model (assembled from
its PyPI package on first use, path announced once); or ``standin[:SEED]``,
the deterministic numpy toy model used by the tests (not a language model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from structspec.config import Settings
from structspec.drafts.base import DraftSource
from structspec.drafts.domain import domain_policy
from structspec.drafts.registry import build_sources
from structspec.engine.control import (
    AcceptanceEstimator,
    AgreementGate,
    CostModel,
    DraftPlanner,
    MarginGate,
    ProvenanceGate,
    ThreadCosts,
    TokenClassGate,
    measure_cost,
)
from structspec.engine.decode import Engine
from structspec.files import file_stamp, kept_cache_folder, read_json, write_atomic
from structspec.model.base import Model, ModelError
from structspec.model.extras import GGUFModel, gguf_extras, threaded
from structspec.model.head import MIN_ROWS, chosen_isa
from structspec.model.prefix_cache import PrefixCache
from structspec.model.standin import StandInModel
from structspec.model.threads import IdleMeter
from structspec.rates import Rates

if TYPE_CHECKING:
    from structspec.model.llama import LlamaModel

Announce = Callable[[str], None]
T = TypeVar("T")

#: Cores that other processes may keep busy while a cost table is measured for
#: it to be cached: a table measured beside a build prices every extra row of a
#: pass too high (4 rows at 3.6x one row instead of 3.2x, measured while the
#: test suite ran) and would steer every later session.
QUIET_OTHER_CORES = 0.25
#: Largest measurement cache file read (a cost table or rates: a few hundred bytes).
MEASUREMENT_BYTES = 1 << 16


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def priors_for(sources: Sequence[DraftSource]) -> dict[str, float]:
    """The planner's starting acceptance estimates: each source's declared ``priors``.

    Keyed ``source`` or ``source:tier`` (measured acceptance, validated by the
    registry); a key without one starts at the estimator's default.
    """
    priors: dict[str, float] = {}
    for source in sources:
        # Registry sources declare priors; a source built by hand (a test's) may not.
        priors.update(getattr(source, "priors", {}))
    return priors


def open_model(
    spec: str,
    *,
    context_size: int = 4096,
    threads: int = 2,
    announce: Announce = _stderr,
    slots: int = 1,
    prefix_cache: bool = False,
    widen: bool = True,
) -> Model:
    """Open the model named by ``spec`` (see the module docstring).

    ``slots``: independent KV caches of ``context_size`` each (a GGUF model
    only); the language server keeps one per recently edited document.
    ``prefix_cache``: save evaluated prompt prefixes on disk and restore them
    instead of evaluating them again (``model/prefix_cache.py``; off where
    ``STRUCTSPEC_CACHE_DIR`` is set but empty). Off for the benchmarks and the
    HTTP server, whose timings and outputs must not depend on earlier runs.
    ``widen``: load a GGUF's Q5_0 matrices as Q8_0, the same weights evaluated
    faster (``model/widen.py``; setting ``widen_weights``); off where only the
    tokenizer is wanted.
    """
    model: StandInModel | LlamaModel
    if spec == "standin" or spec.startswith("standin:"):
        seed = spec.partition(":")[2] or "0"
        if not (seed.isascii() and seed.isdigit() and len(seed) <= 18):  # "²" is a digit too
            raise ModelError(f"standin model seed must be an integer, not {seed[:40]!r}")
        model = StandInModel(seed=int(seed), n_ctx=context_size, eos_bias=-3.0)
    else:
        from structspec.model.llama import LlamaModel
        from structspec.model.paths import default_model_path

        path = spec or str(default_model_path(announce))
        model = LlamaModel.load(
            path, n_ctx=context_size, threads=threads, slots=slots, widen=widen, announce=announce
        )
    if prefix_cache:
        model.prefix_cache = PrefixCache.in_cache_home(
            model.identity(), window=model.sliding_window
        )
    return model


def cost_model_for(
    model: Model,
    announce: Announce | None = _stderr,
    *,
    refresh: bool = False,
    threads: int | None = None,
) -> CostModel:
    """The verification cost table of ``model`` on this machine, on ``threads`` threads.

    A GGUF model's table is measured once per model file, thread count, machine
    and llama.cpp version, then read from the user's cache directory
    (``refresh`` measures again). A table measured while other processes kept
    the cores busy (more than ``QUIET_OTHER_CORES``) serves this session only.
    ``threads`` (default: all the model's) pins the decodes of the measurement
    to that many. The stand-in is a CPU-free toy: it gets a CPU-like table so
    that draft control is exercised.
    """
    extras = gguf_extras(model)
    if extras is None:
        return CostModel(tuple(1.0 + 0.35 * (n - 1) for n in range(1, 17)))
    threads = extras.threads if threads is None else threads
    path = _cost_cache_path(extras, threads)
    if not refresh and path.is_file():
        try:
            data = read_json(path, MEASUREMENT_BYTES)
            return CostModel(tuple(float(v) for v in data["ms"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged cache is measured again
    if announce is not None:
        on = "" if threads == extras.threads else f" on {threads} thread(s)"
        announce(f"structspec: measuring verification cost on this machine{on} (once per model)")
    pinning = threaded(model)
    with pinning.threads_pinned(threads) if pinning is not None else contextlib.nullcontext():
        cost, others = measure_alone(lambda: measure_verify_cost(model))
    if others is not None and others > QUIET_OTHER_CORES:
        if announce is not None:
            announce(
                f"structspec: other processes kept {others:.1f} core(s) busy while the cost "
                "table was measured; it serves this session and is measured again next time"
            )
        return cost
    _keep_measurement(path, {"model": str(extras.path), "threads": threads, "ms": list(cost.ms)})
    return cost


def thread_costs_for(
    model: Model, cost: CostModel, announce: Announce | None = _stderr, *, refresh: bool = False
) -> ThreadCosts | None:
    """Cost tables that follow the model's thread count (``ThreadCosts``), if it can vary.

    ``cost`` is the all-threads table; the one-thread table is measured (once,
    cached) here.
    """
    model_threads = threaded(model)
    if model_threads is None or model_threads.threads < 2:
        return None
    one = cost_model_for(model, announce, refresh=refresh, threads=1)
    return ThreadCosts(model_threads.threads, cost, one, lambda: model_threads.decode_threads)


def measure_alone(
    measure: Callable[[], T],
    meter: IdleMeter | None = None,
    *,
    wall_clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.process_time,
) -> tuple[T, float | None]:
    """``measure()``, and how many cores other processes kept busy meanwhile (``None``: unknown).

    The machine's busy cores (``/proc/stat``, through ``meter``) less this
    process' own CPU time (``cpu_clock``, all its threads) over the wall time.
    """
    cores = os.cpu_count() or 1
    meter = meter or IdleMeter(cores=cores)
    wall, cpu = wall_clock(), cpu_clock()
    cost = measure()
    idle = meter.idle_cores()
    wall, cpu = wall_clock() - wall, cpu_clock() - cpu
    if idle is None or wall <= 0:
        return cost, None
    return cost, max(0.0, meter.cores - idle - cpu / wall)


def measure_verify_cost(model: Model, *, logits: bool = True) -> CostModel:
    """Time verification passes of 1..16 rows on ``model`` after a 400-token context
    (less in a context too small to hold it and the rows: ``contextSize`` 256).

    ``logits=False`` times the same rows decoded without the output head (as a
    prompt chunk is): the difference is what the head costs per pass.
    """
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    probe = model.tokenize(text * 2, add_bos=False)[:16]
    context = model.tokenize(text * 12)[: max(1, min(400, model.n_ctx - len(probe) - 1))]
    model.prefill(context)
    base = len(model.cached_tokens)

    def run_rows(n: int) -> None:
        if logits:
            model.verify(probe[:n])
        else:
            model.prefill([*context[:base], *probe[:n]])
        model.truncate(base)

    return measure_cost(run_rows)


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return cpu


def _keep_measurement(path: Path, entry: dict[str, object]) -> None:
    """Write a measurement's cache file, and drop its folder's files of model files gone.

    A measurement is kept per model file (its path in ``entry["model"]``):
    one of a file deleted or moved (a model replaced, a test's temporary
    model) would never be read again. A write that fails costs a measurement
    next time.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for other in path.parent.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                model = read_json(other, MEASUREMENT_BYTES).get("model")
                if isinstance(model, str) and not Path(model).exists():
                    other.unlink()
        write_atomic(path, json.dumps(entry).encode())  # other processes read it
    except OSError:
        pass  # no cache: measured again next time


def _cost_cache_path(model: GGUFModel, threads: int, folder: str = "cost") -> Path:
    """The cache file of a measurement of ``model`` on ``threads`` threads on this machine."""
    import llama_cpp

    key = json.dumps(
        [
            *file_stamp(model.path),
            threads,
            os.cpu_count(),
            cpu_name(),
            llama_cpp.__version__,
            model.head,
            model.weights != model.path,  # widened (model/widen.py): other kernels
            # the kernel's instruction set (STRUCTSPEC_HEAD_ISA can force another)
            # and the passes it leaves to llama.cpp's head
            [chosen_isa(), sorted(MIN_ROWS.items())] if model.head == "structspec" else None,
        ]
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return kept_cache_folder(folder) / f"{digest}.json"


#: Most prompt tokens evaluated in the prompt-rate measurement, in chunks of
#: ``RATE_CHUNK`` (as pre-warm evaluates them).
RATE_PROMPT_TOKENS = 256
RATE_CHUNK = 128
#: Most tokens decoded, one row per pass, in the decode-rate measurement.
RATE_DECODE_TOKENS = 16
#: Seconds after which each of the two measurements stops (after its first
#: chunk or its first two passes): a 7B model on a laptop must not keep the
#: first suggestion waiting.
RATE_BUDGET_S = 1.5


def measure_rates(model: Model, *, clock: Callable[[], float] = time.perf_counter) -> Rates:
    """Prompt tokens/s of prefill chunks and decode tokens/s (one row a pass) of ``model``.

    At most ``RATE_PROMPT_TOKENS`` prompt and ``RATE_DECODE_TOKENS`` decoded
    tokens, each stopped after ``RATE_BUDGET_S``: about 3 s on a 1.5B model on
    2 cores. The KV cache is left empty.
    """
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    # (a context too small for them, ``contextSize`` 256, leaves room for the decoded ones)
    room = model.n_ctx - RATE_DECODE_TOKENS - 1
    tokens = model.tokenize(text * 40)[: max(1, min(RATE_PROMPT_TOKENS, room))]
    # A state read back from the on-disk prefix cache would time the disk, and
    # this text is no prompt worth saving there.
    cache = getattr(model, "prefix_cache", None)
    if cache is not None:
        model.prefix_cache = None  # type: ignore[attr-defined]
    try:
        model.prefill(tokens[:16])  # the first pass pages the weights in: not measured
        model.truncate(0)
        done, t0 = 0, clock()
        while done < len(tokens) and not (done and clock() - t0 > RATE_BUDGET_S):
            done = min(len(tokens), done + RATE_CHUNK)
            model.prefill(tokens[:done])  # evaluates the new chunk only
        prompt_s = clock() - t0
        token, decoded, t0 = tokens[done - 1], 0, clock()
        while decoded < RATE_DECODE_TOKENS and not (decoded >= 2 and clock() - t0 > RATE_BUDGET_S):
            token = int(model.verify([token]).argmax[0])
            decoded += 1
        decode_s = clock() - t0
        model.truncate(0)
    finally:
        if cache is not None:
            model.prefix_cache = cache  # type: ignore[attr-defined]
    return Rates(done / max(prompt_s, 1e-9), decoded / max(decode_s, 1e-9))


#: Loads of a model on a machine that measure its rates: each quiet
#: measurement is kept as the fastest seen (``model_rates``).
RATES_SAMPLES = 3


def model_rates(
    model: Model, announce: Announce | None = _stderr, *, refresh: bool = False
) -> Rates | None:
    """The prompt and decode rates of ``model`` on this machine (``rates.Rates``).

    Measured (``measure_rates``, a few seconds) at each of the first
    ``RATES_SAMPLES`` loads of a model file on a machine, thread count and
    llama.cpp version, then read from the user's cache directory like the cost
    table (``refresh`` measures once more). Each rate kept is the fastest
    measured: other work on the machine only slows a measurement (a virtual
    machine's slow moment passes the quiet check below: one measured 280
    prompt tokens/s where the model evaluates 450 on the same machine, and
    that alone would have chosen its window for good). A damaged cache file is
    measured again, and rates measured while other processes kept the cores
    busy serve this session only. ``None`` for the stand-in: a CPU-free toy
    has no rates to adapt to (its tests script them).
    """
    extras = gguf_extras(model)
    if extras is None:
        return None
    path = _cost_cache_path(extras, extras.threads, "rates")
    cached, samples = _cached_rates(path)
    if cached is not None and samples >= RATES_SAMPLES and not refresh:
        return cached
    if announce is not None:
        announce(
            "structspec: measuring prompt and decode rates on this machine "
            f"({samples + 1} of {RATES_SAMPLES}, at this model's first loads: the fastest is kept)"
        )
    pinning = threaded(model)  # all the model's threads, whatever the governor says now
    pinned = pinning.threads_pinned(extras.threads) if pinning is not None else None
    with pinned or contextlib.nullcontext():
        rates, others = measure_alone(lambda: measure_rates(model))
    if cached is not None:
        rates = Rates(
            max(rates.prompt_tps, cached.prompt_tps), max(rates.decode_tps, cached.decode_tps)
        )
    if others is not None and others > QUIET_OTHER_CORES:
        return rates
    entry = {"model": str(extras.path), **dataclasses.asdict(rates), "samples": samples + 1}
    _keep_measurement(path, entry)
    return rates


def _cached_rates(path: Path) -> tuple[Rates | None, int]:
    """The rates a cache file holds and how many measurements they are the best of.

    ``(None, 0)`` for a missing or damaged file; a file written before the
    count was kept holds one.
    """
    try:
        data = read_json(path, MEASUREMENT_BYTES)
        samples = data.get("samples", 1)
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
            raise ValueError(f"samples: {samples!r}")
        return Rates(float(data["prompt_tps"]), float(data["decode_tps"])), samples
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, 0  # missing, or damaged: measured again


def make_planner(cost: CostModel, sources: Sequence[DraftSource] = ()) -> DraftPlanner:
    return DraftPlanner(
        cost,
        AcceptanceEstimator(priors_for(sources)),
        MarginGate(),
        classes=TokenClassGate(),
        agreement=AgreementGate(),
        provenance=ProvenanceGate(),
    )


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
            widen=settings.widen_weights,
        )
    cost = cost_model_for(model, announce)
    return assemble_engine(
        model, settings, cost, sources=sources, costs=thread_costs_for(model, cost, announce)
    )


def assemble_engine(
    model: Model,
    settings: Settings,
    cost: CostModel,
    *,
    sources: Sequence[str] | None = None,
    built: Sequence[DraftSource] | None = None,
    costs: ThreadCosts | None = None,
) -> Engine:
    """The engine of ``settings`` over an open ``model`` with the cost table ``cost``.

    ``built`` uses sources built already; otherwise ``sources`` (default: the
    settings') are built here, and a source that cannot be raises. ``costs``:
    tables by thread count (``thread_costs_for``) replace ``cost`` while the
    model decodes on fewer threads.
    """
    if built is None:
        names = settings.source_names() if sources is None else tuple(sources)
        built = build_sources(names, model, rules_file=settings.rules_file)
    return Engine(model, built, make_planner(cost, built), policy=domain_policy, costs=costs)


def build_available_sources(
    settings: Settings, model: Model
) -> tuple[list[DraftSource], list[str]]:
    """Every enabled source that can be built, and one warning per one that cannot.

    For a long-running server: a bad source setting must cost that source only,
    never every completion. A ``rules_file`` that cannot be used (missing,
    corrupt, another tokenizer) falls back to the packaged rules, and the
    warning says so.
    """
    built: list[DraftSource] = []
    warnings: list[str] = []
    for name in settings.source_names():
        try:
            built += build_sources([name], model, rules_file=settings.rules_file)
            continue
        except Exception as exc:  # a source's failure, whatever it is, must not stop the rest
            problem = str(exc) or type(exc).__name__
        if name == "rules" and settings.rules_file:
            try:
                built += build_sources([name], model)
            except Exception as exc:
                problem += f"; the packaged rules failed too ({exc})"
            else:
                warnings.append(
                    f"structspec: rulesFile {settings.rules_file!r} cannot be used ({problem}); "
                    "drafting with the packaged rules instead. Fix: set `rulesFile` to a file "
                    "written by `structspec mine`, or leave it empty."
                )
                continue
        warnings.append(f"structspec: draft source {name!r} is unavailable ({problem})")
    return built, warnings


def load_available_engine(
    settings: Settings, *, model: Model, announce: Announce = _stderr
) -> tuple[Engine, list[str]]:
    """The engine of ``settings`` with every source that can be built (built once), and warnings."""
    built, warnings = build_available_sources(settings, model)
    cost = cost_model_for(model, announce)
    costs = thread_costs_for(model, cost, announce)
    return assemble_engine(model, settings, cost, built=built, costs=costs), warnings

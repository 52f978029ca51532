"""structspec's prompt evaluation rate against llama-cpp-python's own, alone and after a neighbour.

``python -m structspec.bench.prompt_rate [--model PATH] [--threads 2] [--repeat 3]``
evaluates the same prompts of real code (``PROMPT_TOKENS`` tokens from the
start of standard-library modules) three ways, interleaved per prompt:

- ``Llama.eval``: llama-cpp-python's own evaluation (``n_batch`` 512), the
  reference rate;
- ``prefill``: structspec's model (``LlamaModel.prefill``, ``n_batch`` chunks,
  the eval callback of its output head installed), as the engine and
  ``structspec serve`` evaluate a prompt;
- ``pre-warm chunks``: the language server's road (``prefill_in_chunks`` in
  ``PREFILL_CHUNK``-token chunks, each one a point where a keystroke can
  abandon the work);
- ``prefill, unwidened``: where the file has Q5_0 matrices, which structspec
  loads widened to Q8_0 as the language server does (``model/widen.py``; the
  two roads above), ``prefill`` of the file as it is: what the widening gives.

Each from an empty cache, in two conditions: *alone* (``REST_S`` of rest
first) and *after a neighbour* (two busy processes for ``NEIGHBOUR_S``, ended
just before the evaluation starts, as another llama.cpp process's threads
leave the cores). It prints tokens/s (median over prompts and rounds, with
the spread) and each road's ratio to ``Llama.eval``.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from structspec.bench.prefill import measurement_parser
from structspec.completion.prewarm import PREFILL_CHUNK, prefill_in_chunks
from structspec.model.amx import plain_buffers_for_llama
from structspec.model.llama import LlamaModel
from structspec.model.paths import default_model_path

#: Tokens of each prompt (about a completion's window at a new place).
PROMPT_TOKENS = 520
#: Standard-library modules whose first tokens are the prompts.
MODULES = ("argparse", "json.decoder", "http.client", "logging", "pathlib", "csv", "ast", "typing")
#: Seconds of rest before an evaluation "alone".
REST_S = 1.0
#: Seconds the neighbour keeps both cores busy.
NEIGHBOUR_S = 0.5


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def neighbour(seconds: float = NEIGHBOUR_S, cores: int = 2) -> None:
    """Keep ``cores`` cores busy for ``seconds`` in other processes, then return."""
    procs = [multiprocessing.Process(target=_spin, args=(seconds,)) for _ in range(cores)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


def prompts(model: LlamaModel) -> list[list[int]]:
    """Real-code prompts of ``PROMPT_TOKENS`` tokens."""
    out = []
    for name in MODULES:
        path = getattr(importlib.import_module(name), "__file__", None)
        if path:
            tokens = model.tokenize(Path(path).read_text(encoding="utf-8"))[:PROMPT_TOKENS]
            if len(tokens) == PROMPT_TOKENS:
                out.append(tokens)
    return out


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("prompt_rate").parse_args(argv)

    import llama_cpp

    path = str(args.model or default_model_path())
    ours = LlamaModel.load(path, n_ctx=2048, threads=args.threads, widen=True, announce=print)
    unwidened = None
    if ours.weights != ours.path:
        unwidened = LlamaModel.load(path, n_ctx=2048, threads=args.threads)
    with plain_buffers_for_llama():
        theirs = llama_cpp.Llama(
            model_path=path,
            n_ctx=2048,
            n_batch=512,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            verbose=False,
        )

    def llama_eval(tokens: list[int]) -> None:
        theirs.reset()
        theirs.eval(tokens)

    def prefill_on(model: LlamaModel) -> Callable[[list[int]], None]:
        def prefill(tokens: list[int]) -> None:
            model.truncate(0)
            model.prefill(tokens)

        return prefill

    def prewarm_chunks(tokens: list[int]) -> None:
        ours.truncate(0)
        prefill_in_chunks(ours, tokens, lambda: False)

    roads: dict[str, Callable[[list[int]], None]] = {
        "Llama.eval": llama_eval,
        "prefill": prefill_on(ours),
        "pre-warm chunks": prewarm_chunks,
    }
    if unwidened is not None:
        roads["prefill, unwidened"] = prefill_on(unwidened)
    conditions: dict[str, Callable[[], None]] = {
        "alone": lambda: time.sleep(REST_S),
        "after a neighbour": lambda: neighbour(NEIGHBOUR_S, args.threads),
    }
    rates: dict[tuple[str, str], list[float]] = {(c, r): [] for c in conditions for r in roads}
    cases = prompts(ours)
    load = os.getloadavg()[0]
    for round_ in range(args.repeat):
        for i, tokens in enumerate(cases):
            order = list(roads)
            shift = (round_ + i) % len(order)  # rotate which road goes first
            for road in order[shift:] + order[:shift]:
                for condition, before in conditions.items():
                    before()
                    t0 = time.perf_counter()
                    roads[road](tokens)
                    rates[condition, road].append(len(tokens) / (time.perf_counter() - t0))
    print(
        f"{ours.name}, {args.threads} threads, {len(cases)} prompts of {PROMPT_TOKENS} tokens "
        f"x {args.repeat} rounds, load average {load:.2f} at the start; prompt tokens/s, "
        f"median (min-max), ratio of medians to Llama.eval"
    )
    print("| condition | " + " | ".join(roads) + " |")
    print("| --- |" + " ---: |" * len(roads))
    for condition in conditions:
        reference = statistics.median(rates[condition, "Llama.eval"])
        cells = []
        for road in roads:
            values = rates[condition, road]
            median = statistics.median(values)
            ratio = "" if road == "Llama.eval" else f", {median / reference:.2f}x"
            cells.append(f"{median:.0f} ({min(values):.0f}-{max(values):.0f}){ratio}")
        print(f"| {condition} | " + " | ".join(cells) + " |")
    print(f"(pre-warm chunks: {PREFILL_CHUNK} tokens)")
    if unwidened is not None:
        print(f"(prefill and pre-warm chunks: Q5_0 widened to Q8_0, {ours.weights.name})")
        unwidened.close()
    ours.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long a prompt window takes to evaluate: the cost behind ``windowTokens``.

``python -m structspec.bench.prefill [--model PATH] [--threads 2] [--repeat 3]``
evaluates windows of real code (this Python's own ``argparse.py``) of growing
length from an empty cache, in the chunks pre-warming uses
(``completion.prewarm.PREFILL_CHUNK``), and prints the median time of each
length over ``--repeat`` rounds (interleaved). A window the pre-warm finishes
while the user reads (``PREWARM_IDLE_S`` after the cursor comes to rest, then
the evaluation) costs the first keystroke only its last tokens; a longer one
costs the rest of its evaluation. The output is the "Prefill cost and the
window cap" table of ``docs/MEASUREMENTS.md``.

Then how long a keystroke that comes ``KEYSTROKE_AFTER_S`` into a pre-warm
chunk waits for the worker: until the chunk ends, or, with the background
job's ``Interrupt`` set at the keystroke, until llama.cpp stops the decode
(``docs/MEASUREMENTS.md``, "Interrupting background work"); and the same for
keystrokes spread through a verification pass of ``PASS_ROWS`` rows, as
pre-generation runs them (with structspec's output head, the pass ends in
its kernel, which reads the flag too).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from structspec.completion.prewarm import PREFILL_CHUNK, PREWARM_IDLE_S, prefill_in_chunks
from structspec.model.base import Interrupt, Interrupted, Model
from structspec.model.extras import gguf_extras, interrupted_by
from structspec.runtime import open_model

#: Window lengths measured (tokens).
LENGTHS = (512, 1024, 1536, 2048, 3072, 3968)
#: Seconds of rest at a new place after which the first keystroke is measured
#: (the editor and infill benchmarks' pause).
IDLE_S = 3.0
#: Seconds into a pre-warm chunk at which the measured keystroke comes.
KEYSTROKE_AFTER_S = 0.05
#: Rows of the measured verification pass (a drafted pass of pre-generation).
PASS_ROWS = 8
#: When the measured keystrokes come, as shares of the pass (evenly through it).
PASS_KEYSTROKES = (0.1, 0.3, 0.5, 0.7, 0.9)


def code_tokens(model: Model, n: int) -> list[int]:
    """The first ``n`` tokens of real code (the standard library's ``argparse.py``)."""
    text = Path(argparse.__file__).read_text(encoding="utf-8")
    return model.tokenize(text)[:n]


def measurement_parser(module: str, description: str | None = None) -> argparse.ArgumentParser:
    """The command line of a measurement on one model: ``--model``, ``--threads``, ``--repeat``.

    ``module``: its name under ``structspec.bench`` (the program name shown).
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m structspec.bench.{module}", description=description
    )
    parser.add_argument("--model", default="", help="GGUF path (default: the default model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    return parser


def ms_since(t0: float) -> float:
    """Milliseconds since ``t0``, a ``time.perf_counter()`` reading."""
    return (time.perf_counter() - t0) * 1000.0


def time_prefill(model: Model, tokens: list[int]) -> float:
    """Milliseconds to evaluate ``tokens`` from an empty cache, chunk by chunk."""
    model.prefill(tokens[-1:])  # a cache that shares nothing with ``tokens``
    t0 = time.perf_counter()
    prefill_in_chunks(model, tokens, lambda: False)
    return ms_since(t0)


def keystroke_wait(
    model: Model, work: Callable[[], object], after_s: float, interrupt: bool
) -> float:
    """Milliseconds a keystroke ``after_s`` into ``work`` (on a worker thread) waits for it."""
    stop, done = Interrupt(), threading.Event()

    def run() -> None:
        with interrupted_by(model, stop), contextlib.suppress(Interrupted):
            work()
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(after_s)
    t0 = time.perf_counter()
    if interrupt:
        stop.set()
    done.wait()
    waited = ms_since(t0)
    worker.join()
    return waited


def waits(
    model: Model, work: Callable[[], object], reset: Callable[[], object], after_s: float, n: int
) -> dict[bool, float]:
    """Median ``keystroke_wait`` without and with the interrupt, ``n`` of each, interleaved."""
    seen: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(n):
        for interrupt in (False, True):
            reset()
            seen[interrupt].append(keystroke_wait(model, work, after_s, interrupt))
    return {k: statistics.median(v) for k, v in seen.items()}


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("prefill", __doc__).parse_args(argv)
    model = open_model(args.model, threads=args.threads, context_size=4096)
    tokens = code_tokens(model, max(LENGTHS) + 1)
    lengths = [n for n in LENGTHS if n <= len(tokens)]
    times: dict[int, list[float]] = {n: [] for n in lengths}
    for _ in range(max(1, args.repeat)):
        for n in lengths:
            times[n].append(time_prefill(model, tokens[:n]))
    budget_ms = (IDLE_S - PREWARM_IDLE_S) * 1000.0
    print(
        f"prefill from an empty cache in chunks of {PREFILL_CHUNK}, {args.threads} thread(s), "
        f"median of {args.repeat}; pre-warm time after {IDLE_S:.0f} s at rest: "
        f"{budget_ms:.0f} ms"
    )
    print("| window tokens | ms | tokens/s | left for the first keystroke after the rest, ms |")
    print("| --- | --- | --- | --- |")
    for n in lengths:
        ms = statistics.median(times[n])
        left = max(0.0, ms - budget_ms)
        print(f"| {n} | {ms:.1f} | {n / max(ms, 1e-3) * 1000.0:.0f} | {left:.0f} |")
    n = max(3, args.repeat)
    chunk = tokens[:PREFILL_CHUNK]  # one chunk of code, as pre-warm evaluates it
    chunk_waits = waits(
        model,
        lambda: model.prefill(chunk),
        lambda: model.prefill(chunk[-1:]),  # nothing of the chunk cached
        KEYSTROKE_AFTER_S,
        n,
    )
    print(
        f"a keystroke {KEYSTROKE_AFTER_S * 1000:.0f} ms into a pre-warm chunk of {len(chunk)} "
        f"tokens waits for the worker (median of {n}): "
        f"{chunk_waits[False]:.1f} ms to the chunk's end, "
        f"{chunk_waits[True]:.1f} ms with the chunk interrupted"
    )
    prompt, rows = tokens[:512], tokens[512 : 512 + PASS_ROWS]
    model.prefill(prompt)
    passes = []
    for _ in range(11):
        t0 = time.perf_counter()
        model.verify(rows)
        passes.append(time.perf_counter() - t0)
        model.truncate(len(prompt))
    pass_s = statistics.median(passes[1:])  # the first warms up
    waited: dict[bool, list[float]] = {False: [], True: []}
    for at in PASS_KEYSTROKES:
        for interrupt, ms in waits(
            model, lambda: model.verify(rows), lambda: model.truncate(len(prompt)), at * pass_s, n
        ).items():
            waited[interrupt].append(ms)
    extras = gguf_extras(model)
    print(
        f"a keystroke during a verification pass of {PASS_ROWS} rows ({pass_s * 1000:.1f} ms; "
        f"{extras.head if extras else 'llama.cpp'}'s output head) waits for the worker "
        f"(mean over keystrokes at {', '.join(f'{a:.0%}' for a in PASS_KEYSTROKES)} of it, "
        f"median of {n} each): {statistics.fmean(waited[False]):.1f} ms to the pass's end, "
        f"{statistics.fmean(waited[True]):.1f} ms with the pass interrupted"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

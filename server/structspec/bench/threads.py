"""Verification passes under CPU contention: fixed thread counts against the governor.

``python -m structspec.bench.threads [--model PATH] [--threads 2] [--busy 2] [--prefill]``
times a pass of ``--rows`` rows (median and p95 over interleaved rounds; with
``--prefill``, the prompt evaluation of ``--rows`` more tokens, logits on the
last only, as a prefill chunk is) on
a quiet machine and then with ``--busy`` busy-loop processes running (spawned
here and always killed), for every fixed thread count up to ``--threads`` and
for ``model.threads.ThreadGovernor`` starting at ``--threads``. The output is
the "Threads under contention" table of ``docs/MEASUREMENTS.md``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from structspec.bench.harness import percentile
from structspec.model.threads import IdleMeter, ThreadGovernor
from structspec.runtime import open_model

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1)\n" * 12


class FixedThreads:
    """A governor that never changes the thread count (the baseline)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def next_threads(self) -> int:
        return self.threads

    def observe(self, threads: int, wall_s: float, cpu_s: float) -> None:
        pass


def measure(
    model: Any,
    configs: dict[str, Callable[[], object]],
    rows: int,
    rounds: int,
    *,
    prefill: bool = False,
) -> dict[str, list[float]]:
    """Pass times (ms) per configuration, ``rounds`` rounds of 8 passes each, interleaved.

    ``model`` is a ``LlamaModel`` (its ``governor`` is swapped per configuration).
    ``prefill``: time the evaluation of ``rows`` more prompt tokens instead.
    """
    tokens = model.tokenize(PROMPT * (1 + rows // 64))
    model.prefill(tokens[:300])
    base = len(model.cached_tokens)
    times: dict[str, list[float]] = {name: [] for name in configs}
    governors = {name: make() for name, make in configs.items()}
    for _ in range(rounds):
        for name in configs:
            model.governor = governors[name]
            for _ in range(8):
                t0 = time.perf_counter()
                if prefill:
                    model.prefill(tokens[: 300 + rows])
                else:
                    model.verify(tokens[300 : 300 + rows])
                times[name].append((time.perf_counter() - t0) * 1000.0)
                model.truncate(base)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m structspec.bench.threads")
    p.add_argument("--model", default="", help="GGUF path (default: the embedded default model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--busy", type=int, default=2, help="busy-loop processes for the loaded run")
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--prefill", action="store_true", help="time prompt evaluation of --rows tokens instead"
    )
    args = p.parse_args(argv)
    model = open_model(args.model, context_size=2048, threads=args.threads)
    configs: dict[str, Callable[[], object]] = {
        f"{n} thread(s), fixed": functools.partial(FixedThreads, n)
        for n in range(1, args.threads + 1)
    }
    configs[f"governor from {args.threads}"] = lambda: ThreadGovernor(
        args.threads, IdleMeter(cores=os.cpu_count() or 1).idle_cores
    )
    what = f"prefill chunks of {args.rows} tokens" if args.prefill else f"{args.rows}-row passes"
    print(f"model {model.name}, {os.cpu_count()} CPUs; {what}, ms")
    print("| machine | threads | p50 | p95 |")
    print("| --- | --- | --- | --- |")
    for label, busy in (("quiet", 0), (f"{args.busy} busy loops", args.busy)):
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(0.5 if busy else 0.0)
            times = measure(model, configs, args.rows, args.rounds, prefill=args.prefill)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
        for name, values in times.items():
            p50, p95 = statistics.median(values), percentile(values, 95)
            print(f"| {label} | {name} | {p50:.1f} | {p95:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Verification passes with the model's llama.cpp calls on one thread or on two.

``python -m structspec.bench.one_thread [--model PATH] [--threads 2] [--passes 30]``
runs, each in a fresh process (libgomp's thread teams live as long as their
thread), the same verification passes of 16 rows after a 300-token context,
pinned to ``--threads``, in three arrangements:

- ``one thread``: the model loaded, warmed and decoded on the main thread (the
  in-process benchmark);
- ``load here, decode on a worker``: loaded and warmed on the main thread,
  decoded on a worker thread (``structspec serve`` before its model moved to
  the worker thread);
- ``all on a worker``: loaded, warmed and decoded on the worker thread (the
  language server and ``structspec serve`` now).

It prints each arrangement's time per pass, the process' CPU over wall time
and the voluntary context switches of all its threads per pass (a thread
that waits at a barrier in the kernel instead of spinning switches out once).
The output is the table of "One thread for llama.cpp's calls" in
``docs/MEASUREMENTS.md``; see ``model/threads.py`` for why.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ARRANGEMENTS = {
    "one": "one thread",
    "split": "load here, decode on a worker",
    "worker": "all on a worker",
}
TEXT = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"


def voluntary_switches() -> int:
    """Voluntary context switches of every thread of this process so far (0: unknown)."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return total


class Worker:
    """One thread kept alive for the whole measurement (its OpenMP team with it), as a
    server's worker thread is."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def __call__(self, fn: Callable[[], T]) -> T:
        return self._pool.submit(fn).result()


def measure(arrangement: str, model_path: str, threads: int, passes: int) -> str:
    from structspec.model.llama import LlamaModel
    from structspec.runtime import open_model

    def load() -> tuple[LlamaModel, list[int]]:
        model = open_model(model_path, threads=threads, announce=lambda _m: None)
        assert isinstance(model, LlamaModel)  # llama.cpp's threads are what is measured
        tokens = model.tokenize(TEXT * 12)[:400]
        with model.threads_pinned(threads):  # a warm-up, as a load's self-check is
            model.truncate(0)
            model.prefill(tokens)
            model.verify(tokens[100:116])
        return model, tokens

    def run(loaded: tuple[LlamaModel, list[int]]) -> tuple[float, float, int]:
        model, tokens = loaded
        with model.threads_pinned(threads):
            model.truncate(0)
            model.prefill(tokens[:300])
            switches, wall, cpu = voluntary_switches(), time.perf_counter(), time.process_time()
            for _ in range(passes):
                model.verify(tokens[300:316])
                model.truncate(300)
            wall = time.perf_counter() - wall
            return wall, (time.process_time() - cpu) / wall, voluntary_switches() - switches

    worker = Worker()
    loaded = worker(load) if arrangement == "worker" else load()
    if arrangement == "one":
        wall, share, switches = run(loaded)
    else:
        wall, share, switches = worker(lambda: run(loaded))
    return (
        f"| {ARRANGEMENTS[arrangement]} | {wall / passes * 1000:.1f} | {share:.2f} "
        f"| {switches / passes:.1f} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m structspec.bench.one_thread", description=__doc__)
    p.add_argument("--model", default="", help="GGUF file (default: the embedded Gemma 3 270M)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--passes", type=int, default=30)
    p.add_argument("--arrangement", choices=sorted(ARRANGEMENTS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads < 2 or args.passes < 1:
        p.error("--threads must be at least 2 and --passes at least 1")
    if args.arrangement:
        print(measure(args.arrangement, args.model, args.threads, args.passes), flush=True)
        return 0
    print(
        f"{args.threads} threads, {args.passes} passes of 16 rows, "
        f"load average {os.getloadavg()[0]:.2f} at the start"
    )
    print("| arrangement | ms per pass | CPU / wall | voluntary switches per pass |")
    print("| --- | ---: | ---: | ---: |")
    for arrangement in ARRANGEMENTS:
        cmd = [sys.executable, "-m", "structspec.bench.one_thread", "--arrangement", arrangement]
        cmd += ["--model", args.model, "--threads", str(args.threads)]
        cmd += ["--passes", str(args.passes)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("| ")]
        print(lines[-1] if lines else f"| {ARRANGEMENTS[arrangement]} | failed | | |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

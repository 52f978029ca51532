"""Which head a one-row decode pass should run: structspec's kernel or llama.cpp's.

``python -m structspec.bench.one_row [--shape NAME ...] [--threads 2] [--repeat 9]``
loads each model shape built by ``structspec benchmark --suite shapes`` (or
``--model PATH``), evaluates a 64-token context and decodes 16 tokens one row
per pass, three ways in turn in every round:

- *kernel*: structspec's head at every row count (``LlamaModel.kernel_every_pass``);
- *used*: the head the model uses (``head.MIN_ROWS``: llama.cpp's for one row
  of a Q6_K head);
- *llama.cpp*: llama.cpp's head (``LlamaModel.llama_cpp_head``).

It prints, per model, the median ms per pass over ``--repeat`` rounds and
their range. Whole passes of the whole model, pinned to ``--threads``: what
greedy decoding pays per token, where ``docs/BENCHMARKS-shapes.md``'s head
section isolates the head on a one-layer probe. A shape not built yet is
skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from structspec.bench.prefill import ms_since
from structspec.bench.shape_models import SHAPES, default_cache_dir, shape_path
from structspec.model.llama import LlamaModel

#: Context tokens before the decoded ones, and tokens decoded per round.
CONTEXT, DECODED = 64, 16
#: The shapes measured by default: the Q6_K heads of code models at 1.3B-3B,
#: where the head is the largest share of a pass.
DEFAULT_SHAPES = ("Qwen2.5-Coder-1.5B", "DeepSeek-Coder-1.3B", "Qwen2.5-Coder-3B")


def _passes(model: LlamaModel) -> dict[str, Callable[[], AbstractContextManager[None]]]:
    return {
        "kernel": model.kernel_every_pass,
        "used": nullcontext,
        "llama.cpp": model.llama_cpp_head,
    }


def one_row_ms(model: LlamaModel, repeat: int, threads: int) -> dict[str, list[float]]:
    """ms per one-row pass of each way (``_passes``), one value per round."""
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    context = model.tokenize(text * 4)[:CONTEXT]
    ways = _passes(model)
    times: dict[str, list[float]] = {way: [] for way in ways}

    def run(way: str) -> float:
        model.truncate(0)
        model.prefill(context)
        token = context[-1]
        t0 = time.perf_counter()
        with ways[way]():
            for _ in range(DECODED):
                token = int(model.verify([token]).argmax[0])
        return ms_since(t0) / DECODED

    with model.threads_pinned(threads):
        run("used")  # pages the weights in
        for _ in range(repeat):
            for way in ways:
                times[way].append(run(way))
    model.truncate(0)
    return times


def _models(names: list[str], path: str) -> Iterator[tuple[str, Path | None]]:
    if path:
        yield Path(path).name, Path(path)
        return
    for name in names:
        file = shape_path(SHAPES[name], default_cache_dir())
        yield name, file if file.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m structspec.bench.one_row")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), default=[])
    parser.add_argument("--model", default="", help="a GGUF path instead of the shapes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.threads < 1:
        parser.error("--repeat and --threads must be at least 1")

    print(
        f"one-row decode passes, {args.threads} threads, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f} at the start; ms per pass, median of {args.repeat} rounds "
        f"[min, max], {DECODED} passes each after {CONTEXT} context tokens"
    )
    print("| model | head type | kernel ms | used ms | llama.cpp ms | used / kernel |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, file in _models(args.shape or list(DEFAULT_SHAPES), args.model):
        if file is None:
            print(f"| {name} | not built (`structspec benchmark --suite shapes`) | | | | |")
            continue
        model = LlamaModel.load(file, n_ctx=1024, threads=args.threads)
        try:
            if model.head != "structspec":
                print(
                    f"| {name} | {model.head_type} | llama.cpp's head ({model.head_reason}) |||||"
                )
                continue
            times = one_row_ms(model, args.repeat, args.threads)
            cells = [
                f"{statistics.median(v):.1f} [{min(v):.1f}, {max(v):.1f}]" for v in times.values()
            ]
            ratio = statistics.median(times["used"]) / statistics.median(times["kernel"])
            print(f"| {name} | {model.head_type} | {' | '.join(cells)} | {ratio:.2f} |")
        finally:
            model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What a jump into a cached document costs: continuing in a copy of its KV slot.

``python -m structspec.bench.slot_copy [--model PATH] [--threads 2] [--repeat 3]``
evaluates ``n`` tokens of real code (this Python's own ``argparse.py``, as
``bench/prefix_cache.py``) into a KV slot of a three-slot model, the top of a
document as pre-warm leaves it; then a prompt that shares its first
``CURSOR`` tokens and goes on with 8 others (a cursor in that document). With
``n - CURSOR`` tokens or more past the cursor (``model.llama.FORK_MIN``) that
prompt continues in a copy of the slot, and the slot keeps its tail:

- *copy*: that prompt's ``prefill`` (the copy, the cut of the copy's tail, the
  8 tokens' evaluation);
- *cut*: the same with another 8 tokens, which cuts the copy back instead (its
  tail is shorter than ``FORK_MIN``): the cost without a copy;
- *tail*: what evaluating the ``n - CURSOR`` tokens the copy kept would cost,
  at the rate of the document's first evaluation.

Each round loads the model again (an empty cache); rounds are interleaved by
length. It prints the medians over ``--repeat`` rounds and the load average at
the start.
"""

from __future__ import annotations

import os
import statistics
import time

from structspec.bench.prefill import code_tokens, measurement_parser, ms_since
from structspec.model.llama import FORK_MIN, LlamaModel
from structspec.model.paths import default_model_path

#: Document lengths measured (tokens; the longest fits the default 4,096 context).
LENGTHS = (1024, 2048, 3968)
#: Tokens of the document before the cursor.
CURSOR = 256


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("slot_copy").parse_args(argv)

    path = args.model or default_model_path()
    load = os.getloadavg()[0]
    kinds = ("copy", "cut", "tail")
    times: dict[int, dict[str, list[float]]] = {n: {k: [] for k in kinds} for n in LENGTHS}
    name = ""
    for _ in range(args.repeat):
        for n in LENGTHS:
            assert n - CURSOR >= FORK_MIN
            model = LlamaModel.load(path, n_ctx=4096, threads=args.threads, slots=3)
            name = model.name
            try:
                doc = code_tokens(model, n)
                t0 = time.perf_counter()
                model.prefill(doc)
                first = ms_since(t0)
                t0 = time.perf_counter()
                model.prefill([*doc[:CURSOR], *range(1000, 1008)])
                times[n]["copy"].append(ms_since(t0))
                assert model.reusable_prefix(doc) == n, "the document's slot was cut"
                t0 = time.perf_counter()
                model.prefill([*doc[:CURSOR], *range(2000, 2008)])
                times[n]["cut"].append(ms_since(t0))
                times[n]["tail"].append(first * (n - CURSOR) / n)
            finally:
                model.close()
    print(
        f"{name}, {args.threads} threads, {os.cpu_count()} cores, "
        f"load average {load:.2f} at the start; median of {args.repeat} rounds; "
        f"a cursor {CURSOR} tokens into the document, 8 tokens evaluated there"
    )
    print(
        "| document tokens | copy ms | cut ms | copy - cut ms | tail kept | tail's evaluation ms |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in LENGTHS:
        cp, ct, tl = (statistics.median(times[n][k]) for k in kinds)
        print(f"| {n} | {cp:.1f} | {ct:.1f} | {cp - ct:.1f} | {n - CURSOR} | {tl:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the on-disk prompt-prefix cache spares: restore time against evaluation time.

``python -m structspec.bench.prefix_cache [--model PATH] [--threads 2] [--repeat 3]``
evaluates windows of real code (this Python's own ``argparse.py``) of 512 to
3,968 tokens from an empty cache, as pre-warming does (``prefill_in_chunks``),
saves the state (``PrefixCache.save``), then prefills the same tokens
again from an empty cache with the saved entry on disk (the restart case:
``model/prefix_cache.py`` reads the state back). Rounds are interleaved by
length; it prints the median of each over ``--repeat`` rounds, the entry's
size, and the load average at the start (the cores may be shared).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from structspec.bench.prefill import code_tokens, measurement_parser, ms_since
from structspec.completion.prewarm import prefill_in_chunks
from structspec.model.llama import LlamaModel
from structspec.model.paths import default_model_path
from structspec.model.prefix_cache import PrefixCache

#: Prompt lengths measured (tokens; the longest fits the default 4,096 context).
LENGTHS = (512, 1024, 2048, 3968)


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("prefix_cache").parse_args(argv)

    model = LlamaModel.load(args.model or default_model_path(), n_ctx=4096, threads=args.threads)
    tokens = code_tokens(model, max(LENGTHS))
    load = os.getloadavg()[0]
    times: dict[int, dict[str, list[float]]] = {
        n: {"evaluate": [], "save": [], "restore": []} for n in LENGTHS
    }
    sizes: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeat):
            for n in LENGTHS:
                window = tokens[:n]
                cache = PrefixCache(Path(folder) / str(n), model.identity())
                model.prefix_cache = None
                model.truncate(0)
                t0 = time.perf_counter()
                prefill_in_chunks(model, window, lambda: False)
                times[n]["evaluate"].append(ms_since(t0))
                t0 = time.perf_counter()
                cache.save(window, model.state_bytes() or b"")
                times[n]["save"].append(ms_since(t0))
                sizes[n] = sum(p.stat().st_size for p in cache.folder.glob("*.kv"))
                model.truncate(0)  # a restart: nothing of the window in memory
                model.prefix_cache = PrefixCache(cache.folder, model.identity())
                t0 = time.perf_counter()
                model.prefill(window)
                times[n]["restore"].append(ms_since(t0))
                assert model.prefix_cache.hits == 1, "the entry was not restored"
    print(
        f"{model.name}, {args.threads} threads, {os.cpu_count()} cores, "
        f"load average {load:.2f} at the start; median of {args.repeat} rounds"
    )
    print("| tokens | evaluate ms | save ms | restore ms | entry MB | evaluate / restore |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in LENGTHS:
        ev, sv, rs = (statistics.median(times[n][k]) for k in ("evaluate", "save", "restore"))
        print(f"| {n} | {ev:.0f} | {sv:.1f} | {rs:.1f} | {sizes[n] / 1e6:.1f} | {ev / rs:.0f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

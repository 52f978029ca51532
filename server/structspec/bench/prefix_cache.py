"""What the on-disk prompt-prefix cache spares: restore time against evaluation time.

``python -m structspec.bench.prefix_cache [--model PATH] [--threads 2] [--repeat 3]``
evaluates windows of real code (this Python's own ``argparse.py``) of 512 to
3,968 tokens from an empty cache, as pre-warming does (``prefill_in_chunks``),
saves the state (``PrefixCache.save``), then prefills the same tokens
again from an empty cache with the saved entry on disk (the restart case:
``model/prefix_cache.py`` reads the state back). Rounds are interleaved by
length; it prints the median of each over ``--repeat`` rounds, the entry's
size, and the load average at the start (the cores may be shared).

Then whether a state read back is the one saved (``drift``): for states of
``CHECKED`` lengths, the logits of the next token read back against evaluated,
continued at the state's end, after a pass there was rolled back, and cut back
to ``CUT_BACK`` tokens (a cursor above its end), with the same passes on both
sides so that the batch shapes are the same. A model with sliding-window layers
saves those layers' last ``sliding_window`` positions only; the table shows
what that does past the window, and which states the cache serves
(``PrefixCache.serves``).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from structspec.bench.prefill import code_tokens, measurement_parser, ms_since
from structspec.completion.prewarm import prefill_in_chunks
from structspec.model.llama import LlamaModel
from structspec.model.paths import default_model_path
from structspec.model.prefix_cache import PrefixCache

#: Prompt lengths measured (tokens; the longest fits the default 4,096 context).
LENGTHS = (512, 1024, 2048, 3968)
#: State lengths whose read back is checked against the evaluated state (``drift``).
CHECKED = (256, 512, 520, 1024, 2048)
#: Where the third check cuts a state back to (a cursor above its end).
CUT_BACK = 200


def drift(model: LlamaModel, tokens: Sequence[int], n: int, folder: Path) -> list[float]:
    """Largest logit difference, ``tokens[:n]``'s state read back against evaluated.

    Three next-token rows: continued at its end, after a pass of four there
    was rolled back, and cut back to ``CUT_BACK`` tokens. The entry is written
    whole (a cache without a window), as llama.cpp hands it over.
    """

    def rows() -> list[np.ndarray]:
        with model.threads_pinned(model.threads):
            out = [np.array(model.verify(tokens[n : n + 1]).logits[:])]
            model.truncate(n)
            model.verify(tokens[n : n + 4])
            model.truncate(n)
            out.append(np.array(model.verify(tokens[n : n + 1]).logits[:]))
            model.truncate(CUT_BACK)
            out.append(np.array(model.verify(tokens[CUT_BACK : CUT_BACK + 1]).logits[:]))
        return out

    model.prefix_cache = None
    model.truncate(0)
    with model.threads_pinned(model.threads):
        prefill_in_chunks(model, tokens[:n], lambda: False)
    PrefixCache(folder, model.identity()).save(tokens[:n], model.state_bytes() or b"")
    evaluated = rows()
    model.truncate(0)  # a restart: read back from the entry
    model.prefix_cache = PrefixCache(folder, model.identity())
    with model.threads_pinned(model.threads):
        model.prefill(tokens[:n])
    assert model.prefix_cache.hits == 1, "the entry was not read back"
    return [float(np.abs(a - b).max()) for a, b in zip(rows(), evaluated, strict=True)]


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
    sliding = model.sliding_window
    serves = PrefixCache(Path("unused"), model.identity(), window=sliding).serves
    print()
    print(
        f"a state read back against the evaluated one: largest logit difference of the next "
        f"token (0: the same state); sliding window {sliding or 'none'}"
    )
    print(f"| tokens | served | continued | after a rolled-back pass | cut back to {CUT_BACK} |")
    print("| ---: | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for n in CHECKED:
            d = drift(model, tokens, n, Path(folder) / f"drift{n}")
            print(
                f"| {n} | {'yes' if serves(n) else 'no'} | "
                + " | ".join(f"{x:.3f}" for x in d)
                + " |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

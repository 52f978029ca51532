"""What widening Q5_0 weights to Q8_0 gives (``model/widen.py``): the same model, both files.

``python -m structspec.bench.widen [--model PATH] [--threads 2] [--repeat 3]``
loads the model twice, from its file as it is and from its widened copy, and
on the same real-code prompts (``prompt_rate.prompts``), interleaved per
prompt with the order alternating, measures:

- prompt tokens/s: ``prefill`` of ``PROMPT_TOKENS`` tokens from an empty cache;
- the verification pass: milliseconds of ``verify`` of 1, 2, 3, 4 and 8 rows after
  that prompt (logits on every row, the output head the model uses);
- whether the two give the same logits: the largest difference over the
  prompt's last position and every verified row, and the argmax flips.

It prints medians with the spread, and the widened copy's speed-up (above
1: faster). A file without Q5_0 matrices has nothing to
widen: it says so and measures nothing.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

from structspec.bench.prefill import measurement_parser
from structspec.bench.prompt_rate import PROMPT_TOKENS, prompts
from structspec.model.llama import LlamaModel
from structspec.model.paths import default_model_path

#: Rows of the verification passes measured.
ROWS = (1, 2, 3, 4, 8)


def _prefill_rate(model: LlamaModel, tokens: list[int]) -> float:
    model.truncate(0)
    t0 = time.perf_counter()
    model.prefill(tokens)
    return len(tokens) / (time.perf_counter() - t0)


def _verify_ms(model: LlamaModel, tokens: list[int], rows: int) -> float:
    """A pass of ``rows`` rows after the prompt (``tokens`` without its last ``rows``)."""
    model.truncate(len(tokens) - rows)
    t0 = time.perf_counter()
    model.verify(tokens[-rows:])
    return (time.perf_counter() - t0) * 1000.0


def _logits(model: LlamaModel, tokens: list[int], rows: int) -> np.ndarray:
    model.truncate(0)
    model.prefill(tokens[:-rows])
    return np.array(model.verify(tokens[-rows:]).logits[:])


def _cell(values: list[float], digits: int) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("widen").parse_args(argv)
    path = str(args.model or default_model_path())
    wide = LlamaModel.load(path, n_ctx=2048, threads=args.threads, widen=True, announce=print)
    if wide.weights == wide.path:
        print(f"{wide.name}: no Q5_0 matrices, nothing to widen")
        wide.close()
        return 0
    plain = LlamaModel.load(path, n_ctx=2048, threads=args.threads)
    models = {"as is": plain, "widened": wide}
    cases = prompts(plain)
    rates: dict[str, list[float]] = {name: [] for name in models}
    passes: dict[tuple[str, int], list[float]] = {(n, r): [] for n in models for r in ROWS}
    load = os.getloadavg()[0]
    for round_ in range(args.repeat):
        for i, tokens in enumerate(cases):
            order = list(models) if (round_ + i) % 2 == 0 else list(reversed(models))
            for name in order:
                rates[name].append(_prefill_rate(models[name], tokens))
                for rows in ROWS:
                    passes[name, rows].append(_verify_ms(models[name], tokens, rows))
    worst, flips, positions = 0.0, 0, 0
    for tokens in cases:
        was, now = (_logits(m, tokens, max(ROWS)) for m in (plain, wide))
        worst = max(worst, float(np.abs(was - now).max()))
        flips += int((was.argmax(axis=1) != now.argmax(axis=1)).sum())
        positions += len(was)
    st = (plain.path.stat().st_size, wide.weights.stat().st_size)
    print(
        f"{plain.name} ({st[0] >> 20} MiB) and its widened copy ({st[1] >> 20} MiB), "
        f"{args.threads} threads, {len(cases)} prompts of {PROMPT_TOKENS} tokens x "
        f"{args.repeat} rounds, load average {load:.2f} at the start; structspec's model "
        f"(output head: {plain.head} as is, {wide.head} widened); median (min-max)"
    )

    def line(what: str, a: list[float], b: list[float], digits: int, speedup: float) -> str:
        return f"| {what} | {_cell(a, digits)} | {_cell(b, digits)} | {speedup:.2f}x |"

    print("| measure | as is | widened | widened's speed-up |")
    print("| --- | ---: | ---: | ---: |")
    a, b = rates["as is"], rates["widened"]
    print(line("prompt tokens/s", a, b, 0, statistics.median(b) / statistics.median(a)))
    for rows in ROWS:
        a, b = passes["as is", rows], passes["widened", rows]
        speedup = statistics.median(a) / statistics.median(b)
        print(line(f"verify {rows} row(s), ms", a, b, 2, speedup))
    print(
        f"logits at {positions} positions ({max(ROWS)} verified rows after each prompt): "
        f"largest difference {worst:.3g}, argmax differs at {flips}"
    )
    plain.close()
    wide.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

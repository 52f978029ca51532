"""The facts the README and the planner rely on, measured on this machine.

``python -m structspec.bench.measure [--model PATH] [--threads 2]`` prints:

1. the verification cost ``t(n)`` of one pass of ``n = 1..16`` rows on the
   model (what ``runtime.measure_verify_cost`` measures for the cost table),
   in milliseconds and as a ratio to ``t(1)``, and the same rows decoded
   without logits: the difference is the output head's share of each pass;
2. batch-shape noise: a greedy output decoded one row per pass, then every
   position evaluated again in one batch (``Model.teacher_forced``): how many
   tokens are no longer their row's argmax, and by how many logits at worst.
   On llama.cpp CPU the batch shape changes the logits a little, so a near-tie
   can flip; a test that compares outputs across batch shapes on the real
   model is therefore a defect (compare on the stand-in, or only what noise
   cannot change).

``docs/MEASUREMENTS.md`` is this script's output with the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform

from structspec.engine.decode import Engine, GenerationOptions
from structspec.runtime import measure_verify_cost, open_model

PROMPTS = (
    'def fibonacci(n: int) -> list[int]:\n    """The first n Fibonacci numbers."""\n',
    "import json\n\n\ndef load_config(path):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m structspec.bench.measure")
    p.add_argument("--model", default="", help="GGUF path (default: the embedded default model)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64, help="greedy tokens per noise prompt")
    p.add_argument("--no-cost", action="store_true", help="only the batch-shape noise")
    p.add_argument("--no-noise", action="store_true", help="only the cost table")
    args = p.parse_args(argv)
    model = open_model(args.model, context_size=2048, threads=args.threads)
    machine = f"{os.cpu_count()} CPUs, {platform.machine()}"
    print(f"model {model.name}, {args.threads} threads, {machine}")
    if not args.no_cost:
        cost = measure_verify_cost(model)
        body = measure_verify_cost(model, logits=False)
        print("\nverification cost per pass (median of 5, sizes interleaved);")
        print("without logits: the same rows decoded without the output head")
        print("| rows | ms | x t(1) | without logits, ms | output head, ms per row |")
        print("| --- | --- | --- | --- | --- |")
        for n, (ms, bare) in enumerate(zip(cost.ms, body.ms, strict=True), 1):
            head = (ms - bare) / n
            print(f"| {n} | {ms:.1f} | {ms / cost.ms[0]:.2f} | {bare:.1f} | {head:.1f} |")
    if args.no_noise:
        return 0
    print("\nbatch-shape noise: greedy one row per pass vs the same positions in one batch")
    print("| prompt | tokens | no longer argmax | worst gap (logits) |")
    print("| --- | --- | --- | --- |")
    engine = Engine(model)
    for i, text in enumerate(PROMPTS):
        model.truncate(0)
        prompt = model.tokenize(text)
        out = engine.generate(prompt, GenerationOptions(max_tokens=args.tokens, speculative=False))
        model.truncate(0)
        checks = model.teacher_forced(prompt, out.tokens)
        flips = sum(c.token != c.argmax for c in checks)
        worst = max((c.gap for c in checks), default=0.0)
        print(f"| {i + 1} | {len(checks)} | {flips} | {worst:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The facts the README and the planner rely on, measured on this machine.

``python -m structspec.bench.measure [--model PATH] [--threads 2]`` prints:

1. the verification cost ``t(n)`` of one pass of ``n = 1..16`` rows on the
   model (what ``runtime.measure_verify_cost`` measures for the cost table),
   in milliseconds and as a ratio to ``t(1)``, and the same rows decoded
   without logits: the difference is the output head's share of each pass;
   where structspec computes the head (``model/head.py``), the same passes
   with llama.cpp's head beside;
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
from structspec.model.base import Model
from structspec.model.extras import gguf_extras
from structspec.model.llama import LlamaModel
from structspec.runtime import measure_verify_cost, open_model

PROMPTS = (
    'def fibonacci(n: int) -> list[int]:\n    """The first n Fibonacci numbers."""\n',
    "import json\n\n\ndef load_config(path):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
)


def print_cost_table(model: Model) -> None:
    """``t(n)`` with the model's head, without logits, and with llama.cpp's head beside."""
    cost = measure_verify_cost(model)
    body = measure_verify_cost(model, logits=False)
    extras = gguf_extras(model)
    head = extras.head if extras is not None else "llama.cpp"
    baseline = None
    if isinstance(model, LlamaModel) and head != "llama.cpp":
        with model.llama_cpp_head():
            baseline = measure_verify_cost(model)
    print(f"\nverification cost per pass (median of 5, sizes interleaved), {head}'s head;")
    print("without logits: the same rows decoded without the output head")
    columns = ["rows", "ms", "x t(1)", "without logits, ms", "output head, ms per row"]
    if baseline is not None:
        columns += ["llama.cpp's head: ms", "x t(1)", "output head, ms per row"]
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for n, (ms, bare) in enumerate(zip(cost.ms, body.ms, strict=True), 1):
        cells = [
            f"{n}",
            f"{ms:.1f}",
            f"{ms / cost.ms[0]:.2f}",
            f"{bare:.1f}",
            f"{(ms - bare) / n:.1f}",
        ]
        if baseline is not None:
            theirs = baseline.ms[n - 1]
            cells += [
                f"{theirs:.1f}",
                f"{theirs / baseline.ms[0]:.2f}",
                f"{(theirs - bare) / n:.1f}",
            ]
        print("| " + " | ".join(cells) + " |")


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
        print_cost_table(model)
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

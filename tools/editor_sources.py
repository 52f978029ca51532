"""How often the editor's draft sources are right, per tier, on real files (a small experiment).

For cursor points inside lines of the given files (after the line's first
three characters, so the rest of the line is a suffix), it generates greedily
twice with the model: once one character earlier (the suggestion the user saw
before typing that character) and once at the cursor (the truth). Then, at
every position of the truth, it asks ``recycle`` (fed the earlier generation),
``suffix`` and ``nearby`` (fed the text after the cursor), and ``lookup`` (for
comparison, with the text above and below the window as its corpus), and
counts per tier how often the first drafted token is the model's next token,
and how many drafted tokens in a row are. No planner, no timing: the numbers
are the sources' priors (``PRIORS`` in each module).

    PYTHONPATH=server python3 tools/editor_sources.py [--points N] [--seconds S] FILE_OR_GLOB...
    PYTHONPATH=server python3 tools/editor_sources.py --recording RECORDING.json

The second form scores ``nearby`` and ``lookup`` the same way over a replay
recording's greedy outputs (no model run: its tokenizer only).

It takes no new cursor point after ``S`` seconds (default 150), and opens the
model with a context of 1024 tokens (prompts of about 850) to keep each point
cheap on a small machine.
"""

from __future__ import annotations

import glob
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence

from structspec.bench.recording import Recording
from structspec.completion.corpus import CorpusCache
from structspec.completion.prompt import PromptBuilder
from structspec.drafts.base import DraftContext, DraftSource
from structspec.drafts.lookup import LookupSource
from structspec.drafts.nearby import NearbySource
from structspec.drafts.recycle import RecycleSource
from structspec.drafts.suffix import SuffixSource
from structspec.engine import Engine, GenerationOptions
from structspec.runtime import open_model

MAX_TOKENS = 32
CONTEXT_TOKENS = 32  # as completion.generate.GENERATED_CONTEXT_TOKENS


def points(text: str, n: int, rng: random.Random) -> list[int]:
    """Cursor offsets three characters into non-blank lines of at least 12 characters."""
    starts, pos = [], 0
    for line in text.splitlines(keepends=True):
        body = line.strip()
        if len(body) >= 12 and pos > 2000:
            starts.append(pos + len(line) - len(line.lstrip()) + 3)
        pos += len(line)
    return sorted(rng.sample(starts, min(n, len(starts))))


#: tier -> [proposals, first token right, drafted tokens right in a row]
Counts = dict[str, list[int]]


def agree(draft: Sequence[int], truth: Sequence[int]) -> int:
    m = 0
    while m < len(draft) and m < len(truth) and draft[m] == truth[m]:
        m += 1
    return m


def score(
    counts: Counts, ctx: DraftContext, sources: Sequence[DraftSource], truth: Sequence[int]
) -> None:
    """Ask every source at ``ctx`` and count its draft against ``truth`` (what follows)."""
    for source in sources:
        draft = source.propose(ctx)
        if draft is None or not draft.tokens:
            continue
        c = counts[draft.key]
        m = agree(draft.tokens, truth)
        c[0] += 1
        c[1] += m > 0
        c[2] += m


def print_table(counts: Counts) -> None:
    print("| tier | proposals | first token right | mean tokens right in a row |")
    print("| --- | --- | --- | --- |")
    for key in sorted(counts):
        n, first, run = counts[key]
        print(f"| {key} | {n} | {first / n:.2f} | {run / n:.2f} |")


def replayed(path: str) -> None:
    """``nearby`` and ``lookup`` over a recording's greedy outputs (prompt + output so far)."""
    rec = Recording.load(path)
    model = open_model("", threads=1)
    counts: Counts = defaultdict(lambda: [0, 0, 0])
    for g, p in enumerate(rec.prompts):
        sources: list[DraftSource] = [NearbySource(), LookupSource()]
        out = list(p.output)
        for i in range(len(out) - 1):
            ctx = DraftContext(
                model, [*p.prompt, *out[:i]], len(p.prompt), max_tokens=15, generation=g + 1
            )
            score(counts, ctx, sources, out[i:])
    print(f"{len(rec.prompts)} recorded outputs\n")
    print_table(counts)


def main(patterns: Sequence[str], per_file: int = 6, seconds: float = 150.0) -> None:
    files = sorted({f for p in patterns for f in glob.glob(p)})
    model = open_model("", threads=2, context_size=1024)
    t0 = time.perf_counter()
    n_points = 0
    prompts, corpus, engine = PromptBuilder(model), CorpusCache(), Engine(model)
    opts = GenerationOptions(max_tokens=MAX_TOKENS, speculative=False)
    counts: Counts = defaultdict(lambda: [0, 0, 0])
    rng = random.Random(0)
    generation = 0
    for path in files:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for offset in points(text, per_file, rng):
            if time.perf_counter() - t0 > seconds:
                break
            n_points += 1
            before = prompts.build(text, offset - 1, max_tokens=MAX_TOKENS).tokens
            seen = engine.generate(before, opts).tokens
            prompt = prompts.build(text, offset, max_tokens=MAX_TOKENS)
            truth = engine.generate(prompt.tokens, opts).tokens
            print(
                f"  {path}:{offset}: {len(prompt.tokens)} prompt tokens",
                file=sys.stderr,
                flush=True,
            )
            recent = [(*before[-CONTEXT_TOKENS:], *seen)]
            suffix = corpus.suffix(model, text, offset)
            others = corpus.collect(model, text=text, cut=prompt.cut, suffix_start=offset)
            sources: list[DraftSource] = [
                RecycleSource(),
                SuffixSource(),
                NearbySource(),
                LookupSource(),
            ]
            generation += 1
            for i in range(len(truth) - 1):
                ctx = DraftContext(
                    model,
                    [*prompt.tokens, *truth[:i]],
                    len(prompt.tokens),
                    max_tokens=15,
                    corpus=others,
                    suffix_tokens=suffix,
                    recent_suggestions=recent,
                    generation=generation,
                )
                score(counts, ctx, sources, truth[i:])
    print(f"{n_points} cursor points in {time.perf_counter() - t0:.0f} s\n")
    print_table(counts)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--recording"]:
        replayed(args[1])
        sys.exit(0)
    options = {"--points": 6.0, "--seconds": 150.0}
    while args[:1] and args[0] in options:
        options[args[0]], args = float(args[1]), args[2:]
    main(args, int(options["--points"]), options["--seconds"])

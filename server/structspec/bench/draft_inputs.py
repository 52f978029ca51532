"""What the draft sources' inputs cost a request: tokenizing the corpus, indexing it.

``python -m structspec.bench.draft_inputs [--model PATH] [--repeat 3]`` takes
real code found on the machine (the sources of standard-library modules,
``MODULES``): one module is the document being edited, the others are open
beside it. It prints, median over ``--repeat`` rounds:

- the cost per unit of each step: tokenizing (ms per 1,000 characters), the
  lookup source's bigram index and the motif source's line scan (µs per
  token);
- what a request at a new place pays for its draft inputs before the model's
  first pass (``CorpusCache.collect``, then one ``propose`` of each source,
  the first of a generation) three ways: *everything at once* (no budget:
  what every request paid before the budgets), *budgeted* (the request's
  ``corpus.REQUEST_CHARS`` and the sources' per-generation slices, nothing
  prepared), and *prepared* (pre-warm ran ``generate.prepare_drafts`` there
  first: its ``CorpusCache.prepare`` and ``Engine.prepare``; what a request
  after a pause pays).

Only drafts come from these inputs: none of this changes an answer.
"""

from __future__ import annotations

import importlib
import inspect
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from structspec.bench.prefill import measurement_parser, ms_since
from structspec.completion.corpus import REQUEST_CHARS, CorpusCache, DocumentSnapshot
from structspec.drafts import lookup as lookup_module
from structspec.drafts import motif as motif_module
from structspec.drafts.base import DraftContext
from structspec.drafts.lookup import LookupSource
from structspec.drafts.motif import MotifSource
from structspec.engine.decode import Engine
from structspec.model.base import Model

#: Standard-library modules: the first is edited, the others are open beside it.
MODULES = ("argparse", "http.client", "logging", "pathlib", "csv", "typing")
#: Characters taken of each module.
MODULE_CHARS = 40_000
#: Characters of the prompt window before the cursor.
WINDOW_CHARS = 6_000
#: The ways a request's draft inputs are measured (the module docstring).
WAYS = ("everything at once", "budgeted", "prepared")


def module_texts() -> list[str]:
    """The sources of ``MODULES``, ``MODULE_CHARS`` of each."""
    return [inspect.getsource(importlib.import_module(m))[:MODULE_CHARS] for m in MODULES]


@contextmanager
def whole_corpora() -> Iterator[None]:
    """The sources index and scan a whole corpus in one generation."""
    saved = (lookup_module.CORPUS_INDEX_PER_GENERATION, motif_module.CORPUS_SCAN_PER_GENERATION)
    lookup_module.CORPUS_INDEX_PER_GENERATION = 1 << 40
    motif_module.CORPUS_SCAN_PER_GENERATION = 1 << 40
    try:
        yield
    finally:
        lookup_module.CORPUS_INDEX_PER_GENERATION, motif_module.CORPUS_SCAN_PER_GENERATION = saved


def request_ms(model: Model, texts: list[str], way: str) -> float:
    """Milliseconds of a request's draft inputs at a new place in ``texts[0]``, ``way`` (WAYS)."""
    text = texts[0]
    others = [DocumentSnapshot(f"file:///m{i}", 1, t) for i, t in enumerate(texts[1:])]
    cut, cursor = len(text) // 2 - WINDOW_CHARS, len(text) // 2
    window = model.tokenize(text[cut:cursor])
    cache = CorpusCache()
    sources: list[LookupSource | MotifSource] = [LookupSource(), MotifSource(model)]

    def context(corpus: list[list[int]]) -> DraftContext:
        return DraftContext(model, list(window), len(window), corpus=corpus, language="python")

    if way == "prepared":
        lists = cache.prepare(
            model, lambda: False, text=text, cut=cut, suffix_start=cursor, others=others
        )
        assert lists is not None
        Engine(model, sources).prepare(window, corpus=lists, language="python")
    budget = None if way == "everything at once" else REQUEST_CHARS
    t0 = time.perf_counter()
    with whole_corpora() if way == "everything at once" else nullcontext():
        found = cache.collect(
            model, text=text, cut=cut, suffix_start=cursor, others=others, budget=budget
        )
        ctx = context(found)
        ctx.generation = 1
        for source in sources:
            source.propose(ctx)
    return ms_since(t0)


def per_unit(model: Model, texts: list[str]) -> dict[str, float]:
    """Tokenizing ms per 1,000 characters; index and scan µs per token."""
    t0 = time.perf_counter()
    corpus = [model.tokenize(t, add_bos=False) for t in texts]
    tokenize = ms_since(t0) / (sum(map(len, texts)) / 1000)
    tokens = sum(map(len, corpus))
    ctx = DraftContext(model, [1], 1, corpus=corpus, language="python")
    units = {"tokenize ms / 1,000 characters": tokenize}
    source: Callable[[], LookupSource | MotifSource]
    for name, source in (
        ("lookup index", LookupSource),
        ("motif scan", lambda: MotifSource(model)),
    ):
        built = source()
        t0 = time.perf_counter()
        built.prepare(ctx, lambda: False)
        units[f"{name} µs / token"] = ms_since(t0) * 1000 / tokens
    return units


def main(argv: list[str] | None = None) -> int:
    args = measurement_parser("draft_inputs", __doc__).parse_args(argv)
    from structspec.runtime import open_model

    model = open_model(args.model, threads=args.threads, widen=False)
    texts = module_texts()
    rounds: dict[str, list[float]] = {}
    for _ in range(max(1, args.repeat)):
        for key, value in per_unit(model, texts).items():
            rounds.setdefault(key, []).append(value)
        for way in WAYS:
            rounds.setdefault(way, []).append(request_ms(model, texts, way))
    chars = sum(map(len, texts))
    print(
        f"{model.name}: {len(MODULES)} standard-library modules, {chars} characters "
        f"({len(MODULES) - 1} open beside the edited one), median of {args.repeat} rounds"
    )
    print("| measure | median | min-max |")
    print("| --- | ---: | ---: |")
    for key, values in rounds.items():
        label = key if " / " in key else f"a request's draft inputs, {key} (ms)"
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"| {label} | {statistics.median(values):.2f} | {spread} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

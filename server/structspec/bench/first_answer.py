"""The first answer at a new place, and the keystroke after it.

At a new place the first answer pays for the prompt's evaluation, and the
model's first pass also evaluates the prompt's last tokens: with the default
``maxGenerationMs`` that pass alone often uses the budget, and the answer is
cut after its first word (``completion.generate``). Pre-generation then
writes the rest of the line while the word is on screen, and a keystroke
along the suggestion is answered with the whole line
(``completion.request``, ``_grows``) where it used to be answered with the
rest of the word.

The lines are the infill suite's real-file lines (``bench.infill.file_cases``,
nothing written for the test), each cleared to its indentation. A server with
default settings opens the file and is asked at once at the line (as after a
jump), then, ``typist.PACE_MS`` after the answer (the editor benchmark's paced
user's keystroke interval), the line's
first character is typed and it is asked again. Scored
per way, after that keystroke: *as shown*, the server's answer; *without
growing*, the answer before suggestions grew: where the character typed is
the first of a first answer of two or more characters, the rest of that
answer, else the server's (the model was asked either way). *exact*: the
typed character and the answer's first line are the line; *words*: they
start with its first two words; *chars*: the median length of that line.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from structspec.bench.infill import Case, InfillServer, file_cases
from structspec.bench.menu import first_words
from structspec.bench.points import utf16_len
from structspec.bench.typist import PACE_MS, InHand, Out, measurement_main, run_servers

#: The two answers scored after the keystroke (the module docstring says what each is).
WAYS = ("as shown", "without growing")


def without_growing(first: str, typed: str, answer: str) -> str:
    """What a keystroke ``typed`` after the ``first`` answer showed before suggestions grew."""
    return first[len(typed) :] if len(first) > len(typed) and first.startswith(typed) else answer


def score(ways: dict[str, list[tuple[str, str]]], cases: int) -> dict[str, dict[str, Any]]:
    """Per way, over ``(prediction, line)`` pairs: shown, exact, words, median characters."""
    result: dict[str, dict[str, Any]] = {}
    for way, pairs in ways.items():
        shown = [(p, t) for p, t in pairs if p]
        result[way] = {
            "cases": cases,
            "shown": len(shown),
            "exact": sum(p == t for p, t in shown),
            "words": sum(first_words(p) == first_words(t) for p, t in shown),
            "chars": statistics.median(len(p) for p, _ in shown) if shown else 0,
        }
    return result


async def _run(
    cases: Sequence[Case], model: str, threads: int, timeout_s: float, out: Out
) -> tuple[dict[str, list[tuple[str, str]]], int]:
    server = InfillServer("first answer", {"debounceMs": 0}, model, threads, timeout_s)
    ways: dict[str, list[tuple[str, str]]] = {way: [] for way in WAYS}
    along = 0

    async def run(hand: InHand[InfillServer]) -> None:
        nonlocal along
        for index, case in enumerate(cases):
            t0 = time.perf_counter()
            server.open_case(case)
            column = utf16_len(case.indent)
            try:
                first, _, _ = await server.ask(case.uri, case.line, column)
                await asyncio.sleep(PACE_MS / 1000.0)
                typed = case.target[0]
                server.type_at(case, 2, column, typed)
                answer, _, _ = await server.ask(case.uri, case.line, column + utf16_len(typed))
            finally:
                server.close_case(case)
            along += len(first) > 1 and first.startswith(typed)
            old = without_growing(first, typed, answer)
            for way, shown in zip(WAYS, (answer, old), strict=True):
                ways[way].append(((typed + shown).rstrip() if shown else "", case.target))
            out(f"  {index + 1}/{len(cases)} {case.id}: {time.perf_counter() - t0:.1f} s")

    await run_servers([server], out, run)
    return ways, along


def run_first_answer_benchmark(
    model: str, threads: int, out: Out = print, *, limit: int = 40, timeout_s: float = 300.0
) -> dict[str, Any]:
    """Ask at each line at once, type its first character, ask again; print the table."""
    cases = file_cases(limit)
    if not cases:
        raise ValueError("no real-file lines were found")
    out(
        f"first answer: {len(cases)} real-file lines, each asked at once after the file "
        f"opened, then after its first character typed; default settings; {threads} thread(s)"
    )
    t0 = time.perf_counter()
    ways, along = asyncio.run(_run(cases, model, threads, timeout_s, out))
    out(f"  run done in {time.perf_counter() - t0:.1f} s")
    out("")
    result: dict[str, Any] = {"suite": "first-answer", "model": model or "default"}
    result.update(score(ways, len(cases)), typed_along=along, threads=threads)
    out(f"{'way':<16} {'lines':>6} {'shown':>6} {'exact':>6} {'words':>6} {'chars':>6}")
    for way in WAYS:
        s = result[way]
        out(
            f"{way:<16} {s['cases']:>6} {s['shown']:>6} {s['exact']:>6} {s['words']:>6} "
            f"{s['chars']:>6}"
        )
    out("")
    out(
        f"the first character typed along a first answer of 2+ characters: {along} of "
        f"{len(cases)} lines; after it, shown: ghost text; exact / words: the typed character "
        "and the ghost text's first line are the line / start with its first two words; "
        "chars: their median length"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m structspec.bench.first_answer``: the first answer at a new place and after."""
    return measurement_main(
        argv, "first_answer", main.__doc__ or "", run_first_answer_benchmark, 40, "real-file lines"
    )


if __name__ == "__main__":
    raise SystemExit(main())

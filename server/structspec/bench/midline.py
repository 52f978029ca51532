"""Typing in the middle of a line: what is shown when code follows the cursor.

The lines are the infill suite's real-file lines (``bench.infill.file_cases``,
nothing written for the test). In each, a word (an identifier of at least
four characters, outside quotes) that code follows on the line is deleted,
and the user retypes it: the server is asked with nothing of it typed and
after each of its first 1..3 characters (``k``), the rest of the line in
place, as an editor asks while the user edits inside a line.

A model without fill-in-the-middle tokens (the default model) never sees the
text after the cursor: it writes its own line, which the clean-up makes an
insertion before the rest (``completion.suggest.clean``). Each keystroke is
asked twice: as it is (the ghost text the server shows), and with the rest of
the line deleted for that request (then put back): the model's own line at
the same cursor, since its prompt is the same. That line, cleaned as the
server cleans it for a model that saw the rest (``sees_rest``), is what was
shown before the server required the line to join the rest (*without the
rule*). Scored per way: *shown*, ghost text; *right*, the line with the
suggestion applied is the original line; *wrong*, shown but not right (text
inserted before the rest of the line that the user must read past or undo).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from structspec.bench.infill import OPTIONS, TYPED, Case, InfillServer, file_cases
from structspec.bench.points import utf16_len
from structspec.bench.typist import InHand, Out, measurement_main, run_servers
from structspec.completion.suggest import LINE, CursorContext, clean

#: The two answers scored at each keystroke (the module docstring says what each is).
WAYS = ("as shown", "without the rule")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")


@dataclass(frozen=True)
class Point:
    """A line with a word deleted: ``before`` + ``word`` + ``rest`` is the original."""

    case: Case
    before: str  # the line up to the word, its indentation included
    word: str
    rest: str


def midline_point(case: Case) -> Point | None:
    """The middle one of the line's words that code follows (``None``: no such word).

    A word inside quotes is left out (an even number of each quote before it),
    and so is one whose line opens a block before it (the cursor there would
    take a block, not a line).
    """
    words = []
    for match in _WORD.finditer(case.target):
        head, rest = case.target[: match.start()], case.target[match.end() :]
        if head.count('"') % 2 or head.count("'") % 2:
            continue
        before = case.indent + head
        if not CursorContext.at(before + rest, len(before)).code_follows:
            continue
        if CursorContext.at(before, len(before)).mode != LINE:
            continue
        words.append(Point(case, before, match.group(0), rest))
    return words[len(words) // 2] if words else None


def applied(before: str, answer: str, rest: str) -> str:
    """The line after accepting ``answer`` (the item's first line) at the end of ``before``.

    An item carries the rest of the line (its range runs to the line's end)
    unless the rest is longer than the server carries.
    """
    return before + answer if answer.endswith(rest) else before + answer + rest


@dataclass
class Tally:
    """One way's counts over the keystrokes asked (``k``: characters of the word typed)."""

    asked: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    shown: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    right: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, k: int, point: Point, typed: str, answer: str) -> None:
        line = applied(typed, answer, point.rest) if answer else None
        target = point.before + point.word + point.rest
        ok = line is not None and line.strip() == target.strip()
        self.asked[k] += 1
        self.shown[k] += line is not None
        self.right[k] += ok
        self.records.append({"id": point.case.id, "k": k, "shown": line, "target": target})

    def summary(self) -> dict[str, Any]:
        per_k = {
            k: {"asked": self.asked[k], "shown": self.shown[k], "right": self.right[k]}
            for k in range(TYPED + 1)
        }
        shown, right = sum(self.shown), sum(self.right)
        return {
            "asked": sum(self.asked),
            "shown": shown,
            "right": right,
            "wrong": shown - right,
            "per_k": per_k,
            "records": self.records,
        }


async def run_point(server: InfillServer, point: Point, tallies: dict[str, Tally]) -> None:
    """Open the line with its word deleted, let pre-warm settle, retype the word's start."""
    case = point.case
    lines = case.text.split("\n")
    lines[case.line] = point.before + point.rest
    server.open(case.uri, case.language, "\n".join(lines))
    await server.wait_idle()
    version = 1
    start = utf16_len(point.before)
    try:
        for k in range(min(TYPED, len(point.word) - 1) + 1):
            typed = point.before + point.word[:k]
            column = start + utf16_len(point.word[:k])
            if k:
                version += 1
                server.type_at(case, version, column - 1, point.word[k - 1])
            answer, _, _ = await server.ask(case.uri, case.line, column)
            tallies["as shown"].add(k, point, typed, answer)
            server.type_at(case, version + 1, column, "", utf16_len(point.rest))
            own, _, _ = await server.ask(case.uri, case.line, column)  # the model's own line
            server.type_at(case, version + 2, column, point.rest)
            version += 2
            ctx = CursorContext.at(typed + point.rest, len(typed))
            before_rule = clean(own, ctx, LINE) if own else None
            tallies["without the rule"].add(k, point, typed, before_rule or "")
    finally:
        server.close_doc(case.uri)


async def _run(
    points: Sequence[Point], model: str, threads: int, timeout_s: float, out: Out
) -> dict[str, Tally]:
    server = InfillServer("midline", dict(OPTIONS), model, threads, timeout_s)
    tallies = {way: Tally() for way in WAYS}

    async def run(hand: InHand[InfillServer]) -> None:
        for index, point in enumerate(points):
            t0 = time.perf_counter()
            await run_point(server, point, tallies)
            out(f"  {index + 1}/{len(points)} {point.case.id}: {time.perf_counter() - t0:.1f} s")

    await run_servers([server], out, run)
    return tallies


def run_midline_benchmark(
    model: str, threads: int, out: Out = print, *, limit: int = 60, timeout_s: float = 300.0
) -> dict[str, Any]:
    """Build the points, retype each word's start, print the table."""
    points = [p for p in map(midline_point, file_cases(limit)) if p is not None]
    if not points:
        raise ValueError("no real-file line with a word that code follows was found")
    out(
        f"midline: {len(points)} real-file lines, a word that code follows deleted and its "
        f"first 0..{TYPED} characters retyped, the rest of the line in place; {threads} thread(s)"
    )
    t0 = time.perf_counter()
    tallies = asyncio.run(_run(points, model, threads, timeout_s, out))
    out(f"  run done in {time.perf_counter() - t0:.1f} s")
    out("")
    ks = range(TYPED + 1)
    out(
        f"{'way':<17} {'asked':>6} {'shown':>6} {'right':>6} {'wrong':>6}   "
        f"right/shown at k=0..{TYPED}"
    )
    result: dict[str, Any] = {"suite": "midline", "model": model or "default", "threads": threads}
    for way in WAYS:
        s = result[way] = tallies[way].summary()
        per_k = "  ".join(f"{s['per_k'][k]['right']}/{s['per_k'][k]['shown']}" for k in ks)
        out(f"{way:<17} {s['asked']:>6} {s['shown']:>6} {s['right']:>6} {s['wrong']:>6}   {per_k}")
    out("")
    out(
        "shown: ghost text; right: the line with it accepted is the original line; wrong: "
        "shown, not right; without the rule: the model's own line (asked with the rest of the "
        "line deleted) cleaned as for a model that saw the rest"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m structspec.bench.midline``: typing in the middle of a line."""
    return measurement_main(
        argv, "midline", main.__doc__ or "", run_midline_benchmark, 60, "real-file lines looked at"
    )


if __name__ == "__main__":
    raise SystemExit(main())

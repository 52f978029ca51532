"""Ghost text beside the editor's completion menu: answered at the cursor, or after the
menu's selected item.

While its completion menu is open, VS Code asks for inline suggestions naming
the menu's selected item (``context.selectedCompletionInfo``) and shows one
only where it continues that item: it replaces the item's range and its text
starts with the item's. A server that answers at the cursor is shown only
where the model happens to write the selected item; one that answers after
the item (``completion.request.Asked``) is shown whenever it has a
suggestion.

The lines are the infill suite's real-file lines (``bench.infill.file_cases``,
nothing written for the test): a line is cleared and its first word typed one
character at a time. After 1..3 characters, while the word goes on (a line
whose first word is an identifier longer than that), a menu is open, its
selected item being:

- *right*: the word being typed, as a language server that ranks the right
  name first would select;
- *words*: the alphabetically first word of the document that starts with the
  typed characters and is longer than them, a crude stand-in for VS Code's
  word-based suggestions (with no language extension); it is the right word
  only sometimes (counted).

One language server per menu and way, each typing every line (once every
server has pre-warmed the line's document, so that all ask from the same
window): one asks at
the cursor (what the server answered before it read the item), the other
after the item; after each keystroke they are asked in turn, in an order
that alternates over the lines, so a busy phase of the machine hits all
alike. Scored per way: *shown*, VS Code shows ghost text (at the cursor:
only where the suggestion continues the item); *exact*, the line shown (the
typed characters, the rest of the item, the suggestion's first line) is the
cleared line; *word*, its first two words are the line's (the item's word and
the next). A line not shown scores neither. The answers are the model's whole
(the infill suite's wide budgets), so the two ways differ only in the text
asked about; latency is reported as the infill suite reports it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from structspec.bench.harness import percentile
from structspec.bench.infill import OPTIONS, TYPED, Case, InfillServer, file_cases
from structspec.bench.points import utf16_len
from structspec.bench.typist import InHand, Out, measurement_main, run_servers

#: The menus simulated (the module docstring says what each selects).
MENUS = ("right", "words")
#: The two ways a keystroke is asked.
WAYS = ("at cursor", "after item")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORDS2 = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\S)\s*([A-Za-z_][A-Za-z0-9_]*|\S)?")


def leading_word(target: str) -> str:
    """The identifier the line starts with ('' when it starts otherwise)."""
    match = _WORD.match(target)
    return match.group(0) if match else ""


def first_words(text: str) -> tuple[str, str]:
    """The first two words (identifiers or single other characters) of ``text``."""
    match = _WORDS2.match(text)
    return (match.group(1), match.group(2) or "") if match else ("", "")


def menu_item(menu: str, case: Case, typed: str) -> str | None:
    """The item ``menu`` selects after ``typed`` (``None``: no menu is open)."""
    word = leading_word(case.target)
    if menu == "right":
        return word
    found = {w for w in _WORD.findall(case.text) if w.startswith(typed) and len(w) > len(typed)}
    return min(found) if found else None


def shown_line(way: str, typed: str, item: str, answer: str) -> str | None:
    """The line VS Code shows after ``typed`` with ``item`` selected, or ``None`` (no ghost text).

    ``answer``: the inline item's first line ('' for none). At the cursor it
    continues ``typed``; VS Code shows it only where it starts with the item's
    rest. After the item it holds the item and the suggestion.
    """
    if not answer:
        return None
    if way == "at cursor":
        return typed + answer if answer.startswith(item[len(typed) :]) else None
    return answer


@dataclass
class Tally:
    """One menu's and way's counts over the keystrokes asked (``k``: typed characters)."""

    asked: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    shown: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    exact: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    words: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    right_item: list[int] = field(default_factory=lambda: [0] * (TYPED + 1))
    ms: list[float] = field(default_factory=list)
    #: One record per keystroke asked, in order.
    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, k: int, line: str | None, target: str, right_item: bool, ms: float) -> None:
        self.records.append({"k": k, "shown": line, "target": target, "ms": round(ms, 1)})
        self.asked[k] += 1
        self.right_item[k] += right_item
        self.ms.append(ms)
        if line is None:
            return
        line = line.rstrip()
        self.shown[k] += 1
        self.exact[k] += line == target
        self.words[k] += first_words(line) == first_words(target)

    def summary(self) -> dict[str, Any]:
        return {
            "asked": sum(self.asked),
            "right_item": sum(self.right_item),
            "shown": sum(self.shown),
            "exact": sum(self.exact),
            "words": sum(self.words),
            "per_k": {
                k: {"asked": self.asked[k], "shown": self.shown[k], "exact": self.exact[k]}
                for k in range(1, TYPED + 1)
            },
            "p50_ms": round(percentile(self.ms, 50), 1) if self.ms else None,
            "records": self.records,
        }


Tallies = dict[str, dict[str, Tally]]


def menu_cases(limit: int) -> list[Case]:
    """Up to ``limit`` of the infill suite's real-file lines whose first word is an
    identifier of 2+ characters (a menu opens while it is typed)."""
    return [c for c in file_cases(limit * 3) if len(leading_word(c.target)) >= 2][:limit]


Servers = dict[tuple[str, str], InfillServer]


async def run_line(servers: Servers, case: Case, flip: bool, tallies: Tallies) -> None:
    """Open the case on every server, type its first word's first characters on each, and
    ask each after each keystroke, its menu's item named or not (its way)."""
    for server in servers.values():
        server.open_case(case)
    for server in servers.values():
        await server.wait_idle()
    word = leading_word(case.target)
    start = utf16_len(case.indent)
    order = list(reversed(servers.items())) if flip else list(servers.items())
    try:
        for k in range(1, min(TYPED, len(word) - 1) + 1):
            column, typed = start + k, word[:k]
            for server in servers.values():
                server.type_at(case, k + 1, column - 1, word[k - 1])
            for (menu, way), server in order:
                item = menu_item(menu, case, typed)
                if item is None:
                    continue
                selected = {
                    "range": {
                        "start": {"line": case.line, "character": start},
                        "end": {"line": case.line, "character": column},
                    },
                    "text": item,
                }
                answer, ms, _ = await server.ask(
                    case.uri, case.line, column, selected if way == "after item" else None
                )
                line = shown_line(way, typed, item, answer)
                tallies[menu][way].add(k, line, case.target, item == word, ms)
    finally:
        for server in servers.values():
            server.close_case(case)


async def _run(
    cases: Sequence[Case], model: str, threads: int, timeout_s: float, out: Out
) -> Tallies:
    servers = {
        (menu, way): InfillServer(f"{menu}, {way}", dict(OPTIONS), model, threads, timeout_s)
        for menu in MENUS
        for way in WAYS
    }
    tallies = {menu: {way: Tally() for way in WAYS} for menu in MENUS}

    async def run(hand: InHand[InfillServer]) -> None:
        for index, case in enumerate(cases):
            t0 = time.perf_counter()
            await run_line(servers, case, index % 2 == 1, tallies)
            out(f"  {index + 1}/{len(cases)} {case.id}: {time.perf_counter() - t0:.1f} s")

    await run_servers(list(servers.values()), out, run)
    return tallies


def run_menu_benchmark(
    model: str, threads: int, out: Out = print, *, limit: int = 40, timeout_s: float = 300.0
) -> dict[str, Any]:
    """Build the lines, ask each keystroke both ways for each menu, print the table."""
    cases = menu_cases(limit)
    if not cases:
        raise ValueError("no real-file lines starting with an identifier were found")
    out(
        f"menu: {len(cases)} real-file lines starting with an identifier, its first 1..{TYPED} "
        f"characters typed (while the word goes on) with a menu item selected, asked at the "
        f"cursor and after the item; {threads} thread(s)"
    )
    t0 = time.perf_counter()
    tallies = asyncio.run(_run(cases, model, threads, timeout_s, out))
    out(f"  run done in {time.perf_counter() - t0:.1f} s")
    out("")
    out(
        f"{'menu':<7} {'way':<11} {'asked':>6} {'right item':>11} {'shown':>6} "
        f"{'exact':>6} {'words':>6} {'p50 ms':>7}"
    )
    result: dict[str, Any] = {"suite": "menu", "model": model or "default", "threads": threads}
    for menu in MENUS:
        result[menu] = {}
        for way in WAYS:
            s = tallies[menu][way].summary()
            result[menu][way] = s
            out(
                f"{menu:<7} {way:<11} {s['asked']:>6} {s['right_item']:>11} {s['shown']:>6} "
                f"{s['exact']:>6} {s['words']:>6} {s['p50_ms'] or '-':>7}"
            )
    out("")
    out(
        "asked: keystrokes with the menu open; right item: of those, the item selected was "
        "the word being typed; shown: VS Code shows ghost text (at the cursor: only where the "
        "suggestion continues the item); exact / words: the line shown is the line / starts "
        "with its first two words; p50 ms: request to answer"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m structspec.bench.menu``: ghost text beside the completion menu."""
    return measurement_main(
        argv, "menu", main.__doc__ or "", run_menu_benchmark, 40, "real-file lines"
    )


if __name__ == "__main__":
    raise SystemExit(main())

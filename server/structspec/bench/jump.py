"""The editor benchmark's "jump and type" part: a plain client arriving at new places.

Editors without ``structspec/didMoveCursor`` (Helix, Emacs, Sublime, Neovim
without the optional snippet) tell the server nothing when the user arrives
somewhere: the first the server hears of a new place is the user's edit there.
``JumpServer`` plays such a user at the editor benchmark's cursor points
(``bench/points.py``), file by file (``file_by_file``: a file's points one
after the other, as a user who opens a file and then jumps to a definition
in it). At each point the user arrives: opens the file (the first point of a
file) or jumps within it, far from the last place (a file's later points,
spread over the file); deletes the line's text back to its indentation (one
``didChange``) and at once types the line's real text (not the model's
suggestion), a key every ``PACE_MS``, one request at a time (when an answer
takes longer than the pace, the next key waits for it, so each answer's
empty reason is known). Leaving, the user puts back the rest of the line
(one ``didChange``, no request), so the file is the real file again for its
next point. Between two places the server is left alone as every
configuration is (``ReplayedServer.settle``) while the others type their
turns: its pre-warm works then, as while a user reads elsewhere.

Per place (``JumpPlace``, ``bench/editor_stats.py``): every keystroke's
answer (ms from the key, served by the model or without it, shown or not),
the server's empty reason of each empty answer (the growth of its status'
``stats.emptyReasons``, asked after each answer, not timed), and the time from
arriving (the first message at the place) to the first suggestion shown.
``jump_summary`` sums them up and ``editor_report.jump_report`` prints them;
the model's own choice (``model-empty``, ``stop-rule``) is counted apart from
the answers lost on the way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from structspec.bench import typist
from structspec.bench.editor_stats import UNCOUNTED, Answer, JumpPlace
from structspec.bench.points import Point, offset_at, position_at, utf16_len
from structspec.bench.typist import ReplayedServer

#: The jump-and-type configuration's name (the defaults, a plain client).
JUMP = "structspec, jump"


def original_text(point: Point) -> str:
    """The point's document with its line's real text in place (``point.text`` has it cleared)."""
    at = offset_at(point.text, point.line, utf16_len(point.indent))
    return point.text[:at] + point.typed + point.rest + point.text[at:]


def grown_reason(before: dict[str, int], after: dict[str, int]) -> str:
    """The empty reason whose count grew most between two ``emptyReasons`` (``UNCOUNTED``: none)."""
    grown = {r: n - before.get(r, 0) for r, n in after.items() if n > before.get(r, 0)}
    return max(grown, key=lambda r: grown[r]) if grown else UNCOUNTED


def file_by_file(points: Sequence[Point]) -> list[Point]:
    """``points`` grouped by file (files in their first point's order), each file's in order."""
    by_file: dict[str, list[Point]] = {}
    for point in points:
        by_file.setdefault(point.uri, []).append(point)
    return [point for group in by_file.values() for point in group]


class JumpServer(ReplayedServer):
    """A server typed at by a plain client that jumps to new places and types at once.

    It types the same points as the other configurations, in turn with them,
    but in its own order (``file_by_file``): its n-th turn types its n-th place.
    """

    def __init__(self, points: Sequence[Point], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.order = file_by_file(points)
        self.turn = 0
        self.texts: dict[str, str] = {}  # each open document's text
        self.reasons: dict[str, int] = {}  # the status' ``emptyReasons`` so far

    def _arrive(self, point: Point) -> tuple[bool, int]:
        """Open the point's file or jump within it, and clear its line; (opened, cursor)."""
        opened = point.uri not in self.opened
        if opened:
            self.opened[point.uri] = 1
            self.texts[point.uri] = original_text(point)
            self.client.notify(
                "textDocument/didOpen",
                {
                    "textDocument": {
                        "uri": point.uri,
                        "languageId": point.language,
                        "version": 1,
                        "text": self.texts[point.uri],
                    }
                },
            )
        self.text = self.texts[point.uri]
        start = offset_at(self.text, point.line, utf16_len(point.indent))
        end = start + len(point.typed) + len(point.rest)
        change = {
            "range": {"start": position_at(self.text, start), "end": position_at(self.text, end)},
            "text": "",
        }
        self._change(point.uri, change)
        self.text = self.text[:start] + self.text[end:]
        if self.text != point.text:  # the previous point's line was not put back
            raise RuntimeError(f"{point.uri}: the document differs from the file at a jump")
        return opened, start

    async def _key(self, uri: str, offset: int, ch: str) -> tuple[Answer, str | None, int]:
        """Type ``ch`` and wait for the answer: (answer, empty reason or ``None``, cursor)."""
        t_key = time.perf_counter()
        offset = self._type(uri, offset, ch)
        answer, _ = await self._ask(uri, offset, t_key)
        reasons = self.stats.get("emptyReasons", {})
        reason = None if answer.shown else grown_reason(self.reasons, reasons)
        self.reasons = dict(reasons)
        return answer, reason, offset

    async def run_point(self, point: Point) -> None:
        """Type this turn's place (``point`` is the other configurations' place this turn)."""
        point = self.order[self.turn]
        self.turn += 1
        arrived = time.perf_counter()
        opened, offset = self._arrive(point)
        place = JumpPlace(opened)
        next_key = arrived
        for ch in point.typed:
            await asyncio.sleep(max(0.0, next_key - time.perf_counter()))
            t_key = time.perf_counter()
            next_key = t_key + typist.PACE_MS / 1000.0
            answer, reason, offset = await self._key(point.uri, offset, ch)
            place.keys.append(answer)
            place.reasons.append(reason)
            if answer.shown and place.first_shown_ms is None:  # the status' time left out
                place.first_shown_ms = (t_key - arrived) * 1000.0 + answer.ms
        if point.rest:  # the user finishes the line (the file is whole again)
            self._type(point.uri, offset, point.rest)
        self.texts[point.uri] = self.text
        self.result.jumped.append(place)
        await self.settle()

"""Notebook cells completed with their notebook and alone: what notebook sync gives.

No notebook is on this machine and none is written for the test, so real
Python files (the mixed suite's, ``bench.mixed.collect``) are cut into
cells where a notebook made from a script would be: a cell starts at a
top-level statement that follows a blank line (its decorators and the
comments right above it included; ``cells_of``), and each cell loses its
trailing blank lines. The line after the mixed suite's cut point is cleared
in its cell, as the infill suite clears a line (``bench.infill``), and the
cells around it are kept up to ``BEFORE_CHARS``/``AFTER_CHARS`` of the file.

Each line is asked twice on each server, in turn: with the notebook synced
(``notebookDocument/didOpen``: the cell is completed in the text of the
notebook's cells joined, ``completion.notebooks``), and with the cells opened
as documents of their own (what a client without notebook sync sends, and
what every client got before the server synced notebooks: the other cells
reach the prompt only as project-context snippets, when that is on). Both
right after opening (the infill suite's *cold* arrival), then after 1..3
typed characters; scored as the infill suite scores.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structspec.bench.infill import (
    AFTER_CHARS,
    BEFORE_CHARS,
    CONFIGS,
    OPTIONS,
    Case,
    Configs,
    InfillServer,
    Scores,
    clear_line,
    score_table,
)
from structspec.bench.mixed import collect
from structspec.bench.typist import InHand, Out, measurement_main, run_servers

#: The two ways a line is asked: the notebook synced, the cells as documents.
WAYS = ("notebook", "cells")


def _statement_starts(source: str) -> list[int]:
    """0-based first lines of the top-level statements (decorators included)."""
    tree = ast.parse(source)
    starts = []
    for node in tree.body:
        lines = [node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]
        starts.append(min(lines) - 1)
    return starts


def cells_of(source: str) -> list[tuple[int, str]]:
    """``source`` cut into cells: ``(first line in source, text)`` (module docstring).

    Raises ``SyntaxError`` for a file Python cannot parse.
    """
    lines = source.splitlines(keepends=True)
    cuts = [0]
    for start in _statement_starts(source):
        # The comments right above the statement go with it.
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        if start > cuts[-1] and not lines[start - 1].strip():
            cuts.append(start)
    cuts.append(len(lines))
    cells = []
    for first, end in zip(cuts, cuts[1:], strict=False):
        text = "".join(lines[first:end]).rstrip("\r\n")
        if text.strip():
            cells.append((first, text))
    return cells


def notebook_cases(limit: int) -> list[Case]:
    """Up to ``limit`` lines of real Python files, each in a cell after the first."""
    cases: list[Case] = []
    for item in collect("python", limit * 3):
        if len(cases) >= limit:
            break
        path = Path(item["source"])
        try:
            source = path.read_text(encoding="utf-8")
            cells = cells_of(source)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        at = source.find(item["prompt"])
        if at < 0:
            continue
        cursor = at + len(item["prompt"])
        line = source.count("\n", 0, cursor)
        where = max(i for i, (first, _) in enumerate(cells) if first <= line)
        first, text = cells[where]
        cleared = clear_line(text, line - first)
        if where == 0 or cleared is None:
            continue  # nothing before it, or a blank line (or one of the trailing blanks)
        # The cells that start within the infill suite's reach of the line.
        low = source.count("\n", 0, max(0, cursor - BEFORE_CHARS))
        high = source.count("\n", 0, cursor + AFTER_CHARS)
        kept = [i for i, (start, _) in enumerate(cells) if i == where or low <= start <= high]
        if kept[0] == where:
            continue  # no cell before it within reach (a long one)
        texts = [cleared[0] if i == where else cells[i][1] for i in kept]
        name = f"{len(cases)}-{path.stem}"
        uri = f"vscode-notebook-cell:/notebooks/{name}.ipynb"
        cases.append(
            Case(
                item["id"],
                "notebook",
                f"{uri}#cell{kept.index(where)}",
                "python",
                cleared[0],
                line - first,
                cleared[1],
                cleared[2],
                cells=tuple(texts),
            )
        )
    return cases


def notebook_uri(case: Case) -> str:
    return "file:///notebooks/" + case.uri.split("/notebooks/", 1)[1].split("#", 1)[0]


def cell_uri(case: Case, index: int) -> str:
    return f"{case.uri.split('#', 1)[0]}#cell{index}"


class NotebookServer(InfillServer):
    """An infill server that opens a case's cells as a notebook (``synced``) or one by one."""

    synced = True

    def open_case(self, case: Case) -> None:
        if not self.synced:
            for index, text in enumerate(case.cells):
                self.open(cell_uri(case, index), case.language, text)
            return
        cells = [cell_uri(case, i) for i in range(len(case.cells))]
        self.client.notify(
            "notebookDocument/didOpen",
            {
                "notebookDocument": {
                    "uri": notebook_uri(case),
                    "notebookType": "jupyter-notebook",
                    "version": 1,
                    "cells": [{"kind": 2, "document": uri} for uri in cells],
                },
                "cellTextDocuments": [
                    {"uri": uri, "languageId": case.language, "version": 1, "text": text}
                    for uri, text in zip(cells, case.cells, strict=True)
                ],
            },
        )

    def type_at(self, case: Case, version: int, column: int, text: str, replaced: int = 0) -> None:
        if not self.synced:
            super().type_at(case, version, column, text, replaced)
            return
        start = {"line": case.line, "character": column}
        end = {"line": case.line, "character": column + replaced}
        self.client.notify(
            "notebookDocument/didChange",
            {
                "notebookDocument": {"uri": notebook_uri(case), "version": version},
                "change": {
                    "cells": {
                        "textContent": [
                            {
                                "document": {"uri": case.uri, "version": version},
                                "changes": [{"range": {"start": start, "end": end}, "text": text}],
                            }
                        ]
                    }
                },
            },
        )

    def close_case(self, case: Case) -> None:
        uris = [cell_uri(case, i) for i in range(len(case.cells))]
        if not self.synced:
            for uri in uris:
                self.close_doc(uri)
            return
        self.client.notify(
            "notebookDocument/didClose",
            {
                "notebookDocument": {"uri": notebook_uri(case)},
                "cellTextDocuments": [{"uri": uri} for uri in uris],
            },
        )


async def _run(
    cases: Sequence[Case], model: str, threads: int, timeout_s: float, out: Out, configs: Configs
) -> dict[str, dict[str, Scores]]:
    servers = [
        NotebookServer(name, {**OPTIONS, **options}, model, threads, timeout_s)
        for name, options in configs
    ]
    scores = {s.name: {way: Scores() for way in WAYS} for s in servers}

    async def run(hand: InHand[NotebookServer]) -> None:
        for index, case in enumerate(cases):
            took = []
            for current in hand.each():
                for way in WAYS:
                    current.synced = way == "notebook"
                    board = scores[current.name][way]
                    asked = len(board.records)
                    t0 = time.perf_counter()
                    await current.run_case(case, "cold", 0.0, board, Path())
                    for record in board.records[asked:]:
                        record["part"] = way
                    took.append(f"{current.name}, {way} {time.perf_counter() - t0:.1f} s")
            out(f"  {index + 1}/{len(cases)} {case.id}: {', '.join(took)}")

    await run_servers(servers, out, run)
    return scores


def run_notebook_benchmark(
    model: str,
    threads: int,
    out: Out = print,
    *,
    limit: int = 25,
    timeout_s: float = 300.0,
    configs: Configs = CONFIGS,
) -> dict[str, Any]:
    """Build the cases, ask each both ways on each server of ``configs``, print the tables."""
    cases = notebook_cases(limit)
    if not cases:
        raise ValueError("no notebook cases could be built (no parsable Python files found)")
    median = sorted(len(c.cells) for c in cases)[len(cases) // 2]
    out(
        f"notebooks: {len(cases)} real Python files cut into cells (median {median} "
        f"cells), a line of a cell after the first cleared; asked right after opening and "
        f"after 1..3 typed characters, the notebook synced and the cells as documents; "
        f"{threads} thread(s)"
    )
    t0 = time.perf_counter()
    scores = asyncio.run(_run(cases, model, threads, timeout_s, out, configs))
    out(f"  run done in {time.perf_counter() - t0:.1f} s")
    result: dict[str, Any] = {"suite": "notebooks", "model": model or "default"}
    for way in WAYS:
        out("")
        out(f"{way} ({len(cases)} lines):")
        result[way] = score_table(scores, way, out)
    result["lines"] = [r for boards in scores.values() for b in boards.values() for r in b.records]
    out("")
    out(
        "notebook: the notebook synced; cells: each cell a document of its own; exact@k / "
        "word@k, sim, cold and warm as in the infill suite (cold: right after opening)"
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m structspec.bench.notebooks``: notebook cells with their notebook and alone."""
    return measurement_main(
        argv, "notebooks", main.__doc__ or "", run_notebook_benchmark, 25, "cases"
    )


if __name__ == "__main__":
    raise SystemExit(main())

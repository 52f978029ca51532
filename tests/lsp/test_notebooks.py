"""Notebook sync through a real ``structspec-lsp``: a cell is completed with the cells
before it, and answered in the cell's own lines (``completion.notebooks``)."""

from __future__ import annotations

from typing import Any

from tests.helpers.raw_client import RawClient, no_traceback

NOTEBOOK = "file:///work/analysis.ipynb"
CELLS = [
    "import os\ndef load_rows(path):\n    return open(path).read()\n",
    "# Load the data",
    "rows = load_",
]
LANGUAGES = ["python", "markdown", "python"]


def cell(i: int) -> str:
    return f"vscode-notebook-cell:/work/analysis.ipynb#cell{i}"


def open_notebook(client: RawClient) -> None:
    client.notify(
        "notebookDocument/didOpen",
        {
            "notebookDocument": {
                "uri": NOTEBOOK,
                "notebookType": "jupyter-notebook",
                "version": 1,
                "cells": [
                    {"kind": 2 if lang == "python" else 1, "document": cell(i)}
                    for i, lang in enumerate(LANGUAGES)
                ],
            },
            "cellTextDocuments": [
                {"uri": cell(i), "languageId": lang, "version": 1, "text": text}
                for i, (lang, text) in enumerate(zip(LANGUAGES, CELLS, strict=True))
            ],
        },
    )


def items(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return (answer.get("result") or {}).get("items") or []


def test_the_server_syncs_notebooks_for_a_client_that_can():
    with RawClient() as client:
        caps = client.initialize(notebooks=True)["result"]["capabilities"]
        assert caps["notebookDocumentSync"] == {"notebookSelector": [{"notebook": "*"}]}
        assert client.shutdown_and_exit() == 0
    with RawClient() as client:  # without the capability, cells come as documents
        caps = client.initialize()["result"]["capabilities"]
        assert "notebookDocumentSync" not in caps
        assert client.shutdown_and_exit() == 0


def test_a_cell_is_answered_in_its_own_lines_and_follows_the_notebooks_edits():
    with RawClient() as client:
        client.initialize(notebooks=True)
        open_notebook(client)
        found = items(client.response(client.inline(cell(2), 0, len(CELLS[2]))))
        assert found and found[0]["insertText"], found
        cursor = {"line": 0, "character": len(CELLS[2])}
        assert found[0]["range"] == {"start": cursor, "end": cursor}
        # A cell inserted before it and a character typed in it: still its own lines.
        client.notify(
            "notebookDocument/didChange",
            {
                "notebookDocument": {"uri": NOTEBOOK, "version": 2},
                "change": {
                    "cells": {
                        "structure": {
                            "array": {
                                "start": 0,
                                "deleteCount": 0,
                                "cells": [{"kind": 2, "document": cell(9)}],
                            },
                            "didOpen": [
                                {
                                    "uri": cell(9),
                                    "languageId": "python",
                                    "version": 1,
                                    "text": "import sys\n\n\n",
                                }
                            ],
                        },
                        "textContent": [
                            {
                                "document": {"uri": cell(2), "version": 2},
                                "changes": [
                                    {
                                        "range": {"start": cursor, "end": cursor},
                                        "text": "r",
                                    }
                                ],
                            }
                        ],
                    }
                },
            },
        )
        found = items(client.response(client.inline(cell(2), 0, len(CELLS[2]) + 1)))
        assert found and found[0]["range"]["start"] == {"line": 0, "character": len(CELLS[2]) + 1}
        # An edit that cannot be read: the notebook is forgotten, not served wrong.
        client.notify(
            "notebookDocument/didChange",
            {
                "notebookDocument": {"uri": NOTEBOOK, "version": 3},
                "change": {
                    "cells": {
                        "textContent": [
                            {
                                "document": {"uri": cell(2), "version": 3},
                                "changes": [{"range": None, "text": "x"}],
                            }
                        ]
                    }
                },
            },
        )
        assert client.response(client.inline(cell(2), 0, 3)).get("result") is None
        # Reopened, it is served again; closed, its cells are unknown: also by a close
        # whose cell list cannot be read (it was dropped whole, the notebook kept).
        for cells in ([{"uri": cell(2)}], None):
            open_notebook(client)
            assert items(client.response(client.inline(cell(2), 0, len(CELLS[2]))))
            client.notify(
                "notebookDocument/didClose",
                {"notebookDocument": {"uri": NOTEBOOK}, "cellTextDocuments": cells},
            )
            assert client.response(client.inline(cell(2), 0, 3)).get("result") is None
        assert client.shutdown_and_exit() == 0
        assert no_traceback(client.stderr)

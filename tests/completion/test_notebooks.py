"""Notebooks: cells joined per language, positions moved between a cell and its notebook
text, and completions in a cell asked with the cells around it (stand-in model)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence

import pytest

from structspec.completion.documents import Document, DocumentStore, Range, TextChange
from structspec.completion.notebooks import (
    CellEdit,
    CellText,
    NotebookChange,
    NotebookStore,
    difference,
    joined_uri,
)
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings
from structspec.model.base import Rows
from structspec.model.standin import StandInModel

NB = "file:///work/analysis.ipynb"
PY = joined_uri(NB, "python")


def cell(i: int) -> str:
    return f"vscode-notebook-cell:/work/analysis.ipynb#W{i}sZmlsZQ%3D%3D"


def opened(texts: Sequence[tuple[str, str]]) -> tuple[NotebookStore, list[str]]:
    store = NotebookStore(DocumentStore())
    uris = [cell(i) for i in range(len(texts))]
    store.open(
        NB, uris, [CellText(u, lang, 1, t) for u, (lang, t) in zip(uris, texts, strict=True)]
    )
    return store, uris


# -- the notebook store ----------------------------------------------------------


def test_cells_are_joined_per_language_with_a_blank_line_between():
    store, _ = opened(
        [("python", "import os"), ("markdown", "# Notes"), ("python", "x = 1\n"), ("python", "")]
    )
    assert store.texts(NB) == {
        PY: ("python", "import os\n\nx = 1\n\n\n"),
        joined_uri(NB, "markdown"): ("markdown", "# Notes"),
    }


ENDINGS = ["a = 1", "b = 2\n", "c\r", "d\r\ne\r\n", "", "\n", "\r", "f\n\ng", "\ny"]


def test_every_cell_line_is_the_same_line_of_the_notebook_text():
    """Whatever a cell ends with (a lone ``\\r`` before the separator's ``\\n`` would
    join two lines) and whatever the next starts with."""
    for seed in range(30):
        rng = random.Random(seed)
        texts = [("python", rng.choice(ENDINGS) + rng.choice(ENDINGS)) for _ in range(5)]
        store, uris = opened(texts)
        joined = Document(PY, "python", 1, store.texts(NB)[PY][1])
        for uri, (_, text) in zip(uris, texts, strict=True):
            alone = Document(uri, "python", 1, text)
            lines = len(alone.line_starts())
            for line in range(lines):
                place = store.place(uri, line, 3)
                assert place is not None and place.uri == PY
                assert joined.line_text(place.line) == alone.line_text(line), (seed, texts)
                assert place.line - place.first_line == line
            # Past the cell's end: its end, never a line of the next cell.
            end = store.place(uri, lines + 5, 0)
            assert end is not None
            offset = joined.offset_at(end.line, end.character)
            start = joined.offset_at(end.first_line, 0)
            assert joined.text[start:offset] == text


def test_positions_outside_a_cell_and_unknown_cells():
    store, uris = opened([("python", "a = 1"), ("python", "b = 2\nc = 3")])
    assert store.place(uris[1], -4, 9) == store.place(uris[1], 0, 0)
    assert store.place("file:///work/other.py", 0, 0) is None
    assert store.place(uris[1], 1, 2).line == 3  # "a = 1", blank, "b = 2", "c = 3"


def test_structure_changes_insert_move_and_remove_cells():
    store, uris = opened([("python", "a"), ("python", "b"), ("python", "c")])
    new = cell(9)
    # A cell inserted between the first two, with its text.
    assert store.change(
        NB, NotebookChange(start=1, inserted=(new,), opened=(CellText(new, "python", 1, "n"),))
    )
    assert store.texts(NB)[PY][1] == "a\n\nn\n\nb\n\nc"
    # The last cell moved to the front (one splice of the list: VS Code's order).
    assert store.change(
        NB, NotebookChange(start=0, deleted=4, inserted=(uris[2], uris[0], new, uris[1]))
    )
    assert store.texts(NB)[PY][1] == "c\n\na\n\nn\n\nb"
    # A cell deleted and its document closed; a splice past the end is clamped.
    assert store.change(NB, NotebookChange(start=1, deleted=1, closed=(uris[0],)))
    assert store.change(NB, NotebookChange(start=99, deleted=99))
    assert store.texts(NB)[PY][1] == "c\n\nn\n\nb"
    assert store.place(uris[0], 0, 0) is None
    # A cell listed without a text is left out until its text comes.
    assert store.change(NB, NotebookChange(start=0, inserted=(cell(7),)))
    assert store.texts(NB)[PY][1] == "c\n\nn\n\nb"
    assert not store.change("file:///work/closed.ipynb", NotebookChange())
    # Another notebook's cell is not closed by this one; a text the list does not
    # hold is in no notebook text, and is forgotten with the notebook.
    other = "file:///work/other.ipynb"
    store.open(other, [cell(5)], [CellText(cell(5), "python", 1, "o")])
    assert store.change(
        NB, NotebookChange(closed=(cell(5),), opened=(CellText(cell(6), "python", 1, "u"),))
    )
    assert store.texts(other)[joined_uri(other, "python")][1] == "o"
    assert store.place(cell(6), 0, 0) is None
    store.close(NB)
    assert store.place(cell(6), 0, 0) is None and store.place(cell(5), 0, 0) is not None
    assert store._cells.get(cell(6)) is None


def test_cell_edits_apply_and_an_edit_of_a_cell_elsewhere_is_dropped():
    store, uris = opened([("python", "x = 1"), ("python", "y = ")])
    edit = CellEdit(uris[1], 2, (TextChange("x + 1", Range(0, 4, 0, 4)),))
    stray = CellEdit("vscode-notebook-cell:/other.ipynb#a", 2, (TextChange("!", None),))
    assert store.change(NB, NotebookChange(edits=(edit, stray)))
    assert store.texts(NB)[PY][1] == "x = 1\n\ny = x + 1"
    store.close(NB)
    assert store.texts(NB) == {} and store.place(uris[0], 0, 0) is None


def test_difference_is_one_edit_that_turns_old_into_new():
    rng = random.Random(3)
    for _ in range(500):
        old = "".join(rng.choice("ab\n\r") for _ in range(rng.randrange(12)))
        new = "".join(rng.choice("ab\n\r") for _ in range(rng.randrange(12)))
        start, end, text = difference(old, new)
        assert old[:start] + text + old[end:] == new
        assert 0 <= start <= end <= len(old)
    # Typing one character in a long text is that one character.
    long = "line\n" * 10_000
    assert difference(long, long[:2000] + "x" + long[2000:]) == (2000, 2000, "x")


# -- the service -------------------------------------------------------------------


class PromptRecorder(StandInModel):
    """The stand-in, keeping the text of the tokens each decode was asked to evaluate."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.evaluated: list[str] = []

    def prefill(self, tokens: Sequence[int]) -> int:
        self.evaluated.append(self.detokenize(list(tokens)))
        return super().prefill(tokens)

    def verify(self, tokens: Sequence[int]) -> Rows:
        self.evaluated.append(self.detokenize(list(tokens)))
        return super().verify(tokens)


def service(model: StandInModel) -> CompletionService:
    settings = Settings(model="standin", debounce_ms=0, max_tokens=12, sources=("lookup",))
    return CompletionService(settings, open_model=lambda spec, **kw: model)


CELLS = [
    ("python", "import os\ndef load_rows(path):\n    return open(path).read()\n"),
    ("markdown", "# Load the data"),
    ("python", "rows = load_"),
    ("python", "print(rows)"),
]


def open_cells(svc: CompletionService) -> list[str]:
    uris = [cell(i) for i in range(len(CELLS))]
    texts = [CellText(u, lang, 1, t) for u, (lang, t) in zip(uris, CELLS, strict=True)]
    svc.open_notebook(NB, 1, uris, texts)
    return uris


def test_a_cell_is_completed_in_its_notebook_text_and_answered_in_its_own_lines():
    async def main():
        model = PromptRecorder(eos_bias=-3.0, fim=True)
        svc = service(model)
        uris = open_cells(svc)
        text = svc.documents.get(PY).text
        assert text == f"{CELLS[0][1]}\n\n{CELLS[2][1]}\n\n{CELLS[3][1]}"
        got = await svc.complete(CompletionRequest(uris[2], 0, len("rows = load_")))
        # The same request in a plain document holding the notebook text.
        plain = service(StandInModel(eos_bias=-3.0, fim=True))
        plain.open_document("file:///work/plain.py", "python", 1, text)
        line = text[: text.index("rows = load_")].count("\n")
        want = await plain.complete(CompletionRequest("file:///work/plain.py", line, 12))
        svc.close()
        plain.close()
        return model.evaluated, got, want, line

    evaluated, got, want, line = asyncio.run(main())
    assert line == 5
    assert got is not None and want is not None and got.text and got.text == want.text
    assert (got.uri, got.line, got.character) == (cell(2), 0, 12)
    # The model saw the cell before it (and the one after, as the suffix), not the markdown.
    seen = "".join(evaluated)
    assert "def load_rows(path):" in seen and "print(rows)" in seen
    assert "# Load the data" not in seen


def test_cell_edits_are_one_edit_of_the_notebook_text_where_the_user_typed():
    svc = service(StandInModel())
    uris = open_cells(svc)
    revision = svc.documents.get(PY).revision
    typed = CellEdit(uris[2], 2, (TextChange("rows(", Range(0, 12, 0, 12)),))
    svc.change_notebook(NB, 2, NotebookChange(edits=(typed,)))
    doc = svc.documents.get(PY)
    assert doc.revision > revision and doc.version == 2
    assert doc.text.endswith("rows = load_rows(\n\nprint(rows)")
    assert doc.text[: doc.edited_at].endswith("load_rows(")
    # A cell of a new language opens its notebook text; removing it closes it.
    sql = cell(8)
    svc.change_notebook(
        NB,
        3,
        NotebookChange(start=4, inserted=(sql,), opened=(CellText(sql, "sql", 1, "select 1"),)),
    )
    assert svc.documents.get(joined_uri(NB, "sql")).text == "select 1"
    svc.change_notebook(NB, 4, NotebookChange(start=4, deleted=1, closed=(sql,)))
    assert joined_uri(NB, "sql") not in svc.documents
    with pytest.raises(KeyError):
        svc.change_notebook("file:///work/not-open.ipynb", 1, NotebookChange())
    svc.close_notebook(NB)
    assert len(svc.documents) == 0
    svc.close()


def _random_text(rng: random.Random) -> str:
    return "".join(
        rng.choice(["a", "b = 1", "\n", "\r\n", "\r", "é", "😀", " "])
        for _ in range(rng.randrange(6))
    )


def test_random_notebook_changes_keep_every_notebook_text_and_place_right():
    """A reference notebook (a list of cells) against the service's, over random
    structure changes, language changes and edits."""
    rng = random.Random(11)
    svc = service(StandInModel())
    reference: list[list[str]] = []  # [uri, language, text]
    svc.open_notebook(NB, 1, [], [])
    for step in range(400):
        op = rng.choice(["insert", "delete", "move", "edit", "edit", "edit", "language"])
        if op == "insert" or not reference:
            at = rng.randrange(len(reference) + 1)
            new = [cell(100 + step), rng.choice(["python", "sql"]), _random_text(rng)]
            reference.insert(at, new)
            change = NotebookChange(
                start=at, inserted=(new[0],), opened=(CellText(new[0], new[1], 1, new[2]),)
            )
        elif op == "delete":
            at = rng.randrange(len(reference))
            gone = reference.pop(at)
            change = NotebookChange(start=at, deleted=1, closed=(gone[0],))
        elif op == "move":
            a, b = sorted(rng.sample(range(len(reference)), 2)) if len(reference) > 1 else (0, 0)
            moved = reference[a : b + 1]
            moved = moved[1:] + moved[:1]
            reference[a : b + 1] = moved
            change = NotebookChange(
                start=a, deleted=len(moved), inserted=tuple(c[0] for c in moved)
            )
        elif op == "language":  # VS Code: the cell removed and put back
            at = rng.randrange(len(reference))
            entry = reference[at]
            entry[1] = "sql" if entry[1] == "python" else "python"
            svc.change_notebook(NB, step, NotebookChange(start=at, deleted=1, closed=(entry[0],)))
            change = NotebookChange(
                start=at, inserted=(entry[0],), opened=(CellText(entry[0], entry[1], 1, entry[2]),)
            )
        else:
            entry = rng.choice(reference)
            doc = Document(entry[0], entry[1], 1, entry[2])
            a, b = sorted(rng.randrange(len(entry[2]) + 1) for _ in range(2))
            typed = _random_text(rng)
            start, end = doc.position_at(a), doc.position_at(b)
            edit = TextChange(typed, Range(*start, *end))
            store = DocumentStore()
            store.open("x", entry[1], 1, entry[2])
            entry[2] = store.change("x", 2, [edit]).text
            change = NotebookChange(edits=(CellEdit(entry[0], step, (edit,)),))
        svc.change_notebook(NB, step, change)
        for language in ("python", "sql"):
            cells = [c for c in reference if c[1] == language]
            doc = svc.documents.get(joined_uri(NB, language))
            if not cells:
                assert doc is None
                continue
            want = "".join(t + ("\r\n\n" if t.endswith("\r") else "\n\n") for _, _, t in cells)
            assert doc is not None and doc.text == want[: -len("\n\n") - want.endswith("\r\n\n")]
        if not reference:
            continue
        entry = rng.choice(reference)
        line = rng.randrange(entry[2].count("\n") + 2)
        place = svc.notebooks.place(entry[0], line, 1)
        alone = Document(entry[0], entry[1], 1, entry[2])
        joined = svc.documents.get(place.uri)
        if line < len(alone.line_starts()):
            assert joined.line_text(place.line) == alone.line_text(line)
    svc.close()


class SlowStandIn(StandInModel):
    """A stand-in whose passes take time: a pre-generation is running when a request comes."""

    def verify(self, tokens: Sequence[int]) -> Rows:
        time.sleep(0.02)
        return super().verify(tokens)


def test_a_cell_moved_while_its_request_waits_is_answered_at_its_own_line():
    """The cell's place was taken before the request waited for the running
    pre-generation: a cell added above it meanwhile moved it, and the answer was
    made for another line of the notebook text (the blank one between cells)."""
    line = "total = add(1, 2)"

    async def main():
        # With FIM tokens: a model that sees "1, 2)" keeps its insertion before it.
        svc = service(SlowStandIn(eos_bias=-3.0, fim=True))
        uris = [cell(0), cell(1)]
        svc.open_notebook(
            NB,
            1,
            uris,
            [
                CellText(uris[0], "python", 1, "def add(a, b):\n    return a + b"),
                CellText(uris[1], "python", 1, line),
            ],
        )
        first = await svc.complete(CompletionRequest(uris[1], 0, 12))
        await asyncio.sleep(0.05)  # its pre-generation runs
        asked = asyncio.ensure_future(svc.complete(CompletionRequest(uris[1], 0, 12)))
        await asyncio.sleep(0)  # the request waits for the pre-generation
        above = cell(7)
        svc.change_notebook(
            NB,
            2,
            NotebookChange(
                start=0, inserted=(above,), opened=(CellText(above, "python", 1, "import os\n"),)
            ),
        )
        got = await asyncio.wait_for(asked, 30)
        svc.close()
        return first, got

    first, got = asyncio.run(main())
    for answer in (first, got):
        assert answer is not None and answer.text
        assert (answer.uri, answer.line, answer.character) == (cell(1), 0, 12)
        assert answer.line_suffix == "1, 2)" and answer.line_end_character == len(line)


def test_a_cell_closed_and_opened_again_in_one_change_stays_open_and_cells_stay_in_one_notebook():
    store, uris = opened([("python", "a"), ("python", "b")])
    again = NotebookChange(
        start=1,
        deleted=1,
        inserted=(uris[1],),
        opened=(CellText(uris[1], "sql", 1, "b"),),
        closed=(uris[1],),
    )
    assert store.change(NB, again)
    assert store.texts(NB) == {PY: ("python", "a"), joined_uri(NB, "sql"): ("sql", "b")}
    # Another notebook naming a cell of this one does not take it (cell URIs are unique).
    other = "file:///work/other.ipynb"
    store.open(other, [uris[0]], [CellText(uris[0], "python", 1, "stolen")])
    assert store.texts(other) == {}
    assert store.texts(NB)[PY] == ("python", "a") and store.place(uris[0], 0, 0).uri == PY


def test_a_document_of_a_notebook_texts_name_does_not_replace_or_close_it():
    """A plain ``didOpen``/``didChange``/``didClose`` under a notebook text's URI
    replaced or removed the notebook's text: its cells were answered from that
    document, or not at all, until the notebook's next edit."""
    svc = service(StandInModel())
    open_cells(svc)
    text = svc.documents.get(PY).text
    svc.open_document(PY, "python", 9, "hijacked = True")
    with pytest.raises(KeyError):
        svc.change_document(PY, 10, [TextChange("x", None)])
    svc.close_document(PY)
    assert svc.documents.get(PY).text == text
    assert svc.notebooks.place(cell(2), 0, 0).uri == PY
    svc.close_notebook(NB)  # the notebook's own close does close it
    assert PY not in svc.documents
    svc.open_document(PY, "python", 1, "a file of that name, once no notebook holds it")
    assert svc.documents.get(PY).version == 1
    svc.close()

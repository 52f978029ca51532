"""A request naming the completion menu's selected item is answered as if the item were
accepted (``request.Asked``), on the stand-in model, whose output depends only on the
text: the answer must equal a plain request in a document that holds the item."""

from __future__ import annotations

import asyncio
import random

from tests.completion.test_prewarm import wait_for
from tests.completion.test_service import SlowStandIn

from structspec.completion.documents import UTF16, Document, Range, TextChange
from structspec.completion.notebooks import CellText, joined_uri
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.completion.types import SelectedItem, Suggestion
from structspec.config import Settings
from structspec.model.standin import StandInModel

URI = "file:///work/paths.py"
PLAIN = "file:///work/plain.py"
#: The cursor after "os.pa", the menu's selected item "path" over "pa" (columns 10-12).
TEXT = "import os\nroot = os.pa\nprint(root)\n"
ITEM = SelectedItem(10, 12, "path")
APPLIED = "import os\nroot = os.path\nprint(root)\n"


def service(max_tokens: int = 12) -> CompletionService:
    settings = Settings(model="standin", debounce_ms=0, max_tokens=max_tokens, sources=("lookup",))
    return CompletionService(
        settings, open_model=lambda spec, **kw: StandInModel(eos_bias=-30.0, fim=True)
    )


async def plain_answer(
    text: str, line: int, character: int, max_tokens: int = 12
) -> Suggestion | None:
    """What a server suggests at a cursor of a document holding ``text``."""
    svc = service(max_tokens)
    svc.open_document(PLAIN, "python", 1, text)
    try:
        return await svc.complete(CompletionRequest(PLAIN, line, character))
    finally:
        svc.close()


def test_the_answer_is_the_one_after_the_item_accepted_and_the_document_is_unchanged():
    async def main():
        svc = service()
        svc.open_document(URI, "python", 1, TEXT)
        got = await svc.complete(CompletionRequest(URI, 1, 12, selected=ITEM))
        at_cursor = await svc.complete(CompletionRequest(URI, 1, 12))
        text = svc.documents.get(URI).text
        svc.close()
        want = await plain_answer(APPLIED, 1, 14)
        plain = await plain_answer(TEXT, 1, 12)
        return got, want, at_cursor, plain, text

    got, want, at_cursor, plain, text = asyncio.run(main())
    assert want is not None and want.text.strip()
    # The item, then what the model writes after it, over the item's range.
    assert got is not None and got.text == "path" + want.text
    assert (got.uri, got.line, got.character, got.replaces, got.line_suffix) == (
        URI,
        1,
        10,
        2,
        "",
    )
    assert text == TEXT  # the item is not applied to the document
    # Without the item, the same server answers at the cursor as before.
    assert at_cursor is not None and plain is not None and at_cursor.text == plain.text


def test_an_item_replacing_text_after_the_cursor_or_before_the_word():
    async def main():
        text = "import os\nroot = os.pa(x)\n"
        svc = service()
        svc.open_document(URI, "python", 1, text)
        # Replace mode: "pa(" is replaced by "path(", the cursor after "pa".
        replaced = await svc.complete(
            CompletionRequest(URI, 1, 12, selected=SelectedItem(10, 13, "path("))
        )
        # VS Code's ".log" over "." when the cursor follows the dot.
        dotted = await svc.complete(
            CompletionRequest(URI, 1, 10, selected=SelectedItem(9, 10, ".sep"))
        )
        svc.close()
        want_replaced = await plain_answer("import os\nroot = os.path(x)\n", 1, 15)
        want_dotted = await plain_answer("import os\nroot = os.seppa(x)\n", 1, 13)
        return replaced, dotted, want_replaced, want_dotted

    replaced, dotted, want_replaced, want_dotted = asyncio.run(main())
    assert replaced is not None and want_replaced is not None and want_replaced.text
    assert (replaced.text, replaced.character, replaced.replaces, replaced.line_suffix) == (
        "path(" + want_replaced.text,
        10,
        3,
        "x)",
    )
    assert dotted is not None and want_dotted is not None and want_dotted.text
    assert (dotted.text, dotted.character, dotted.replaces) == (".sep" + want_dotted.text, 9, 1)


def test_accepting_the_item_then_types_through_the_suggestion_and_what_was_written_past_it():
    def seeded() -> CompletionService:  # seed 8 writes two short lines past its answer
        settings = Settings(model="standin", debounce_ms=0, max_tokens=64, sources=("lookup",))
        model = StandInModel(seed=8, eos_bias=-30.0)
        return CompletionService(settings, open_model=lambda spec, **kw: model)

    async def main():
        svc = seeded()
        svc.open_document(URI, "python", 1, TEXT)
        got = await svc.complete(CompletionRequest(URI, 1, 12, selected=ITEM))
        assert got is not None and got.text
        session = svc._sessions[URI]
        # Pre-generation writes past it, in the text with the item applied.
        await wait_for(
            lambda: (
                (p := session.pending) is not None
                and p.continuation is not None
                and p.continuation.lines_after(len(p.text)) >= 2
            ),
            30,
        )
        # The user accepts the item: the document now holds it ...
        svc.change_document(URI, 2, [TextChange("path", Range(1, 10, 1, 12))])
        typed = await svc.complete(CompletionRequest(URI, 1, 14))
        # ... then the suggestion, and presses Enter.
        rest = got.text.removeprefix("path")
        svc.change_document(URI, 3, [TextChange(rest + "\n", Range(1, 14, 1, 14))])
        after = await svc.complete(CompletionRequest(URI, 2, 0))
        text = svc.documents.get(URI).text
        served = svc.stats.served_from_pregeneration
        svc.close()
        fresh = seeded()
        fresh.open_document(PLAIN, "python", 1, text)
        want = await fresh.complete(CompletionRequest(PLAIN, 2, 0))
        fresh.close()
        return got, typed, after, want, served

    got, typed, after, want, served = asyncio.run(main())
    assert typed is not None and (typed.source, "path" + typed.text) == ("cache", got.text)
    assert want is not None and want.text
    assert after is not None and (after.source, after.text) == ("cache", want.text)
    assert served == 1


def test_an_edit_while_it_runs_makes_it_stale_but_the_item_alone_does_not():
    async def main():
        svc = service()
        svc.open_document(URI, "python", 1, TEXT)
        task = asyncio.ensure_future(svc.complete(CompletionRequest(URI, 1, 12, selected=ITEM)))
        await asyncio.sleep(0)
        svc.change_document(URI, 2, [TextChange("#", Range(0, 0, 0, 0))])
        stale = await task
        reasons = dict(svc.stats.empty_reasons)
        svc.close()
        return stale, reasons

    stale, reasons = asyncio.run(main())
    assert stale is None and reasons.get("stale") == 1


def test_typing_on_under_the_same_item_shares_the_generation_in_flight():
    """``os.p`` then ``os.pa`` with ``path`` selected both ask about ``os.path``."""

    async def main():
        settings = Settings(model="standin", debounce_ms=0, max_tokens=12, sources=("lookup",))
        model = SlowStandIn(delay=0.02, eos_bias=-30.0, fim=True)
        svc = CompletionService(settings, open_model=lambda spec, **kw: model)
        made = []
        make_job = svc._requests._make_job

        def counted(*args, **kw):
            made.append(args[2])  # the text asked about
            return make_job(*args, **kw)

        svc._requests._make_job = counted
        svc.open_document(URI, "python", 1, TEXT.replace("os.pa", "os.p"))
        first = asyncio.ensure_future(
            svc.complete(CompletionRequest(URI, 1, 11, selected=SelectedItem(10, 11, "path")))
        )
        await wait_for(lambda: made, 30)
        svc.change_document(URI, 2, [TextChange("a", Range(1, 11, 1, 11))])
        second = await svc.complete(CompletionRequest(URI, 1, 12, selected=ITEM))
        stale = await first
        svc.close()
        return made, second, stale

    made, second, stale = asyncio.run(main())
    assert made == [APPLIED]  # one generation for both
    assert second is not None and second.text.startswith("path") and second.character == 10
    assert stale is None  # its document changed: the newer request answers


def test_a_notebook_cell_request_with_a_selected_item():
    async def main():
        svc = service()
        notebook = "file:///work/analysis.ipynb"
        cells = [f"vscode-notebook-cell:/work/analysis.ipynb#c{i}" for i in range(2)]
        texts = [
            CellText(cells[0], "python", 1, "import os"),
            CellText(cells[1], "python", 1, "root = os.pa"),
        ]
        svc.open_notebook(notebook, 1, cells, texts)
        got = await svc.complete(CompletionRequest(cells[1], 0, 12, selected=ITEM))
        joined = svc.documents.get(joined_uri(notebook, "python")).text
        svc.close()
        want = await plain_answer(joined.replace("os.pa", "os.path"), 2, 14)
        return got, want

    got, want = asyncio.run(main())
    assert want is not None and want.text
    assert got is not None and (got.line, got.character, got.text) == (0, 10, "path" + want.text)


def test_the_edit_an_answer_names_leaves_the_text_the_model_was_asked_about():
    """Random items, some past a line's end or the document's, or ending inside an emoji:
    the answer's range, with its text, turns the document into the text with the item
    applied and the suggestion after it (what a plain request there answers)."""
    rng = random.Random(11)

    async def main():
        checked = 0
        for _ in range(40):
            lines = [
                "".join(rng.choice("ab_ .😀é") for _ in range(rng.randrange(8))) for _ in "xyz"
            ]
            base = "\n".join(lines)
            line = rng.randrange(len(lines) + 1)  # the last one past the document
            units = len(lines[line].encode("utf-16-le")) // 2 if line < len(lines) else 0
            start = rng.randint(0, units + 1)
            cursor = rng.randint(start, start + 2)
            item = SelectedItem(
                start, rng.randint(cursor, cursor + 2), rng.choice(["ab", "x😀", ""])
            )
            svc = service()
            svc.open_document(URI, "python", 1, base)
            got = await svc.complete(CompletionRequest(URI, line, cursor, selected=item))
            svc.close()
            if got is None:
                continue
            doc = Document(URI, "python", 1, base)
            at = doc.offset_at(got.line, got.character, UTF16)
            end = doc.offset_at(got.line, got.character + got.replaces, UTF16)
            assert got.text.startswith(item.text)
            asked = base[:at] + item.text + base[end:]
            where = Document(PLAIN, "python", 1, asked).position_at(at + len(item.text), UTF16)
            want = await plain_answer(asked, *where)
            assert want is not None and got.text == item.text + want.text, (base, item, line)
            checked += 1
        return checked

    assert asyncio.run(main()) >= 30

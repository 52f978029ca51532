"""A cursor place a request names (``documentHighlight``) pre-warms as a cursor report does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from tests.completion.test_prewarm import make_service, wait_for

from structspec.completion.documents import Range, TextChange
from structspec.completion.service import CompletionService
from structspec.model.standin import StandInModel

URI = "file:///work/named.py"
TEXT = "".join(f"row_{i} = {i}\n" for i in range(600))


@pytest.fixture
def opened() -> Iterator[tuple[CompletionService, list[tuple[str, int | None]]]]:
    """A service with ``TEXT`` open, and the pre-warms it schedules from then on: (uri, offset)."""
    svc = make_service(StandInModel(seed=1))
    try:
        svc.open_document(URI, "python", 1, TEXT)
        calls: list[tuple[str, int | None]] = []

        def schedule(uri: str, offset: int | None = None, *, rested: bool = False) -> None:
            calls.append((uri, offset))

        svc._background.schedule_prewarm = schedule  # type: ignore[method-assign]
        yield svc, calls
    finally:
        svc.close()


@pytest.mark.parametrize("tell", ["cursor_moved", "cursor_named"])
def test_the_cursors_place_is_pre_warmed_with_the_prompt_there(tell: str) -> None:
    """Not the document as opened: the prompt of a request at the cursor, all but its last token.

    The cursor reported (``structspec/didMoveCursor``) or named by a request
    (``documentHighlight``). (The document is longer than the context: one that
    fits is then evaluated from its start to its end, ``test_prewarm.py``.)
    """
    offset = TEXT.index("row_500") + 4

    async def scenario() -> str:
        model = StandInModel(seed=1)
        svc = make_service(model, window_tokens=300)
        svc.open_document(URI, "python", 1, TEXT)
        getattr(svc, tell)(URI, 500, 4)
        await wait_for(lambda: svc.stats.prewarmed >= 1)
        cached = model.detokenize(list(model.cached_tokens))
        svc.close()
        return cached

    assert asyncio.run(scenario()).endswith(TEXT[offset - 200 : offset - 1])


def test_the_same_place_named_again_is_warmed_once_until_the_text_changes(opened) -> None:
    svc, calls = opened
    svc.cursor_named(URI, 3, 2)
    svc.cursor_named(URI, 3, 2)  # asked again after a pause at the same place
    assert calls == [(URI, TEXT.index("row_3") + 2)]
    svc.change_document(URI, 2, [TextChange("x", Range(0, 0, 0, 0))])
    svc.cursor_named(URI, 3, 2)  # the prompt there changed: warm it again
    assert calls[-1] == (URI, TEXT.index("row_3") + 3)
    assert len(calls) == 3  # the edit's own place, then the named one


def test_a_client_that_reports_the_cursor_is_believed_over_named_places(opened) -> None:
    svc, calls = opened
    svc.cursor_moved(URI, 10, 0)
    svc.cursor_named(URI, 20, 0)
    assert calls == [(URI, TEXT.index("row_10"))]


def test_a_named_place_in_a_document_that_is_not_open_is_ignored(opened) -> None:
    svc, calls = opened
    svc.cursor_named("file:///work/closed.py", 0, 0)
    assert calls == []

"""In the middle of a line a model that did not see the code after the cursor (no FIM
tokens) is shown only where its line joins that code (``suggest.clean``, ``sees_rest``).

On the stand-in, whose output without FIM tokens depends only on the text before the
cursor, so the model's own line at a cursor is known from the same cursor with nothing
after it."""

from __future__ import annotations

import asyncio

from structspec.completion.service import CompletionRequest, CompletionService
from structspec.completion.suggest import CursorContext
from structspec.completion.types import Suggestion
from structspec.config import Settings
from structspec.model.standin import StandInModel

URI = "file:///work/mid.py"
BEFORE = "value = "
#: Code after the cursor that the stand-in's line at ``BEFORE`` does not end with.
OTHER = "compute(items)"


def service(fim: bool) -> CompletionService:
    settings = Settings(model="standin", debounce_ms=0, max_tokens=12, sources=("lookup",))
    return CompletionService(
        settings, open_model=lambda spec, **kw: StandInModel(eos_bias=-30.0, fim=fim)
    )


async def answer(svc: CompletionService, rest: str, version: int) -> Suggestion | None:
    """The suggestion at the end of ``BEFORE`` on a line that goes on with ``rest``."""
    svc.close_document(URI)
    svc.open_document(URI, "python", version, BEFORE + rest + "\n")
    return await svc.complete(CompletionRequest(URI, 0, len(BEFORE)))


def joined_split(line: str) -> int:
    """A place in the model's ``line`` whose rest is code that starts with no space."""
    for i in range(1, len(line)):
        tail = line[i:]
        if not tail[0].isspace() and CursorContext.at(BEFORE + tail, len(BEFORE)).code_follows:
            return i
    raise AssertionError(f"no code to split {line!r} at")


def test_a_model_without_fim_is_shown_only_where_its_line_joins_the_code_after_the_cursor():
    async def main():
        svc = service(fim=False)
        try:
            own = await answer(svc, "", 1)  # nothing after the cursor: the model's line
            assert own is not None and own.text.strip() and "\n" not in own.text
            assert not own.text.endswith(OTHER)
            past = await answer(svc, OTHER, 2)
            i = joined_split(own.text)
            joined = await answer(svc, own.text[i:], 3)
            continuation = svc._sessions[URI].pending.continuation  # type: ignore[union-attr]
            return own.text, past, i, joined, continuation
        finally:
            svc.close()

    line, past, i, joined, continuation = asyncio.run(main())
    assert past is None  # it would have pushed OTHER right
    assert joined is not None and joined.text == line[:i]
    assert joined.line_suffix == line[i:]
    assert continuation is not None and continuation.sees_rest is False


def test_a_fim_model_keeps_the_insertion_it_chose_with_the_code_in_view():
    async def main():
        svc = service(fim=True)
        try:
            return await answer(svc, OTHER, 1)
        finally:
            svc.close()

    got = asyncio.run(main())
    assert got is not None and got.text.strip()
    assert not got.text.endswith(OTHER) and got.line_suffix == OTHER
    assert got.stats is not None

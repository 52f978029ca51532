"""Unit tests of the editor-independent completion logic (no subprocess, stand-in model)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from tests.completion.test_prewarm import wait_for

from structspec.completion.cache import PendingSuggestion
from structspec.completion.documents import (
    UTF8,
    UTF16,
    UTF32,
    Document,
    DocumentStore,
    Range,
    TextChange,
)
from structspec.completion.host import KV_SLOTS
from structspec.completion.jobs import ADOPT_GRACE_S
from structspec.completion.prompt import PromptBuilder, header_for, sanitize
from structspec.completion.service import (
    CompletionRequest,
    CompletionService,
    Status,
    draft_language,
)
from structspec.completion.suggest import BLOCK, LINE, CursorContext, clean, cut_block
from structspec.config import Settings
from structspec.model.base import FimTokens, ModelError, Rows
from structspec.model.standin import StandInModel

# -- documents ---------------------------------------------------------------


def test_positions_in_every_encoding():
    doc = Document("u", "python", 1, "a😀b\r\nxé\n")
    # 😀 is 2 UTF-16 units, 4 UTF-8 bytes, 1 code point.
    assert doc.offset_at(0, 3, UTF16) == 2
    assert doc.offset_at(0, 5, UTF8) == 2
    assert doc.offset_at(0, 2, UTF32) == 2
    assert doc.offset_at(0, 2, UTF16) == 2  # inside the surrogate pair: next character
    assert doc.line_text(0) == "a😀b"
    assert doc.position_at(doc.text.index("é"), UTF16) == (1, 1)
    assert doc.offset_at(1, 99, UTF16) == doc.text.index("\n", 5)  # clamped to the line end
    assert doc.offset_at(50, 0) == len(doc.text)  # past the last line: the end


def test_incremental_edits_clamped_and_ordered():
    store = DocumentStore()
    store.open("u", "python", 1, "hello\nworld\n")
    store.change("u", 2, [TextChange("HELLO", Range(0, 0, 0, 5))])
    assert store.get("u").text == "HELLO\nworld\n"
    store.change("u", 3, [TextChange("!", Range(1, 99, 1, 99))])  # past the line end
    assert store.get("u").text == "HELLO\nworld!\n"
    store.change("u", 4, [TextChange("", Range(1, 0, 0, 5))])  # reversed range
    assert store.get("u").text == "HELLOworld!\n"
    store.change("u", 5, [TextChange("new")])
    assert store.get("u").text == "new" and store.get("u").version == 5


# -- prompts -------------------------------------------------------------------


class FimStandIn(StandInModel):
    def fim_tokens(self) -> FimTokens | None:
        return FimTokens(prefix=self.n_vocab + 1, suffix=self.n_vocab + 2, middle=self.n_vocab + 3)


def test_prompt_is_stable_while_typing():
    model = StandInModel(n_ctx=512)
    builder = PromptBuilder(model)
    text = "".join(f"value_{i} = compute({i})\n" for i in range(200))
    prompts = []
    cut = None
    for extra in ("r", "re", "res", "resu", "resul", "result"):
        doc = text + extra
        p = builder.build(doc, len(doc), uri="file:///a.py", language="python", cut_hint=cut)
        cut = p.cut
        prompts.append(p)
    assert len({p.cut for p in prompts}) == 1  # the start did not move
    assert all(p.tokens[:-6] == prompts[0].tokens[:-1][: len(p.tokens) - 6] for p in prompts)
    assert len(prompts[-1].tokens) < 512 - 128
    assert text[prompts[0].cut - 1] == "\n"  # the cut is a line start


def test_prompt_cut_jumps_when_the_window_overflows():
    model = StandInModel(n_ctx=512)
    builder = PromptBuilder(model)
    text = "".join(f"v{i} = f({i})\n" for i in range(400))
    first = builder.build(text, 2000, cut_hint=None, max_tokens=64)
    same = builder.build(text, 2010, cut_hint=first.cut, max_tokens=64)
    assert same.cut == first.cut
    later = builder.build(text, 3500, cut_hint=first.cut, max_tokens=64)
    assert later.cut > first.cut
    assert len(later.tokens) <= 512 - 64 - 16


def test_fim_prompt_order_prefix_suffix_middle_then_the_line():
    model = FimStandIn(n_ctx=512)
    p = PromptBuilder(model).build("def f(x):\n    return \n\nprint(f(2))\n", 21)
    fim = model.fim_tokens()
    assert fim is not None and p.fim
    assert p.tokens[1] == fim.prefix
    suffix_at, middle_at = p.tokens.index(fim.suffix), p.tokens.index(fim.middle)
    assert model.detokenize(p.tokens[2:suffix_at]) == "def f(x):\n"
    assert model.detokenize(p.tokens[suffix_at + 1 : middle_at]).startswith("\n\nprint(f(2))")
    # The cursor's line before the cursor follows the middle token: the generated text goes last.
    assert model.detokenize(p.tokens[middle_at + 1 :]) == "    return "
    assert p.line == len(p.tokens) - middle_at - 1 and p.insert_at == len(p.tokens)


def test_typing_on_a_fim_line_appends_to_the_prompt_and_a_new_line_moves_the_window_end():
    model = FimStandIn(n_ctx=512)
    builder = PromptBuilder(model)
    text = "".join(f"v{i} = f({i})\n" for i in range(20)) + "total = \n\nprint(total)\n"
    offset = text.index("total = ") + len("total = ")
    before = builder.build(text, offset)
    typed = text[:offset] + "v1" + text[offset:]
    after = builder.build(typed, offset + 2, cut_hint=before.cut)
    # Only the typed characters are new: the window, the suffix and the FIM tokens are kept.
    assert after.tokens[: len(before.tokens) - 1] == before.tokens[:-1]
    assert model.detokenize(after.tokens[len(before.tokens) - 1 :]).endswith("v1")
    newline = typed[: offset + 2] + "\n" + typed[offset + 2 :]
    next_line = builder.build(newline, offset + 3, cut_hint=before.cut)
    fim = model.fim_tokens()
    assert fim is not None and next_line.tokens[-1] == fim.middle and next_line.line == 0
    window = next_line.tokens[2 : next_line.tokens.index(fim.suffix)]
    assert model.detokenize(window).endswith("total = v1\n")


def test_a_fim_line_longer_than_half_the_window_stays_in_the_window():
    model = FimStandIn(n_ctx=512)
    text = "x = [" + ", ".join(str(i) for i in range(300)) + "\n"
    p = PromptBuilder(model).build(text, len(text) - 1, max_tokens=64)
    fim = model.fim_tokens()
    assert fim is not None and p.line == 0 and p.tokens[-1] == fim.middle
    assert p.insert_at == p.tokens.index(fim.suffix)


def test_header_and_sanitize():
    assert header_for("file:///home/u/my%20proj/app.py", "python") == "# Path: app.py\n"
    assert header_for("file:///x/main.go", "go") == "// Path: main.go\n"
    assert header_for("file:///x/notes.txt", "plaintext") == ""
    assert header_for("file://[x/y.py", "python") == "# Path: y.py\n"  # malformed: no crash
    assert sanitize("a\x00b\udcff") == "ab?"


# -- what to suggest ------------------------------------------------------------


@pytest.mark.parametrize("br", ["\n", "\r\n", "\r"])
def test_the_cursors_line_ends_at_every_line_break_lsp_knows(br: str) -> None:
    """With lone CR breaks the rest of the document was read as the cursor's line: an
    accepted suggestion (which replaces the line's rest) wrote the next lines twice."""
    text = br.join(["def f(a):", "", "    x = a + b", "    return x", ""])
    ctx = CursorContext.at(text, text.index("a + ") + 4)
    assert (ctx.line_prefix, ctx.line_suffix, ctx.previous_line) == (
        "    x = a + ",
        "b",
        "def f(a):",
    )
    assert ctx.mode == LINE


def test_modes():
    assert CursorContext.at("x = foo(", 8).mode == LINE
    assert CursorContext.at("def f():\n    ", 13).mode == BLOCK
    assert CursorContext.at("def f():", 8).mode == BLOCK
    assert CursorContext.at("a = 1\n", 6).mode == LINE
    assert CursorContext.at("if x {\n  \n}", 9).mode == BLOCK
    assert CursorContext.at("# note:\n", 8).mode == LINE  # a comment is not an opener
    assert CursorContext.at("f(a, )", 5).mode == LINE


def test_block_stops_at_dedent():
    ctx = CursorContext.at("def f(x):\n    ", 14)
    text, cut = cut_block("y = x + 1\n    return y\n\nprint(f(1))\n", ctx)
    assert cut and text == "y = x + 1\n    return y\n"
    ctx = CursorContext.at("def f(x):", 9)
    text, cut = cut_block("\n    return x\nz = 1", ctx)
    assert cut and text == "\n    return x"
    text, cut = cut_block("\nz = 1", ctx)  # not indented below the opener: nothing
    assert cut and clean(text, ctx, BLOCK) is None


def test_clean():
    mid = CursorContext.at("print(x)", 7)  # cursor before ")"
    assert clean(", y)", mid, LINE) == ", y"
    assert clean("   \n", mid, LINE) is None
    assert clean("a = 1   \nb", CursorContext.at("", 0), LINE) == "a = 1"
    nxt = CursorContext.at("def f():\n    \n    return 1\n", 13)
    assert clean("x = 2\n    return 1\n", nxt, BLOCK) == "x = 2"
    assert clean(")", mid, LINE) is None  # only repeats what follows


def test_typing_through_cache():
    text = "x = "
    entry = PendingSuggestion.at("s1", text, 4, "compute(1, 2)")
    assert entry.rest_at("x = comp", 8) == "ute(1, 2)"
    assert entry.rest_at("x = ", 4) == "compute(1, 2)"
    assert entry.rest_at("x = cx", 6) is None  # typed something else
    assert entry.rest_at("y = comp", 8) is None  # text before changed
    assert entry.rest_at("x = compute(1, 2)", 17) is None  # all typed


# -- the service ----------------------------------------------------------------


class SlowStandIn(StandInModel):
    """A stand-in whose verification passes take time, so requests overlap."""

    def __init__(self, delay: float = 0.01, **kw):
        super().__init__(**kw)
        self.delay = delay
        self.prefills: list[tuple[int, int]] = []

    def prefill(self, tokens: Sequence[int]) -> int:
        reused = super().prefill(tokens)
        self.prefills.append((len(tokens), reused))
        return reused

    def verify(self, tokens: Sequence[int]) -> Rows:
        time.sleep(self.delay)
        return super().verify(tokens)


def make_service(standin: StandInModel | None = None, **settings) -> tuple[CompletionService, list]:
    statuses: list[Status] = []
    messages: list[tuple[str, str]] = []
    opened = standin or StandInModel(eos_bias=-3.0)

    def open_model(spec: str, **kw) -> StandInModel:
        if spec == "broken":
            raise ModelError("not a GGUF file")
        return opened

    base = dict(model="standin", debounce_ms=0, max_tokens=32, sources=("lookup",))
    base.update(settings)
    svc = CompletionService(
        Settings(**base),
        on_status=statuses.append,
        on_message=lambda level, text: messages.append((level, text)),
        open_model=open_model,
    )
    return svc, [statuses, messages]


def run(coro):
    return asyncio.run(coro)


def test_new_request_cancels_the_one_in_flight():
    async def scenario():
        svc, _ = make_service(SlowStandIn(delay=0.02, eos_bias=-30.0), max_tokens=200)
        text = "a = 1\nb = 2\nc = "
        svc.open_document("u", "python", 1, text)
        first = asyncio.ensure_future(svc.complete(CompletionRequest("u", 2, 4)))
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(svc.complete(CompletionRequest("u", 2, 3)))
        a, b = await first, await second
        svc.close()
        return a, b

    a, b = run(scenario())
    assert a is None  # superseded
    assert b is None or b.text


def test_cancelled_task_stops_the_generation():
    """Once ``ADOPT_GRACE_S`` has passed without a request that agrees with it."""

    async def scenario():
        model = SlowStandIn(delay=0.02, eos_bias=-30.0)
        # A generation that would go on for seconds (no latency budget cuts it).
        svc, _ = make_service(model, max_tokens=400, max_generation_ms=60_000)
        svc.open_document("u", "python", 1, "x = ")
        task = asyncio.ensure_future(svc.complete(CompletionRequest("u", 0, 4)))
        await asyncio.sleep(0.2)
        job = svc._sessions["u"].job
        assert job is not None  # still generating
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(ADOPT_GRACE_S)
        await wait_for(job.cancelled)  # no request came to adopt it
        calls = model.verify_calls
        await asyncio.sleep(0.2)
        svc.close()
        return calls, model.verify_calls, svc.stats.cancelled

    before, after, cancelled = run(scenario())
    assert after - before <= 1  # at most the pass in progress finished
    assert cancelled == 1


def test_prefix_reuse_and_alternating_documents():
    async def scenario():
        model = SlowStandIn(delay=0.0)
        svc, _ = make_service(model)
        a = "".join(f"alpha_{i} = {i}\n" for i in range(50)) + "z = "
        svc.open_document("a", "python", 1, a)
        r1 = await svc.complete(CompletionRequest("a", 50, 4))
        svc._sessions["a"].pending = None
        r2 = await svc.complete(CompletionRequest("a", 50, 4))
        svc.close()
        return r1, r2

    r1, r2 = run(scenario())
    assert r1 is not None and r2 is not None and r2.stats is not None
    assert r2.stats.reused_tokens >= r2.stats.prompt_tokens - 2


def test_other_open_documents_feed_the_lookup_corpus():
    async def scenario():
        svc, _ = make_service()
        svc.open_document("other", "python", 1, "def helper(value):\n    return value * 2\n")
        svc.open_document("main", "python", 1, "x = helper(")
        seen: list = []
        real_stream = None

        def spy(*args, **kwargs):
            seen.append(kwargs.get("corpus"))
            return real_stream(*args, **kwargs)

        await svc.complete(CompletionRequest("main", 0, 11))  # loads the engine
        engine = svc._worker.host.engine
        model = svc._worker.host.model
        real_stream = engine.stream
        engine.stream = spy
        svc._sessions["main"].pending = None
        await svc.complete(CompletionRequest("main", 0, 11))
        svc.close()
        return seen, model

    seen, model = run(scenario())
    corpus = seen[0]
    assert any(model.detokenize(seq).startswith("def helper(value)") for seq in corpus)


@pytest.mark.parametrize(
    ("uri", "language_id", "text", "expected"),
    [
        ("file:///a/b.txt", "python", "", "python"),  # the editor's id, when known
        ("file:///a/main.py", "plaintext", "", "python"),  # the file name
        ("file:///a/run", "plaintext", "#!/bin/bash\necho hi\n", "shellscript"),  # the #! line
        ("untitled:Untitled-1", "", '{"a": [1, 2]}', "json"),  # the text
        ("file:///a/notes", "plaintext", "", "plaintext"),  # nothing known: as the editor said
        ("file://[bad/x.py", "plaintext", "", "python"),  # a malformed URI: its name still says
    ],
)
def test_draft_language_falls_back_to_the_file_and_its_text(uri, language_id, text, expected):
    assert draft_language(uri, language_id, text) == expected


def test_sources_see_the_detected_language():
    async def scenario():
        svc, _ = make_service()
        svc.open_document("file:///w/tool.py", "plaintext", 1, "import os\nx = os.")
        seen: list = []
        await svc.complete(CompletionRequest("file:///w/tool.py", 1, 7))  # loads the engine
        engine = svc._worker.host.engine
        real_stream = engine.stream

        def spy(*args, **kwargs):
            seen.append(kwargs.get("language"))
            return real_stream(*args, **kwargs)

        engine.stream = spy
        svc._sessions["file:///w/tool.py"].pending = None
        await svc.complete(CompletionRequest("file:///w/tool.py", 1, 7))
        svc.close()
        return seen

    assert run(scenario()) == ["python"]


def test_model_that_fails_to_load_reports_and_recovers():
    async def scenario():
        svc, (statuses, messages) = make_service(model="broken")
        svc.start()
        svc.open_document("u", "python", 1, "x = ")
        r = await svc.complete(CompletionRequest("u", 0, 4))
        await asyncio.sleep(0.05)
        state_after_failure = svc.status().state
        svc.configure(Settings(model="standin", debounce_ms=0, sources=("lookup",)))
        r2 = await svc.complete(CompletionRequest("u", 0, 4))
        await asyncio.sleep(0.05)
        svc.close()
        return r, state_after_failure, messages, r2, svc.status().state

    r, state, messages, r2, final = run(scenario())
    assert r is None and state == "error"
    assert any(level == "error" and "GGUF" in text for level, text in messages)
    assert r2 is not None and final == "idle"


def test_same_cursor_requests_share_one_generation():
    """An editor asking for inline and menu completion at once gets one generation."""

    async def scenario():
        model = SlowStandIn(delay=0.005)
        svc, _ = make_service(model)
        svc.open_document("u", "python", 1, "a = 1\nb = ")
        r1, r2 = await asyncio.gather(
            svc.complete(CompletionRequest("u", 1, 4)), svc.complete(CompletionRequest("u", 1, 4))
        )
        svc.close()
        return r1, r2, len(model.prefills), svc.stats

    r1, r2, prefills, stats = run(scenario())
    assert r1 is not None and r2 is not None and r1.id == r2.id and r1.text == r2.text
    # One generation (pre-generation may have started after it: one more prefill).
    assert prefills <= 2 and stats.shown == 1 and stats.requests == 2


# -- settings ---------------------------------------------------------------------


def counting_service(gate: threading.Event | None = None, **settings):
    """A service whose model opener and engine loader count their calls.

    ``gate``: each model opening waits for it (at most 30 s), so that the
    settings a test changes meanwhile queue behind the load in progress.
    """
    from structspec.runtime import load_available_engine

    calls = {"open": 0, "engine": 0}
    messages: list[tuple[str, str]] = []

    def open_model(spec: str, **kw) -> StandInModel:
        calls["open"] += 1
        if gate is not None:
            gate.wait(30)
        return StandInModel(eos_bias=-3.0)

    def load_engine(settings, **kw):
        calls["engine"] += 1
        return load_available_engine(settings, **kw)

    base = dict(model="standin", debounce_ms=0, max_tokens=16, sources=("lookup",))
    base.update(settings)
    svc = CompletionService(
        Settings(**base),
        on_message=lambda level, text: messages.append((level, text)),
        open_model=open_model,
        load_engine=load_engine,
    )
    return svc, calls, messages


def test_settings_that_do_not_shape_the_model_never_reload_it():
    async def scenario():
        svc, calls, _ = counting_service()
        svc.configure(svc.settings)  # the first configure loads (the server's `initialized`)
        for i in range(20):
            svc.configure(Settings(**{**vars(svc.settings), "debounce_ms": i, "max_tokens": 8 + i}))
        svc.open_document("u", "python", 1, "x = ")
        r = await svc.complete(CompletionRequest("u", 0, 4))
        svc.close()
        assert svc.join()
        return calls, r

    calls, r = run(scenario())
    assert calls == {"open": 1, "engine": 1}
    assert r is not None


def test_model_setting_toggles_coalesce_into_one_reload():
    async def scenario():
        gate = threading.Event()  # the first load lasts until every toggle came
        svc, calls, _ = counting_service(gate)
        for i in range(20):
            svc.configure(Settings(**{**vars(svc.settings), "threads": 1 + i % 2}))
        gate.set()
        svc.open_document("u", "python", 1, "x = ")
        r = await svc.complete(CompletionRequest("u", 0, 4))
        svc.close()
        assert svc.join()
        return calls, r, svc.settings.threads

    calls, r, threads = run(scenario())
    # The first warm-up may start before the toggles; all later ones share the queued one.
    assert 1 <= calls["open"] <= 2, calls
    assert r is not None and threads == 2


def test_a_rules_file_that_cannot_be_used_falls_back_with_one_message(tmp_path):
    """Missing or corrupt: completions go on with the packaged rules; the engine is built once."""
    corrupt = tmp_path / "bad.rules.json.gz"
    corrupt.write_bytes(b"not gzip at all")

    async def scenario(path: str):
        svc, calls, messages = counting_service(sources=("lookup", "rules"), rules_file=path)
        svc.configure(svc.settings)
        svc.open_document("u", "python", 1, "x = ")
        r = await svc.complete(CompletionRequest("u", 0, 4))
        await asyncio.sleep(0.05)
        engine = svc._worker.host.engine
        state = svc.status().state
        svc.close()
        return r, calls, messages, engine, state

    for path in (str(tmp_path / "missing.json.gz"), str(corrupt)):
        r, calls, messages, engine, state = run(scenario(path))
        assert r is not None and state != "error"
        assert calls["engine"] == 1
        assert [s.name for s in engine.sources] == ["lookup", "rules"]
        warnings = [t for level, t in messages if level == "warning"]
        assert len(warnings) == 1 and "rulesFile" in warnings[0] and "packaged rules" in warnings[0]


def test_rules_file_and_sources_changes_rebuild_the_engine_not_the_model(tmp_path):
    async def scenario():
        svc, calls, messages = counting_service(sources=("lookup",))
        svc.open_document("u", "python", 1, "x = ")
        await svc.complete(CompletionRequest("u", 0, 4))
        first = [s.name for s in svc._worker.host.engine.sources]
        svc.configure(Settings(**{**vars(svc.settings), "sources": ("lookup", "rules")}))
        svc._sessions["u"].pending = None
        await svc.complete(CompletionRequest("u", 0, 4))
        second = [s.name for s in svc._worker.host.engine.sources]
        bad = str(tmp_path / "missing.json.gz")
        svc.configure(Settings(**{**vars(svc.settings), "rules_file": bad}))
        svc._sessions["u"].pending = None
        await svc.complete(CompletionRequest("u", 0, 4))
        svc.close()
        return first, second, calls, messages

    first, second, calls, messages = run(scenario())
    assert first == ["lookup"] and second == ["lookup", "rules"]
    assert calls == {"open": 1, "engine": 3}
    assert any("rulesFile" in t for _, t in messages)


def test_latest_generations_are_kept_for_recycling_and_dropped_with_the_model():
    """A generation cut short by the next keystroke is kept too; another model forgets them."""

    async def scenario():
        svc, _ = make_service(
            SlowStandIn(delay=0.02, eos_bias=-30.0), max_tokens=40, sources=("recycle",)
        )
        svc.open_document("u", "python", 1, "a = 1\nb = 2\nc = ")
        first = asyncio.ensure_future(svc.complete(CompletionRequest("u", 2, 4)))
        await asyncio.sleep(0.1)
        second = await svc.complete(CompletionRequest("u", 2, 3))
        await first
        kept = list(svc._sessions["u"].recent)
        svc.configure(Settings(**{**vars(svc.settings), "model": "standin:1"}))
        after = list(svc._sessions["u"].recent)
        svc.close()
        return second, kept, after

    second, kept, after = run(scenario())
    assert second is not None and len(kept) == 2  # newest first: the second, then the cut one
    assert all(len(g) > 1 for g in kept) and kept[0] != kept[1]
    assert after == []


def test_a_model_change_drops_the_old_models_suggestions():
    """The old model's suggestion at a place (and its pre-generation past it) was still
    served after the ``model`` setting changed."""
    text = "def add(a, b):\n    return "

    def service(model: str) -> CompletionService:
        return CompletionService(
            Settings(model=model, debounce_ms=0, max_tokens=16, sources=("lookup",)),
            open_model=lambda spec, **kw: StandInModel(seed=int(spec.split(":")[1]), eos_bias=-3.0),
        )

    async def answer(svc: CompletionService) -> str | None:
        got = await svc.complete(CompletionRequest("u", 1, 11))
        return got.text if got is not None else None

    async def fresh(model: str) -> str | None:
        svc = service(model)
        svc.open_document("u", "python", 1, text)
        got = await answer(svc)
        svc.close()
        return got

    async def switched() -> tuple[str | None, str | None]:
        svc = service("standin:1")
        svc.open_document("u", "python", 1, text)
        before = await answer(svc)
        await asyncio.sleep(0.2)  # pre-generation writes past it
        svc.configure(Settings(**{**vars(svc.settings), "model": "standin:2"}))
        after = await answer(svc)
        svc.close()
        return before, after

    one, two = run(fresh("standin:1")), run(fresh("standin:2"))
    assert one != two
    assert run(switched()) == (one, two)


def test_a_model_file_that_appears_or_is_replaced_is_loaded(tmp_path):
    """A path set before its download ended failed for good (the same setting sent again
    was not tried again), and a file replaced on disk kept being served."""
    path = tmp_path / "m.gguf"
    opened: list[int] = []

    def open_model(spec: str, **kw) -> StandInModel:
        if not os.path.exists(spec):
            raise ModelError(f"model file not found: {spec}")
        opened.append(int(Path(spec).read_text()))
        assert (kw["slots"], kw["context_size"]) == (KV_SLOTS, 2048)
        return StandInModel(seed=opened[-1], eos_bias=-3.0)

    async def scenario():
        svc = CompletionService(
            Settings(
                model=str(path),
                context_size=2048,
                debounce_ms=0,
                max_tokens=16,
                sources=("lookup",),
            ),
            open_model=open_model,
        )
        svc.open_document("u", "python", 1, "x = ")
        assert await svc.complete(CompletionRequest("u", 0, 4)) is None  # no file yet
        path.write_text("1")
        svc.configure(svc.settings)  # the editor sends the same settings again
        await svc.complete(CompletionRequest("u", 0, 4))
        assert opened == [1]
        (tmp_path / "new").write_text("2")
        os.replace(tmp_path / "new", path)  # a new download put in place
        svc.open_document("v", "python", 1, "y = ")
        await svc.complete(CompletionRequest("v", 0, 4))  # the next request the model answers
        svc.close()
        assert svc.join()

    run(scenario())
    assert opened == [1, 2]


def test_a_failed_switch_does_not_name_the_freed_model():
    """The status kept the old model's name (and rates) after a switch to a file that
    failed to load, although the old model was freed and nothing served completions."""
    from structspec.completion.types import NOT_LOADED

    async def scenario():
        svc, _ = make_service()
        svc.open_document("u", "python", 1, "x = ")
        await svc.complete(CompletionRequest("u", 0, 4))
        loaded = svc.status().model
        svc.configure(Settings(**{**vars(svc.settings), "model": "broken"}))
        await wait_for(lambda: svc.status().state == "error")
        failed = svc.status().model
        svc.close()
        return loaded, failed

    loaded, failed = run(scenario())
    assert loaded != NOT_LOADED and failed == NOT_LOADED

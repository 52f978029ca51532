"""Project context: neighbour snippets chosen by Jaccard similarity, stable while typing."""

from __future__ import annotations

import asyncio
import time

from structspec.completion.prompt import PromptBuilder, snippet_comment
from structspec.completion.snippets import (
    MAX_LINE_CHARS,
    RECHOOSE_LINES,
    Neighbour,
    Snippet,
    SnippetChooser,
    best_windows,
    jaccard,
    query_lines,
)
from structspec.model.standin import BOS, StandInModel

FILLER = "".join(f"unrelated_{i} = other_{i}\n" for i in range(60))
COUNTING = "count = count + 1\n" * 60
HELPERS = (
    COUNTING
    + "def load_config(path):\n    with open(path) as fh:\n        return parse_config(fh)\n"
    + COUNTING
)


def neighbour(uri: str, text: str, version: int = 1) -> Neighbour:
    return Neighbour(uri, uri.rsplit("/", 1)[-1], version, text)


def test_jaccard_and_query():
    assert jaccard(frozenset("ab"), frozenset("bc")) == 1 / 3
    assert jaccard(frozenset(), frozenset()) == 0.0
    text = "".join(f"l{i}\n" for i in range(30)) + "x = "
    lines = query_lines(text, len(text))
    assert lines[-1] == "x = " and len(lines) == 21 and lines[0] == ""  # 20 breaks back


def test_the_most_similar_window_wins():
    query = ["cfg = load_config(path)", "data = parse_config(cfg)"]
    found = best_windows(query, [neighbour("file:///p/helpers.py", HELPERS)])
    assert len(found) == 1
    assert "def load_config(path):" in found[0].text
    assert found[0].path == "helpers.py" and found[0].score > 0.1
    # A document sharing no identifier gives nothing (no snippet below MIN_SCORE).
    assert best_windows(query, [neighbour("file:///p/other.py", FILLER)]) == []
    assert best_windows([""], [neighbour("file:///p/helpers.py", HELPERS)]) == []


def test_snippets_stay_while_typing_in_one_place():
    chooser = SnippetChooser()
    others = [neighbour("file:///p/helpers.py", HELPERS)]
    text = "import x\n" * 50 + "cfg = load_config(path)\n"
    first = chooser.choose("file:///p/a.py", text, len(text), others)
    assert first and chooser.choices == 1
    for typed in ("d", "da", "dat", "data = parse_config(cfg)\nmore"):
        doc = text + typed
        assert chooser.choose("file:///p/a.py", doc, len(doc), others) is first
    assert chooser.choices == 1
    # A few lines up: still the same choice.
    up = text.rfind("\n", 0, len(text) - 200)
    assert chooser.choose("file:///p/a.py", text, up, others) is first
    # Far away (more than RECHOOSE_LINES lines): chosen again.
    far = text.index("\n") + 1
    assert text.count("\n", far, len(text)) > RECHOOSE_LINES
    chooser.choose("file:///p/a.py", text, far, others)
    assert chooser.choices == 2
    # Another file changed: chosen again.
    changed = [neighbour("file:///p/helpers.py", HELPERS + "x\n", version=2)]
    chooser.choose("file:///p/a.py", text, far, changed)
    assert chooser.choices == 3


def test_a_choice_holds_a_number_for_the_other_documents_not_each_of_them():
    """Each open document's choice held every other's (URI, version): the square of the
    documents open (20 MB at 800)."""
    chooser = SnippetChooser()
    docs = [neighbour(f"file:///p/m{i}.py", HELPERS) for i in range(50)]
    for doc in docs:
        chooser.choose(doc.uri, "cfg = load_config(path)\n", 10, docs)
    for _, versions, _ in [*chooser._chosen.values(), *chooser._tops.values()]:
        assert isinstance(versions, int)
    assert len(chooser._chosen) == 50 and chooser.choices == 50


def test_only_the_most_recently_used_documents_are_searched():
    """Every window of every open document was scored at each choice: 1.3-1.5 s of the
    first request after a switch of files with 200 open."""
    from structspec.completion.snippets import MAX_NEIGHBOURS

    chooser = SnippetChooser()
    text = "import x\n" * 5 + "cfg = load_config(path)\n"
    unrelated = [neighbour(f"file:///p/u{i}.py", "zzz = 1\n" * 30) for i in range(MAX_NEIGHBOURS)]
    helpers = neighbour("file:///p/helpers.py", HELPERS)
    assert chooser.choose("file:///p/a.py", text, len(text), [*unrelated, helpers]) == []
    before = chooser.choices
    changed = neighbour("file:///p/helpers.py", HELPERS + "x\n", version=2)
    chooser.choose("file:///p/a.py", text, len(text), [*unrelated, changed])
    assert chooser.choices == before  # a change past the searched ones chooses nothing again
    found = chooser.choose("file:///p/a.py", text, len(text), [helpers, *unrelated])
    assert [s.uri for s in found] == ["file:///p/helpers.py"]  # used recently: searched


def test_a_cursor_in_the_documents_top_keeps_the_tops_snippets():
    """Snippets chosen at the cursor would put other tokens before the cached top."""
    chooser = SnippetChooser()
    uri = "file:///p/a.py"
    others = [neighbour("file:///p/helpers.py", HELPERS), neighbour("file:///p/f.py", FILLER)]
    head = "".join(f"unrelated_{i} = other_{i}\n" for i in range(20))  # as f.py starts
    text = head + "y = load_config(path)\n" * 40 + "cfg = load_config(path)\n"
    top = chooser.choose(uri, text, len(text), others, top=True)
    assert [s.path for s in top] == ["helpers.py"]
    far = len(head)  # more than RECHOOSE_LINES above the top's end
    assert text.count("\n", far, len(text)) > RECHOOSE_LINES
    assert [s.path for s in best_windows(query_lines(text, far), others)] == ["f.py"]
    assert chooser.choose(uri, text, far, others) is top  # not the cursor's own choice
    assert chooser.choices == 1
    below = text + "y = 1\n" * (RECHOOSE_LINES + 2)  # past the top: the cursor's own
    assert chooser.choose(uri, below, len(below), others) is not top
    assert chooser.choose(uri, text, far, others) is top  # back in the top: its snippets again
    changed = [others[0], neighbour("file:///p/f.py", FILLER + "x\n", version=2)]
    assert chooser.choose(uri, text, far, changed)[0].path == "f.py"  # another file changed


def test_snippets_are_comments_before_the_window_without_fim():
    model = StandInModel(n_ctx=2048)
    builder = PromptBuilder(model)
    snippet = Snippet("file:///p/b.py", "b.py", "def g(y):\n    return y", 0.5)
    text = "x = g(1)\n"
    plain = builder.build(text, len(text), uri="file:///p/a.py", language="python")
    with_context = builder.build(
        text, len(text), uri="file:///p/a.py", language="python", context=[snippet]
    )
    comment = snippet_comment(snippet, "#")
    assert comment == "# Compare this snippet from b.py:\n# def g(y):\n#     return y\n"
    assert with_context.tokens == [BOS, *model.tokenize(comment, add_bos=False), *plain.tokens[1:]]
    # Plain text has no comment syntax: no context rather than text the model mistakes for code.
    assert builder.build(text, len(text), uri="file:///p/a.txt", context=[snippet]).tokens == (
        builder.build(text, len(text), uri="file:///p/a.txt").tokens
    )


def test_snippets_that_do_not_fit_the_budget_are_left_out():
    model = StandInModel(n_ctx=512)
    builder = PromptBuilder(model)
    big = Snippet("file:///p/big.py", "big.py", "x = 1\n" * 400, 0.9)
    small = Snippet("file:///p/s.py", "s.py", "y = 2", 0.5)
    p = builder.build("z = ", 4, uri="file:///p/a.py", language="python", context=[big, small])
    text = model.detokenize(p.tokens)
    assert "s.py" not in text or "y = 2" in text
    assert "x = 1\n" * 10 not in text and "y = 2" in text
    assert len(p.tokens) <= 512


async def wait_for(condition, timeout: float = 60.0) -> None:
    """Wait (not a timing assertion) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


class _Recording(StandInModel):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.prompts: list[list[int]] = []
        self.reused: list[int] = []

    def prefill(self, tokens):
        reused = super().prefill(tokens)
        self.prompts.append(list(tokens))
        self.reused.append(reused)
        return reused


async def test_the_service_keeps_the_snippets_and_their_cache_while_typing():
    from structspec.completion.documents import Range, TextChange
    from structspec.completion.service import CompletionRequest, CompletionService
    from structspec.config import Settings

    model = _Recording(n_ctx=4096, eos_bias=-3.0)
    svc = CompletionService(
        Settings(
            model="standin", debounce_ms=0, max_tokens=4, sources=("lookup",), project_context=True
        ),
        open_model=lambda spec, **kw: model,
    )
    svc.open_document("file:///p/helpers.py", "python", 1, HELPERS)
    text = "import x\n" * 30 + "cfg = load_config(path)\n"
    svc.open_document("file:///p/a.py", "python", 1, text)
    line = text.count("\n")
    # Opened and looked at: pre-warm evaluated the whole window with its context (a
    # first answer at a new place would have a smaller window, with less context).
    await wait_for(lambda: svc.stats.prewarmed == 1)
    await svc.complete(CompletionRequest("file:///p/a.py", line, 0, invoked=True))
    first = model.detokenize(model.prompts[-1])
    assert "ompare this snippet from helpers.py" in first and "load_config(path):" in first
    model.prompts.clear()
    model.reused.clear()
    for i, ch in enumerate("data = parse_config(cfg)"):
        svc.change_document("file:///p/a.py", 2 + i, [TextChange(ch, Range(line, i, line, i))])
        await svc.complete(CompletionRequest("file:///p/a.py", line, i + 1, invoked=True))
    assert len(model.prompts) >= 3  # not all typed through the cache
    for prompt, reused in zip(model.prompts, model.reused, strict=True):
        # Only the typed characters since the last model request are new.
        assert reused >= len(prompt) - 24
        # The snippets come before the window: all of them are in the reused part.
        assert "def load_config(path):" in model.detokenize(prompt[:reused])
    assert svc._worker.host.snippets.choices == 1
    svc.close()
    assert svc.join()


def test_huge_lines_are_quoted_short():
    minified = "load_config(path);" * 50_000  # one 900 KB line
    found = best_windows(["cfg = load_config(path)"], [neighbour("file:///p/min.js", minified)])
    assert len(found) == 1 and len(found[0].text) == MAX_LINE_CHARS


async def test_a_document_reopened_at_the_same_version_is_read_anew():
    """Editors start a reopened file's version at 1 again: a cache keyed by the version kept
    the closed file's old text in other documents' prompts."""
    from structspec.completion.documents import Range, TextChange
    from structspec.completion.service import CompletionRequest, CompletionService
    from structspec.config import Settings

    model = _Recording(n_ctx=4096, eos_bias=-3.0)
    svc = CompletionService(
        Settings(
            model="standin", debounce_ms=0, max_tokens=4, sources=("lookup",), project_context=True
        ),
        open_model=lambda spec, **kw: model,
    )
    helpers = "file:///p/helpers.py"
    svc.open_document(helpers, "python", 1, HELPERS)
    text = "import x\n" * 30 + "cfg = load_config(path)\n"
    svc.open_document("file:///p/a.py", "python", 1, text)
    line = text.count("\n")
    await wait_for(lambda: svc.stats.prewarmed == 1)  # the whole window, with its context
    await svc.complete(CompletionRequest("file:///p/a.py", line, 0, invoked=True))
    assert "def load_config(path):" in model.detokenize(model.prompts[-1])

    svc.close_document(helpers)
    svc.open_document(helpers, "python", 1, HELPERS.replace("parse_config", "parse_settings"))
    svc.change_document("file:///p/a.py", 2, [TextChange("c", Range(line, 0, line, 0))])
    await svc.complete(CompletionRequest("file:///p/a.py", line, 1, invoked=True))
    prompt = model.detokenize(model.prompts[-1])
    assert "return parse_settings(fh)" in prompt and "parse_config" not in prompt
    svc.close()
    assert svc.join()

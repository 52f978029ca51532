"""FIM prompts on real llama.cpp vocabularies: Qwen2.5-Coder, StarCoder2 and CodeLlama spellings.

Each test writes a tiny llama GGUF with the family's special tokens (random
weights, see ``fim_gguf``), loads it through ``LlamaModel`` and checks the
prompt token by token: where BOS goes, prefix-suffix-middle order with the
cursor's line after the middle token, the suffix and the line without a dummy
leading space, the repo-level layout of project context, and
that the whole prompt, suffix included, is what the model's KV cache holds
after a completion request.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.fim_gguf import TinyVocab, write_tiny_fim_gguf

from structspec.completion.prompt import PromptBuilder, fim_text_tokens, repo_tokens
from structspec.completion.service import CompletionRequest, CompletionService
from structspec.completion.snippets import Snippet
from structspec.config import Settings
from structspec.engine.decode import Engine

pytest.importorskip("llama_cpp")
from structspec.model.llama import LlamaModel  # noqa: E402

DOC = "def f(x):\n    return \n\nprint(f(2))\n"
CURSOR = DOC.index("return ") + len("return ")
PREFIX, SUFFIX = DOC[:CURSOR], DOC[CURSOR:]
LINE_START = DOC.rindex("\n", 0, CURSOR) + 1
WINDOW, LINE = DOC[:LINE_START], DOC[LINE_START:CURSOR]  # "def f(x):\n", "    return "
URI = "file:///home/u/proj/a.py"
HEADER = "# Path: a.py\n"


@pytest.fixture(params=["qwen", "starcoder", "codellama"])
def tiny(request: pytest.FixtureRequest, tmp_path: Path):
    vocab = write_tiny_fim_gguf(tmp_path / f"{request.param}.gguf", request.param)
    model = LlamaModel.load(vocab.path, n_ctx=512, threads=1, slots=2, n_batch=64)
    yield vocab, model
    model.close()


def tok(model: LlamaModel, text: str) -> list[int]:
    return model.tokenize(text, add_bos=False)


def test_llama_cpp_finds_the_fim_tokens(tiny: tuple[TinyVocab, LlamaModel]):
    vocab, model = tiny
    fim = model.fim_tokens()
    assert fim is not None
    assert (fim.prefix, fim.suffix, fim.middle) == (
        vocab.ids["pre"],
        vocab.ids["suf"],
        vocab.ids["mid"],
    )
    assert model.bos_token() == vocab.bos
    repo = repo_tokens(model)
    if vocab.family == "codellama":
        assert repo is None
    else:
        assert repo is not None
        assert (repo.repo_name, repo.file_sep, repo.family) == (
            vocab.ids["repo"],
            vocab.ids["sep"],
            vocab.family,
        )


def test_prompt_is_laid_out_as_the_family_expects(tiny: tuple[TinyVocab, LlamaModel]):
    vocab, model = tiny
    prompt = PromptBuilder(model).build(DOC, CURSOR, uri=URI, language="python")
    ids = vocab.ids
    bos = [] if vocab.bos is None else [vocab.bos]
    prefix = tok(model, HEADER + WINDOW)
    if vocab.family == "codellama":
        # <s>▁<PRE> prefix ▁<SUF>suffix ▁<MID>line: the dummy space goes before the prefix only.
        plain = tok(model, SUFFIX)
        assert model.token_bytes(plain[0]) == b" "
        suffix = plain[1:]
        assert model.detokenize(prefix) == " " + HEADER + WINDOW
    else:
        suffix = tok(model, SUFFIX)
        assert model.detokenize(prefix) == HEADER + WINDOW
    assert model.detokenize(suffix) == SUFFIX
    middle_at = prompt.tokens.index(ids["mid"])
    head = [*bos, ids["pre"], *prefix, ids["suf"], *suffix, ids["mid"]]
    assert prompt.tokens[: middle_at + 1] == head
    assert model.detokenize(prompt.tokens[middle_at + 1 :]) == LINE
    assert prompt.insert_at == len(prompt.tokens) == middle_at + 1 + prompt.line
    assert prompt.fim and prompt.suffix_end == len(DOC) and prompt.context == 0


def test_an_api_prompt_and_suffix_take_the_editors_layout(tiny: tuple[TinyVocab, LlamaModel]):
    """``structspec serve``'s ``prompt`` + ``suffix``: the tokens the language server sends."""
    _, model = tiny
    fim = model.fim_tokens()
    assert fim is not None
    assert (
        fim_text_tokens(model, fim, PREFIX, SUFFIX)
        == PromptBuilder(model).build(DOC, CURSOR).tokens
    )


def test_project_context_layout(tiny: tuple[TinyVocab, LlamaModel]):
    vocab, model = tiny
    snippet = Snippet("file:///home/u/proj/b.py", "b.py", "def g(y):\n    return y", 0.5)
    prompt = PromptBuilder(model).build(DOC, CURSOR, uri=URI, language="python", context=[snippet])
    ids = vocab.ids
    fim_tail = [ids["suf"]]
    if vocab.family == "qwen":
        lead = [ids["repo"], *tok(model, "proj\n"), ids["sep"]]
        lead += [*tok(model, "b.py\ndef g(y):\n    return y\n"), ids["sep"], *tok(model, "a.py\n")]
        assert prompt.tokens[: len(lead) + 1] == [*lead, ids["pre"]]
        assert prompt.tokens[len(lead) + 1 :][: len(tok(model, WINDOW))] == tok(model, WINDOW)
        assert prompt.context == len(lead)
    elif vocab.family == "starcoder":
        lead = [ids["repo"], *tok(model, "proj"), ids["sep"]]
        lead += [*tok(model, "b.py\ndef g(y):\n    return y\n"), ids["sep"]]
        body = tok(model, "a.py\n" + WINDOW)
        assert prompt.tokens[: len(lead) + 1 + len(body)] == [*lead, ids["pre"], *body]
        assert prompt.context == len(lead)
    else:
        # No repo-level tokens: the snippet is a comment block inside the prefix.
        comment = "# Compare this snippet from b.py:\n# def g(y):\n#     return y\n"
        body = tok(model, comment + HEADER + WINDOW)
        assert prompt.tokens[: 2 + len(body)] == [1, ids["pre"], *body]
        assert prompt.context == 0
    assert fim_tail[0] in prompt.tokens
    middle_at = prompt.tokens.index(ids["mid"])
    assert model.detokenize(prompt.tokens[middle_at + 1 :]) == LINE


async def test_the_suffix_reaches_the_model(tiny: tuple[TinyVocab, LlamaModel]):
    vocab, model = tiny
    service = CompletionService(
        Settings(model=str(vocab.path), debounce_ms=0, max_tokens=4, sources=("lookup",)),
        open_model=lambda spec, **kw: model,
        load_engine=lambda settings, model, **kw: (Engine(model), []),
    )
    service.open_document(URI, "python", 1, DOC)
    await service.complete(CompletionRequest(URI, 1, len("    return "), invoked=True))
    expected = PromptBuilder(model).build(DOC, CURSOR, uri=URI, language="python").tokens
    cached = list(model.cached_tokens)
    # The engine evaluates the whole prompt (the last token on its first pass).
    assert cached[: len(expected)] == expected
    suffix_at = expected.index(vocab.ids["suf"])
    middle_at = expected.index(vocab.ids["mid"])
    assert model.detokenize(expected[suffix_at + 1 : middle_at]) == SUFFIX
    assert model.detokenize(expected[middle_at + 1 :]) == LINE
    service.close()
    assert service.join(10)

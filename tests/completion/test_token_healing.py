"""The language server's completion service heals a request typed mid-word (stand-in model)."""

from __future__ import annotations

import asyncio

from structspec.completion.service import CompletionRequest, CompletionService
from structspec.config import Settings
from structspec.model.standin import StandInModel

#: Multi-character tokens, so a word cut at the cursor ends in a token the whole
#: word would not use (as with a real BPE vocabulary).
PIECES = ("return", "ret", "re", "result", "res", "value", "val")


def suggest(text: str, **settings: object):
    model = StandInModel(seed=5, pieces=PIECES, eos_bias=-3.0)
    base: dict[str, object] = dict(model="standin", debounce_ms=0, max_tokens=12, sources=())
    base.update(settings)
    svc = CompletionService(Settings(**base), open_model=lambda spec, **kw: model)  # type: ignore[arg-type]

    async def scenario():
        svc.open_document("u", "python", 1, text)
        line = text.count("\n")
        return await svc.complete(CompletionRequest("u", line, len(text.rsplit("\n", 1)[-1])))

    try:
        return asyncio.run(scenario())
    finally:
        svc.close()


def test_mid_word_request_is_healed_and_starts_at_the_cursor():
    healed = suggest("def f(a):\n    x = re")
    plain = suggest("def f(a):\n    x = re", token_healing=False)
    assert healed is not None and healed.stats is not None
    assert healed.stats.healed_tokens == 1
    assert plain is not None and plain.stats is not None and plain.stats.healed_tokens == 0
    assert healed.word_prefix == "re"


def test_request_after_a_non_word_character_is_not_healed():
    result = suggest("def f(a):\n    x = (")
    assert result is None or (result.stats is not None and result.stats.healed_tokens == 0)


def test_fill_in_the_middle_request_is_healed_at_the_cursor():
    model = StandInModel(seed=5, pieces=PIECES, eos_bias=-3.0, fim=True)
    svc = CompletionService(
        Settings(model="standin", debounce_ms=0, max_tokens=12, sources=()),
        open_model=lambda spec, **kw: model,  # type: ignore[arg-type]
    )
    text = "def f(a):\n    x = re\n    return x\n"

    async def scenario():
        svc.open_document("u", "python", 1, text)
        return await svc.complete(CompletionRequest("u", 1, len("    x = re")))

    try:
        result = asyncio.run(scenario())
    finally:
        svc.close()
    assert result is not None and result.stats is not None
    assert result.stats.healed_tokens == 1
    fim = model.fim_tokens()
    assert fim is not None
    # What the model evaluated: the window, the suffix, then the line without "re".
    prompt = list(model.cached_tokens)[: result.stats.prompt_tokens]
    suffix_at, middle_at = prompt.index(fim.suffix), prompt.index(fim.middle)
    assert model.detokenize(prompt[:suffix_at]).endswith("def f(a):\n")
    assert model.detokenize(prompt[suffix_at + 1 : middle_at]).startswith("\n    return x")
    assert model.detokenize(prompt[middle_at + 1 :]) == "    x = "

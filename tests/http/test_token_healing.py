"""``serve`` heals a text prompt of /v1/completions that ends mid-word (stand-in model)."""

from __future__ import annotations

import openai
from tests.helpers.http_server import ServerThread, standin_engine

from structspec.engine.decode import GenerationOptions
from structspec.model.standin import StandInModel

PIECES = ("return", "ret", "re", "result", "res", "value", "val")
PROMPT = "def f(a):\n    x = re"


def model() -> StandInModel:
    return StandInModel(seed=5, pieces=PIECES, eos_bias=-3.0)


def reference(prompt: str, token_healing: bool) -> str:
    engine = standin_engine(model())
    tokens = engine.model.tokenize(prompt)
    opts = GenerationOptions(max_tokens=12, token_healing=token_healing)
    return engine.generate(tokens, opts).text


def test_text_prompt_mid_word_is_healed_token_ids_are_not():
    from structspec.http.app import create_app

    healed = reference(PROMPT, True)
    plain = reference(PROMPT, False)
    assert healed != plain  # the stand-in's choice changes once "re" can be extended
    with ServerThread(create_app(standin_engine(model()), model_id="standin")) as server:
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        r = c.completions.create(model="standin", prompt=PROMPT, max_tokens=12)
        assert r.choices[0].text == healed
        assert r.usage is not None and r.usage.prompt_tokens == len(model().tokenize(PROMPT)) - 1
        ids = model().tokenize(PROMPT)
        r = c.completions.create(model="standin", prompt=ids, max_tokens=12)
        assert r.choices[0].text == plain  # the client chose those tokens: kept as they are
    off = create_app(standin_engine(model()), model_id="standin", token_healing=False)
    with ServerThread(off) as server:
        c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        r = c.completions.create(model="standin", prompt=PROMPT, max_tokens=12)
        assert r.choices[0].text == plain

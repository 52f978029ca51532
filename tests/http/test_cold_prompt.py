"""``cache_prompt`` and ``return_tokens``: what the side-by-side benchmark asks of ``serve``.

Over HTTP, a prompt of token ids evaluated from scratch gives exactly the
tokens the in-process engine gives for the same ids (stand-in model).
"""

from __future__ import annotations

from typing import Any

import httpx
from tests.helpers.http_server import ServerThread, standin_engine

from structspec.engine.decode import GenerationOptions
from structspec.http.app import create_app

PROMPT = "def total(items):\n    s = 0\n    for x in items:\n        s += x\n    return s\n\n"


def post(url: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, timeout=30)


def test_cold_prompt_gives_the_in_process_tokens_and_reuses_nothing() -> None:
    engine = standin_engine()
    ids = engine.model.tokenize(PROMPT)
    for speculative in (True, False):
        engine.model.truncate(0)
        options = GenerationOptions(max_tokens=24, speculative=speculative)
        expected = engine.generate(ids, options).tokens
        app = create_app(standin_engine(), model_id="standin", speculative=speculative)
        with ServerThread(app) as server:
            body = {"prompt": ids, "max_tokens": 24, "return_tokens": True}
            warm = post(server.url, body).json()["structspec"]
            assert warm["tokens"] == expected
            again = post(server.url, body).json()["structspec"]
            assert again["reused_prompt_tokens"] == len(ids) - 1  # the default reuses the cache
            cold = post(server.url, {**body, "cache_prompt": False}).json()["structspec"]
            assert cold["reused_prompt_tokens"] == 0
            assert cold["tokens"] == expected


def test_tokens_only_when_asked_and_bad_flags_refused() -> None:
    with ServerThread(create_app(standin_engine(), model_id="standin")) as server:
        r = post(server.url, {"prompt": "x = ", "max_tokens": 4})
        assert r.status_code == 200 and "tokens" not in r.json()["structspec"]
        for field in ("cache_prompt", "return_tokens"):
            r = post(server.url, {"prompt": "x = ", "max_tokens": 4, field: "no"})
            assert r.status_code == 400
            assert r.json()["error"]["param"] == field

"""``structspec serve`` without ``--backend`` relays to the ``backend`` setting (a real subprocess).

The setting is the language server's remote engine (config file or
``$STRUCTSPEC_BACKEND``); its key is ``backend_api_key``. A ``--model`` flag
wins over it: the in-process engine is served.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from tests.helpers.fake_backends import Behaviour, FakeBackend
from tests.helpers.http_server import ServeProcess, serve_env


def test_serve_relays_to_the_backend_setting_with_its_key(tmp_path: Path) -> None:
    with FakeBackend(Behaviour(endpoints=("openai",), api_key="k1")) as fake:
        config = tmp_path / "config.toml"
        config.write_text('backend_api_key = "k1"\n')
        # The URL pins /v1 for the language server; the proxy relays under its base.
        env = serve_env(tmp_path, STRUCTSPEC_BACKEND=fake.url + "/v1")
        env["STRUCTSPEC_CONFIG"] = str(config)
        with ServeProcess(tmp_path, env=env) as serve:
            r = httpx.post(
                serve.url + "/v1/completions",
                json={"model": "m", "prompt": "x = ", "max_tokens": 4, "stream": True},
                timeout=30,
            )
        # The fake answers 401 to a request without ``Authorization: Bearer k1``.
        assert r.status_code == 200 and "add(3," in r.text
        assert len(fake.posts("/v1/completions")) == 1
        assert f"proxy to {fake.url} " in serve.stderr


def test_a_model_flag_wins_over_the_backend_setting(tmp_path: Path) -> None:
    with FakeBackend(Behaviour(endpoints=("openai",))) as fake:
        env = serve_env(tmp_path, STRUCTSPEC_BACKEND=fake.url)
        with ServeProcess(tmp_path, "--model", "standin", env=env) as serve:
            assert httpx.get(serve.url + "/v1/models", timeout=10).status_code == 200
        assert "model 'standin'" in serve.stderr and not fake.requests

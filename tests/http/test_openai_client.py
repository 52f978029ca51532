"""The official ``openai`` client against ``structspec serve`` on the stand-in model."""

from __future__ import annotations

import concurrent.futures

import openai
import pytest
from tests.helpers.http_server import ServerThread, standin_engine

from structspec.engine.decode import GenerationOptions
from structspec.http.chat import render_plain
from structspec.http.openai_api import MAX_STOP_STRINGS

PROMPTS = [f"def f{i}(a, b):\n    return a + b * {i}\n\ndef g{i}(x):\n" for i in range(16)]


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def reference(prompt: str, max_tokens: int, stop: tuple[str, ...] = ()) -> str:
    """What the engine alone produces (a fresh engine: no shared state with the server)."""
    engine = standin_engine()
    tokens = engine.model.tokenize(prompt)
    return engine.generate(tokens, GenerationOptions(max_tokens=max_tokens, stop=stop)).text


def test_models_list(standin_server: ServerThread) -> None:
    models = client(standin_server).models.list()
    assert [m.id for m in models.data] == ["standin"]
    assert client(standin_server).models.retrieve("standin").id == "standin"


def test_completion_matches_engine(standin_server: ServerThread) -> None:
    r = client(standin_server).completions.create(
        model="standin", prompt=PROMPTS[0], max_tokens=40, temperature=0
    )
    assert r.choices[0].text == reference(PROMPTS[0], 40)
    assert r.usage is not None
    assert r.usage.completion_tokens == 40
    assert r.usage.prompt_tokens == len(standin_engine().model.tokenize(PROMPTS[0]))
    assert r.choices[0].finish_reason == "length"


def test_stream_equals_non_stream(standin_server: ServerThread) -> None:
    c = client(standin_server)
    full = c.completions.create(model="standin", prompt=PROMPTS[1], max_tokens=50)
    chunks = list(
        c.completions.create(
            model="standin",
            prompt=PROMPTS[1],
            max_tokens=50,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == full.choices[0].text
    assert len([ch for ch in chunks if ch.choices and ch.choices[0].text]) > 10  # token by token
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 50
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}


def test_stop_string(standin_server: ServerThread) -> None:
    text = reference(PROMPTS[2], 60)
    stop = text[20:23]
    expected = text[: text.index(stop)]
    c = client(standin_server)
    r = c.completions.create(model="standin", prompt=PROMPTS[2], max_tokens=60, stop=[stop])
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    streamed = c.completions.create(
        model="standin", prompt=PROMPTS[2], max_tokens=60, stop=stop, stream=True
    )
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == expected


def test_a_chat_takes_as_many_stop_strings_as_a_completion(standin_server: ServerThread) -> None:
    # The plain transcript adds a stop string of its own (its next "User:" turn):
    # the most a client may send still fits the engine's limit with it.
    stops = [f"never{i}" for i in range(MAX_STOP_STRINGS)]
    messages = [{"role": "user", "content": "fib"}]
    c = client(standin_server)
    r = c.chat.completions.create(model="standin", messages=messages, max_tokens=30, stop=stops)  # type: ignore[arg-type]
    prompt = render_plain(messages)
    assert r.choices[0].message.content == reference(prompt.text, 30, prompt.stop)
    with pytest.raises(openai.BadRequestError, match="at most"):
        c.chat.completions.create(
            model="standin",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=30,
            stop=[*stops, "one more"],
        )


def test_chat_plain_template(standin_server: ServerThread) -> None:
    messages = [
        {"role": "system", "content": "You write code."},
        {"role": "user", "content": "fib"},
    ]
    c = client(standin_server)
    r = c.chat.completions.create(
        model="standin",
        messages=messages,
        max_tokens=30,  # type: ignore[arg-type]
    )
    prompt = render_plain(messages)
    assert r.choices[0].message.content == reference(prompt.text, 30, prompt.stop)
    assert r.choices[0].message.role == "assistant"
    stream = c.chat.completions.create(
        model="standin",
        messages=messages,
        max_tokens=30,
        stream=True,  # type: ignore[arg-type]
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == r.choices[0].message.content


def test_auto_model_alias(standin_server: ServerThread) -> None:
    r = client(standin_server).completions.create(model="auto", prompt="x = ", max_tokens=3)
    assert r.model == "standin"


def test_refusals_are_clear(standin_server: ServerThread) -> None:
    c = client(standin_server)
    with pytest.raises(openai.BadRequestError, match="'temperature' must be between 0 and 2"):
        c.completions.create(model="standin", prompt="x", temperature=2.5)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        c.completions.create(model="gpt-4o", prompt="x")
    with pytest.raises(openai.BadRequestError, match="fill-in-the-middle"):
        c.completions.create(model="standin", prompt="def f(", suffix="\n")
    with pytest.raises(openai.BadRequestError, match="n = 1"):
        c.completions.create(model="standin", prompt="x", n=2)


def test_sampling_with_a_seed_is_reproducible(standin_server: ServerThread) -> None:
    """``temperature=0.7, top_p=0.9, seed=1``: a completion, twice the same, streamed too."""
    c = client(standin_server)
    kw = dict(model="standin", prompt=PROMPTS[3], max_tokens=40, temperature=0.7, top_p=0.9)
    first = c.completions.create(**kw, seed=1)  # type: ignore[call-overload]
    again = c.completions.create(**kw, seed=1)  # type: ignore[call-overload]
    assert first.choices[0].text and first.choices[0].text == again.choices[0].text
    streamed = c.completions.create(**kw, seed=1, stream=True)  # type: ignore[call-overload]
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == first.choices[0].text
    texts = {c.completions.create(**kw, seed=s).choices[0].text for s in range(2, 7)}  # type: ignore[call-overload]
    assert len(texts) > 1  # the seed matters: this is sampling, not greedy
    chat = dict(model="standin", messages=[{"role": "user", "content": "hi"}], max_tokens=20)
    a = c.chat.completions.create(**chat, temperature=0.7, top_p=0.9, seed=1)  # type: ignore[call-overload]
    b = c.chat.completions.create(**chat, temperature=0.7, top_p=0.9, seed=1)  # type: ignore[call-overload]
    assert a.choices[0].message.content == b.choices[0].message.content


def test_sixteen_concurrent_streams_equal_solo() -> None:
    """16 clients at once each get exactly what they get alone (stand-in: bit-exact)."""
    from structspec.http.app import create_app

    app = create_app(standin_engine(), model_id="standin", max_queue=32)
    with ServerThread(app) as server:
        c = client(server)

        def stream(prompt: str) -> str:
            chunks = c.completions.create(
                model="standin", prompt=prompt, max_tokens=48, stream=True
            )
            return "".join(ch.choices[0].text for ch in chunks if ch.choices)

        alone = [stream(p) for p in PROMPTS]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            together = list(pool.map(stream, PROMPTS))
    assert together == alone
    assert alone == [reference(p, 48) for p in PROMPTS]

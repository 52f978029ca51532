"""``structspec serve`` on the real default model (Gemma 3 270M), end to end."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tests.helpers.http_server import ServerThread

from structspec.config import Settings

PROMPTS = [
    f'def {name}({args}):\n    """{doc}"""\n'
    for name, args, doc in [
        ("fibonacci", "n", "Return the n-th Fibonacci number."),
        ("is_prime", "n", "Return True if n is prime."),
        ("reverse_words", "s", "Reverse the order of words in s."),
        ("flatten", "xs", "Flatten a list of lists."),
        ("gcd", "a, b", "Greatest common divisor."),
        ("count_vowels", "s", "Count the vowels in s."),
        ("binary_search", "xs, x", "Index of x in the sorted list xs, or -1."),
        ("factorial", "n", "Return n!."),
        ("mean", "xs", "Arithmetic mean of xs."),
        ("transpose", "m", "Transpose a matrix given as a list of rows."),
        ("unique", "xs", "Items of xs without duplicates, in order."),
        ("word_count", "text", "Map each word to its count."),
        ("is_palindrome", "s", "True if s reads the same backwards."),
        ("chunks", "xs, n", "Split xs into lists of n items."),
        ("max_index", "xs", "Index of the largest item."),
        ("celsius", "f", "Convert Fahrenheit to Celsius."),
    ]
]
MAX = 24


@pytest.fixture(scope="module")
def model_server() -> Iterator[ServerThread]:
    from structspec.http.app import create_app
    from structspec.runtime import load_engine

    engine = load_engine(Settings(context_size=2048), announce=lambda _m: None)
    app = create_app(engine, model_id="gemma-3-270m-q4_k_m", max_queue=32)
    with ServerThread(app) as server:
        yield server


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.mark.model
def test_openai_client_completes_and_streams(model_server: ServerThread) -> None:
    c = client(model_server)
    assert [m.id for m in c.models.list().data] == ["gemma-3-270m-q4_k_m"]
    full = c.completions.create(
        model="gemma-3-270m-q4_k_m", prompt=PROMPTS[0], max_tokens=MAX, temperature=0
    )
    assert full.usage is not None and full.usage.completion_tokens > 0
    assert full.choices[0].text.strip()
    chunks = list(
        c.completions.create(
            model="auto", prompt=PROMPTS[0], max_tokens=MAX, temperature=0, stream=True
        )
    )
    streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    # Not compared with ``full``: the second request reuses the first one's cached
    # prefix, and on llama.cpp's CPU backend a near-tie may flip with the batch
    # shape or the thread count (docs/MEASUREMENTS.md §2). That streaming gives the
    # very same text is proven bit-exact on the stand-in
    # (test_openai_client.py::test_stream_equals_non_stream).
    assert streamed.strip() and len([ch for ch in chunks if ch.choices]) > 1
    chat = c.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "Write a Python hello world."}],
        max_tokens=16,
        temperature=0,
    )
    assert chat.choices[0].message.role == "assistant"


@pytest.mark.model
def test_sixteen_concurrent_streams_all_complete(model_server: ServerThread) -> None:
    """16 streams at once on the real model: each one completes on its own terms.

    Only what batch-shape noise cannot change is checked. Whether a stream
    carries exactly its own prompt's completion (no crosstalk) is proven
    bit-exact on the stand-in model
    (``test_openai_client.py::test_sixteen_concurrent_streams_equal_solo``):
    on llama.cpp's CPU backend a first-token near-tie may flip with prefix
    reuse, so texts cannot be compared across histories here.
    """
    c = client(model_server)

    def stream(prompt: str) -> tuple[str, str | None, Any]:
        chunks = list(
            c.completions.create(
                model="auto",
                prompt=prompt,
                max_tokens=MAX,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
        return text, reasons[-1], chunks[-1].usage

    alone = [stream(p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(stream, PROMPTS))
    for (_, _, usage_alone), (text, reason, usage) in zip(alone, together, strict=True):
        assert text and reason in ("length", "stop")
        assert usage is not None and usage_alone is not None
        # The prompt is tokenized the same way whatever else runs: no noise here.
        assert usage.prompt_tokens == usage_alone.prompt_tokens
        assert 0 < usage.completion_tokens <= MAX
        if reason == "length":
            assert usage.completion_tokens == MAX

"""The completion service through a remote backend: real HTTP, the editor machinery kept.

The backend is ``tests.helpers.fake_backends`` (a real HTTP server speaking
llama-server's, Ollama's and the OpenAI protocols); the service must never
open a local model while ``backend`` is set.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import threading
from typing import Any

import pytest
from tests.completion.test_prewarm import wait_for
from tests.helpers.fake_backends import Behaviour, FakeBackend

from structspec.completion.documents import Range, TextChange
from structspec.completion.remote import (
    MAX_CHARS_PER_TOKEN,
    PREGENERATION_FACTOR,
    SILENT_REQUESTS,
    text_window,
)
from structspec.completion.service import CompletionRequest, CompletionService, Status
from structspec.config import Settings

TEXT = "def add(a, b):\n    return a + b\n\nx = add(1, 2)\ny = "
END = CompletionRequest("u", 4, 4)


def sent_prefix(body: dict) -> str:
    """The text before the cursor an /infill body carries: ``input_prefix``, then the line."""
    return body["input_prefix"] + body.get("prompt", "")


def no_local_model(spec: str, **kwargs: Any) -> Any:
    raise AssertionError("a local model was opened although `backend` is set")


def service(
    url: str, **settings: Any
) -> tuple[CompletionService, list[Status], list[tuple[str, str]]]:
    statuses: list[Status] = []
    messages: list[tuple[str, str]] = []
    base: dict[str, Any] = dict(backend=url, debounce_ms=0, max_tokens=32, max_latency_ms=10_000)
    base.update(settings)
    svc = CompletionService(
        Settings(**base),
        on_status=statuses.append,
        on_message=lambda level, text: messages.append((level, text)),
        open_model=no_local_model,
    )
    return svc, statuses, messages


def test_completes_through_the_backend_and_types_through_without_a_request() -> None:
    async def scenario() -> None:
        with FakeBackend() as server:
            svc, statuses, messages = service(server.url)
            svc.configure(svc.settings)
            svc.open_document("u", "python", 1, TEXT)
            first = await svc.complete(END)
            assert first is not None and first.text == "add(3, 4)" and first.source == "model"
            (seen,) = server.posts("/infill")
            assert sent_prefix(seen.body) == TEXT and seen.body["stop"] == ["\n"]
            status = svc.status()
            assert status.model == f"llama-server /infill at {server.url}"
            assert status.last_latency_ms is not None and status.tokens_per_second is not None
            # Typing what the suggestion says: answered from it, no request.
            svc.change_document("u", 2, [TextChange("ad", Range(4, 4, 4, 4))])
            second = await svc.complete(CompletionRequest("u", 4, 6))
            assert second is not None and second.text == "d(3, 4)" and second.source == "cache"
            assert len(server.posts("/infill")) == 1
            assert not [m for m in messages if m[0] == "error"]
            svc.close()

    asyncio.run(scenario())


def test_a_new_keystroke_closes_the_stream_in_flight() -> None:
    async def scenario() -> None:
        behaviour = Behaviour(endless=True, chunk_delay=0.01)
        with FakeBackend(behaviour) as server:
            svc, _, _ = service(server.url, max_tokens=4000, max_generation_ms=600_000)
            svc.open_document("u", "python", 1, TEXT)
            task = asyncio.ensure_future(svc.complete(END))
            await wait_for(lambda: bool(server.requests))
            svc.change_document("u", 2, [TextChange(" ", Range(4, 4, 4, 4))])
            behaviour.endless = False
            second = await svc.complete(CompletionRequest("u", 4, 5))
            assert await task is None  # superseded
            assert server.closed.is_set(), "the server kept generating for a stale request"
            assert second is not None and second.text == "add(3, 4)"
            svc.close()

    asyncio.run(scenario())


def test_a_refused_request_is_reported_once_and_clears_when_fixed() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(api_key="k")) as server:
            svc, statuses, messages = service(server.url)
            svc.open_document("u", "python", 1, TEXT)
            assert await svc.complete(END) is None
            assert await svc.complete(CompletionRequest("u", 4, 4, invoked=True)) is None
            errors = [text for level, text in messages if level == "error"]
            assert len(errors) == 1 and "backendApiKey" in errors[0]
            assert svc.status().state == "error" and "401" in svc.status().message
            server.behaviour.api_key = ""  # the server's key requirement lifted
            svc._sessions["u"].pending = None
            answer = await svc.complete(CompletionRequest("u", 4, 4, invoked=True))
            assert answer is not None and answer.text == "add(3, 4)"
            assert svc.status().state != "error"
            svc.close()

    asyncio.run(scenario())


def test_an_unreachable_backend_names_the_url_in_the_status() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def scenario() -> None:
        svc, _, messages = service(url)
        svc.open_document("u", "python", 1, TEXT)
        assert await svc.complete(END) is None
        assert await svc.complete(CompletionRequest("u", 4, 4, invoked=True)) is None
        status = svc.status()
        assert status.state == "error" and url in status.message and "retrying" in status.message
        assert len([m for m in messages if m[0] == "error"]) == 1
        svc.close()

    asyncio.run(scenario())


def test_a_fallback_is_said_once_as_a_warning() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(fim=False)) as server:
            svc, _, messages = service(server.url, backend_model="qwen2.5-coder-7b")
            svc.open_document("u", "python", 1, TEXT)
            first = await svc.complete(END)
            svc._sessions["u"].pending = None
            await svc.complete(CompletionRequest("u", 4, 4, invoked=True))
            assert first is not None and first.text == "add(3, 4)"
            warnings = [text for level, text in messages if level == "warning"]
            assert len(warnings) == 1 and "no FIM tokens" in warnings[0]
            assert svc.status().model.startswith("llama-server /completion at ")
            svc.close()

    asyncio.run(scenario())


def test_inside_a_line_a_prompt_without_the_rest_must_join_it() -> None:
    """``/completion`` without a FIM template sends the text before the cursor alone: a
    line that does not end with the code after the cursor is not shown (``suggest.clean``);
    ``/infill`` sends that code, and the model's insertion is kept."""

    async def ask(behaviour: Behaviour) -> tuple[Any, Any, str]:
        line = "x = add(1, 2)"
        with FakeBackend(behaviour) as server:
            svc, _, _ = service(server.url)
            svc.open_document("u", "python", 1, line)
            past = await svc.complete(CompletionRequest("u", 0, len("x = add(")))
            behaviour.answer = "3, 1, 2)\n"
            svc.change_document("u", 2, [TextChange("", Range(0, 0, 0, 0))])  # a new job
            joined = await svc.complete(CompletionRequest("u", 0, len("x = add(")))
            model = svc.status().model
            svc.close()
        return past, joined, model

    past, joined, model = asyncio.run(ask(Behaviour(fim=False, answer="3)\n")))
    assert model.startswith("llama-server /completion at ")
    assert past is None  # "3)" would push "1, 2)" right
    assert joined is not None and joined.text == "3, " and joined.line_suffix == "1, 2)"
    past, _, model = asyncio.run(ask(Behaviour(answer="3)\n")))
    assert model.startswith("llama-server /infill at ")
    assert past is not None and past.text == "3)"


def test_a_block_is_answered_with_its_first_line() -> None:
    async def scenario() -> None:
        answer = "\n    total = a + b\n    return total\n\nprint(1)\n"
        with FakeBackend(Behaviour(answer=answer)) as server:
            svc, _, _ = service(server.url)
            text = "def add(a, b):"
            svc.open_document("u", "python", 1, text)
            got = await svc.complete(CompletionRequest("u", 0, len(text)))
            assert got is not None and got.text == "\n    total = a + b"
            assert server.posts("/infill")[0].body["stop"] == []
            svc.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("window_tokens", [8, 64])
def test_the_prompt_window_is_stable_while_typing(window_tokens: int) -> None:
    settings = Settings(window_tokens=window_tokens)
    text = "".join(f"value_{i} = compute({i})\n" for i in range(100))
    starts = set()
    for extra in ("r", "re", "res", "resu", "resul"):
        doc = text + extra
        prefix, suffix = text_window(doc, len(doc), settings)
        assert doc.endswith(prefix) and suffix == ""
        assert len(prefix) <= window_tokens * 4 + len(extra)
        starts.add(len(doc) - len(prefix))
    assert len(starts) == 1


@pytest.mark.parametrize(
    ("answer", "healing", "expected", "sent"),
    [
        ("return a + b\n", True, "urn a + b", "def f(a, b):\n    "),  # the word, finished
        ("pass\n", True, None, "def f(a, b):\n    "),  # another word: nothing
        ("re", True, None, "def f(a, b):\n    "),  # stopped before the word was written
        ("urn a\n", False, "urn a", "def f(a, b):\n    ret"),  # healing off: as typed
    ],
)
def test_token_healing_backs_up_over_the_partial_word(
    answer: str, healing: bool, expected: str | None, sent: str
) -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(answer=answer)) as server:
            svc, _, _ = service(server.url, token_healing=healing)
            text = "def f(a, b):\n    ret"
            svc.open_document("u", "python", 1, text)
            got = await svc.complete(CompletionRequest("u", 1, 7))
            assert (got.text if got is not None else None) == expected
            (seen,) = server.posts("/infill")
            assert sent_prefix(seen.body) == sent
            # llama-server is told the word; the answer is still checked (a server may not obey)
            assert seen.body.get("grammar") == ('root ::= "ret" .*' if healing else None)
            svc.close()

    asyncio.run(scenario())


def test_backend_auto_uses_the_server_detect_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    import structspec.detect as detect

    async def scenario() -> None:
        with FakeBackend() as server:
            port = int(server.url.rsplit(":", 1)[1])
            monkeypatch.setattr(detect, "KNOWN_BACKENDS", (("llama.cpp server", port),))
            svc, _, messages = service("auto")
            svc.open_document("u", "python", 1, TEXT)
            got = await svc.complete(END)
            assert got is not None and got.text == "add(3, 4)"
            assert svc.status().model == f"llama-server /infill at {server.url}"
            svc.close()

    asyncio.run(scenario())


def test_backend_auto_without_a_server_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import structspec.detect as detect

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(detect, "KNOWN_BACKENDS", (("llama.cpp server", port),))

    async def scenario() -> None:
        svc, _, messages = service("auto")
        svc.configure(svc.settings)  # the warm-up looks first (as the language server's does)
        await wait_for(lambda: svc.status().state == "error")
        await asyncio.sleep(0.1)  # the warm-up's end does not clear it
        assert svc.status().state == "error"
        svc.open_document("u", "python", 1, TEXT)
        assert await svc.complete(END) is None
        assert await svc.complete(CompletionRequest("u", 4, 4, invoked=True)) is None
        errors = [text for level, text in messages if level == "error"]
        assert len(errors) == 1 and "backend auto found no inference server" in errors[0]
        assert f":{port}" in errors[0] and svc.status().state == "error"
        svc.close()

    asyncio.run(scenario())


def test_backend_auto_survives_a_probe_that_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """A defect in the probe (an odd local server once raised TypeError there) costs the
    suggestion and is looked at again later, never every request's error."""
    import structspec.detect as detect

    probes: list[int] = []

    def failing_probe(*args: Any, **kwargs: Any) -> list[detect.Backend]:
        probes.append(1)
        raise TypeError("an odd model list")

    monkeypatch.setattr(detect, "probe_backends", failing_probe)

    async def scenario() -> None:
        svc, _, messages = service("auto")
        svc.open_document("u", "python", 1, TEXT)
        assert await svc.complete(END) is None
        assert await svc.complete(CompletionRequest("u", 4, 4, invoked=True)) is None
        assert len(probes) == 1  # not again at each request
        errors = [text for level, text in messages if level == "error"]
        assert len(errors) == 1 and "backend auto found no inference server" in errors[0]
        svc.close()

    asyncio.run(scenario())


def test_backend_auto_says_what_answered_on_a_port_and_how(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port that answers, but not as an inference server, is named in the message."""
    from tests.helpers.raw_backend import RawBackend, http_answer

    import structspec.detect as detect

    odd = http_answer("200 OK", b'{"data": 5}', b"Content-Type: application/json")
    with RawBackend(lambda method, path: odd) as server:
        port = int(server.url.rsplit(":", 1)[1])
        monkeypatch.setattr(detect, "KNOWN_BACKENDS", (("vLLM", port),))

        async def scenario() -> None:
            svc, _, messages = service("auto")
            svc.open_document("u", "python", 1, TEXT)
            assert await svc.complete(END) is None
            errors = [text for level, text in messages if level == "error"]
            assert len(errors) == 1
            assert f":{port} answered, but GET /v1/models did not return a model list" in errors[0]
            svc.close()

        asyncio.run(scenario())


def test_a_never_ending_stream_is_cut_at_a_word_and_closed() -> None:
    async def scenario() -> None:
        behaviour = Behaviour(endless=True, chunk_delay=0.005)
        with FakeBackend(behaviour) as server:
            svc, _, messages = service(server.url, max_tokens=8192, max_generation_ms=100)
            svc.open_document("u", "python", 1, TEXT)
            got = await svc.complete(END)
            assert got is not None and re.fullmatch(r"(t\d+ )*t\d+", got.text), got
            await wait_for(server.closed.is_set)
            assert not [m for m in messages if m[0] == "error"]
            svc.close()

    asyncio.run(scenario())


def test_a_server_ignoring_max_tokens_is_cut_at_a_bounded_length() -> None:
    """One endless word, written at once: a suggestion of 900,000 characters reached the
    editor (``maxTokens`` 24), and a longer one held the worker for minutes."""
    rng = random.Random(4)
    word = "".join(rng.choice("abcdefghij") for _ in range(200_000))  # no word end, no loop

    async def scenario() -> None:
        with FakeBackend(Behaviour(answer=word)) as server:
            svc, _, _ = service(server.url, max_tokens=8)
            svc.open_document("u", "python", 1, TEXT)
            got = await svc.complete(END)
            assert got is not None and 0 < len(got.text) <= 8 * MAX_CHARS_PER_TOKEN
            assert word.startswith(got.text)
            svc.close()

    asyncio.run(scenario())


def test_a_stalled_server_is_cut_by_the_latency_budget() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(stall=True)) as server:
            # Long enough for the request to reach the server on a loaded machine.
            svc, _, messages = service(server.url, max_latency_ms=2000)
            svc.open_document("u", "python", 1, TEXT)
            assert await svc.complete(END) is None
            assert server.posts("/infill")
            await wait_for(server.closed.is_set)
            assert not server.finished.is_set()
            assert not [m for m in messages if "sent nothing" in m[1]]  # once is no pattern
            for _ in range(SILENT_REQUESTS - 1):
                svc._sessions["u"].pending = None
                assert await svc.complete(CompletionRequest("u", 4, 4, invoked=True)) is None
            (warning,) = [m for m in messages if "sent nothing" in m[1]]
            assert warning[0] == "warning" and "maxLatencyMs" in warning[1]
            svc.close()

    asyncio.run(scenario())


def test_switching_between_backend_and_local_model_needs_no_restart() -> None:
    from dataclasses import replace

    from structspec.model.standin import StandInModel

    opened: list[str] = []

    def open_model(spec: str, **kwargs: Any) -> StandInModel:
        opened.append(spec)
        return StandInModel(eos_bias=-3.0)

    async def scenario() -> None:
        with FakeBackend() as server:
            local = Settings(model="standin", sources=("lookup",), debounce_ms=0, max_tokens=16)
            svc = CompletionService(replace(local, backend=server.url), open_model=open_model)
            svc.configure(svc.settings)
            svc.open_document("u", "python", 1, TEXT)
            remote = await svc.complete(END)
            assert remote is not None and remote.text == "add(3, 4)" and opened == []
            svc.configure(local)  # backend emptied: the local model, at once
            svc._sessions["u"].pending = None
            await svc.complete(CompletionRequest("u", 4, 4, invoked=True))
            assert opened == ["standin"] and svc.status().model != remote_name(server)
            svc.configure(replace(local, backend=server.url))  # and back
            svc._sessions["u"].pending = None
            again = await svc.complete(CompletionRequest("u", 4, 4, invoked=True))
            assert again is not None and again.text == "add(3, 4)"
            assert svc.status().model == remote_name(server) and len(server.posts("/infill")) == 2
            svc.close()

    asyncio.run(scenario())


def remote_name(server: FakeBackend) -> str:
    return f"llama-server /infill at {server.url}"


# -- pre-generation: one longer request while the user reads ---------------------------

LONG = "add(3, 4)\nz = add(5, 6)\n"


async def shown_and_pregenerated(svc: CompletionService, server: FakeBackend) -> None:
    """The first answer at ``END``, then its longer request in idle time, kept."""
    first = await svc.complete(END)
    assert first is not None and first.text == "add(3, 4)" and first.source == "model"
    await wait_for(lambda: len(server.posts("/infill")) == 2)
    asked, longer = server.posts("/infill")
    assert asked.body["stop"] == ["\n"] and longer.body["stop"] == []
    assert longer.body["n_predict"] == PREGENERATION_FACTOR * asked.body["n_predict"]
    assert sent_prefix(longer.body) == sent_prefix(asked.body)
    await wait_for(lambda: svc._sessions["u"].pending.continuation is not None)


def test_typing_past_the_suggestion_is_answered_from_the_longer_request() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(answer=LONG)) as server:
            svc, _, _ = service(server.url)
            svc.open_document("u", "python", 1, TEXT)
            await shown_and_pregenerated(svc, server)
            # The whole suggestion typed: what follows it comes from the longer request.
            svc.change_document("u", 2, [TextChange("add(3, 4)", Range(4, 4, 4, 4))])
            at_end = await svc.complete(CompletionRequest("u", 4, 13))
            assert at_end is not None and at_end.source == "cache"
            assert at_end.text == "\nz = add(5, 6)"
            # And on, past the line's end (Enter): the next line, no request either.
            svc.change_document("u", 3, [TextChange("\n", Range(4, 13, 4, 13))])
            next_line = await svc.complete(CompletionRequest("u", 5, 0))
            assert next_line is not None and next_line.source == "cache"
            assert next_line.text == "z = add(5, 6)"
            assert len(server.posts("/infill")) == 2  # the answer and its longer request
            svc.close()

    asyncio.run(scenario())


def test_an_edit_that_leaves_the_longer_answer_sends_a_request() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(answer=LONG)) as server:
            svc, _, _ = service(server.url)
            svc.open_document("u", "python", 1, TEXT)
            await shown_and_pregenerated(svc, server)
            svc.change_document("u", 2, [TextChange("-", Range(4, 4, 4, 4))])
            got = await svc.complete(CompletionRequest("u", 4, 5))
            assert got is not None and got.source == "model"
            assert len(server.posts("/infill")) == 3
            assert sent_prefix(server.posts("/infill")[2].body) == TEXT + "-"
            svc.close()

    asyncio.run(scenario())


def test_a_keystroke_closes_the_longer_request_in_flight() -> None:
    async def scenario() -> None:
        with FakeBackend() as server:
            svc, _, _ = service(server.url, max_generation_ms=600_000)
            svc.open_document("u", "python", 1, TEXT)
            first = await svc.complete(END)
            assert first is not None and first.text == "add(3, 4)"
            # The longer request's stream goes on until the client goes away.
            server.behaviour.endless, server.behaviour.chunk_delay = True, 0.01
            await wait_for(lambda: len(server.posts("/infill")) == 2)
            longer = server.posts("/infill")[1]
            await wait_for(lambda: longer.chunks > 0)
            server.behaviour.endless, server.behaviour.chunk_delay = False, 0.0
            svc.change_document("u", 2, [TextChange("-", Range(4, 4, 4, 4))])
            got = await svc.complete(CompletionRequest("u", 4, 5))
            assert got is not None and got.source == "model" and got.text == "add(3, 4)"
            assert longer.body["stop"] == []
            await wait_for(lambda: longer.closed)  # the server stops writing it
            svc.close()

    asyncio.run(scenario())


def test_typing_through_the_suggestion_lets_the_longer_request_go_on() -> None:
    async def scenario() -> None:
        with FakeBackend(Behaviour(answer=LONG)) as server:
            svc, _, _ = service(server.url)
            svc.open_document("u", "python", 1, TEXT)
            first = await svc.complete(END)
            assert first is not None and first.text == "add(3, 4)"
            gate = server.behaviour.gate = threading.Event()  # the longer one waits after a chunk
            await wait_for(lambda: len(server.posts("/infill")) == 2)
            longer = server.posts("/infill")[1]
            await wait_for(lambda: longer.chunks > 0)
            # A keystroke served by the suggestion on screen while it streams.
            svc.change_document("u", 2, [TextChange("ad", Range(4, 4, 4, 4))])
            typed = await svc.complete(CompletionRequest("u", 4, 6))
            assert typed is not None and typed.source == "cache" and typed.text == "d(3, 4)"
            gate.set()  # the rest of the longer answer: it was not stopped
            await wait_for(lambda: svc._sessions["u"].pending.continuation is not None)
            assert not longer.closed and svc._sessions["u"].pending.continuation.ended
            svc.change_document("u", 3, [TextChange("d(3, 4)\n", Range(4, 6, 4, 6))])
            next_line = await svc.complete(CompletionRequest("u", 5, 0))
            assert next_line is not None and next_line.source == "cache"
            assert next_line.text == "z = add(5, 6)"
            assert len(server.posts("/infill")) == 2
            svc.close()

    asyncio.run(scenario())


def test_the_longer_request_backs_up_over_the_partial_word_too() -> None:
    async def scenario() -> None:
        text = "def f(a, b):\n    ret"
        with FakeBackend(Behaviour(answer="return a + b\n    x = 1\n")) as server:
            svc, _, _ = service(server.url)
            svc.open_document("u", "python", 1, text)
            first = await svc.complete(CompletionRequest("u", 1, 7))
            assert first is not None and first.text == "urn a + b"
            await wait_for(lambda: len(server.posts("/infill")) == 2)
            assert sent_prefix(server.posts("/infill")[1].body) == "def f(a, b):\n    "
            await wait_for(lambda: svc._sessions["u"].pending.continuation is not None)
            svc.change_document("u", 2, [TextChange("urn a + b", Range(1, 7, 1, 7))])
            after = await svc.complete(CompletionRequest("u", 1, 16))
            assert after is not None and after.source == "cache" and after.text == "\n    x = 1"
            assert len(server.posts("/infill")) == 2
            svc.close()

    asyncio.run(scenario())

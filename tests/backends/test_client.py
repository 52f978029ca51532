"""The remote backend client over real HTTP against a server speaking each protocol.

The server (``tests.helpers.fake_backends``) answers as llama-server, Ollama
and an OpenAI-compatible server document it; nothing of the client is mocked.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import replace

import pytest
from tests.helpers.fake_backends import LLAMA, Behaviour, FakeBackend
from tests.helpers.raw_backend import RawBackend

from structspec.backends.address import split_url
from structspec.backends.client import (
    BackendError,
    BackendUnreachable,
    RemoteBackend,
    RemoteRequest,
    healing_grammar,
)
from structspec.backends.fim import parse_template, template_for

REQUEST = RemoteRequest("x = add(1, 2)\ny = ", "\nprint(y)\n", 16, ("\n",), "file:///a.py")
QWEN = "<|fim_prefix|>x = add(1, 2)\ny = <|fim_suffix|>\nprint(y)\n<|fim_middle|>"


@pytest.fixture
def server() -> Iterator[FakeBackend]:
    with FakeBackend() as fake:
        yield fake


def text_of(backend: RemoteBackend, request: RemoteRequest = REQUEST) -> str:
    return "".join(backend.stream(request))


def test_infill_streams_with_prefix_suffix_extra_cache_and_slot(server: FakeBackend) -> None:
    backend = RemoteBackend(server.url)
    extra = (("util.py", "def add(a, b):\n    return a + b\n"),)
    request = RemoteRequest(REQUEST.prefix, REQUEST.suffix, 16, ("\n",), "file:///a.py", extra)
    assert text_of(backend, request) == "add(3, 4)\n"
    (seen,) = server.posts("/infill")
    # The cursor's line after the FIM middle token (``prompt``), as llama.vim sends it.
    assert seen.body["input_prefix"] == "x = add(1, 2)\n" and seen.body["prompt"] == "y = "
    assert seen.body["input_suffix"] == REQUEST.suffix
    assert seen.body["input_extra"] == [{"filename": "util.py", "text": extra[0][1]}]
    assert seen.body["stream"] is True and seen.body["cache_prompt"] is True
    assert seen.body["n_predict"] == 16 and seen.body["stop"] == ["\n"]
    assert seen.body["id_slot"] == 0
    assert backend.name.startswith("llama-server /infill at " + server.url)
    assert backend.take_notes() == []


def test_each_document_keeps_its_slot(server: FakeBackend) -> None:
    backend = RemoteBackend(server.url)
    for doc in ("file:///a.py", "file:///b.py", "file:///a.py", "file:///c.py", "file:///a.py"):
        text_of(backend, RemoteRequest("x", "", 4, (), doc))
    # two slots: c takes b's (least recently used), a keeps its own throughout
    assert [r.body["id_slot"] for r in server.posts("/infill")] == [0, 1, 0, 1, 0]


def test_model_without_fim_tokens_falls_back_to_completion(server: FakeBackend) -> None:
    server.behaviour.fim = False
    backend = RemoteBackend(server.url, model="qwen2.5-coder-7b")
    assert text_of(backend) == "add(3, 4)\n"
    assert text_of(backend) == "add(3, 4)\n"
    assert len(server.posts("/infill")) == 1  # remembered: asked once
    first, _ = server.posts("/completion")
    assert first.body["prompt"] == QWEN
    assert first.body["cache_prompt"] is True and first.body["id_slot"] == 0
    (note,) = backend.take_notes()
    assert "no FIM tokens" in note and "llama-server /completion" in note
    assert backend.protocol == "completion"


def test_openai_compatible_server_after_404s_gets_a_fim_prompt() -> None:
    with FakeBackend(Behaviour(endpoints=("openai",))) as server:
        backend = RemoteBackend(server.url)
        assert text_of(backend) == "add(3, 4)\n"
        (seen,) = server.posts("/v1/completions")
        assert seen.body["model"] == "qwen2.5-coder-1.5b"  # the server's first model
        assert seen.body["prompt"] == QWEN
        assert seen.body["stream"] is True and seen.body["max_tokens"] == 16
        assert backend.protocol == "openai"
        (note,) = backend.take_notes()
        assert note.endswith("; using OpenAI-compatible /v1/completions")
        for path in ("/infill", "/completion", "/api/generate"):
            assert f"{server.url}{path} answered 404" in note


def test_unknown_model_family_completes_from_the_prefix_and_says_so() -> None:
    with FakeBackend(Behaviour(endpoints=("openai",), model="mystery-7b")) as server:
        backend = RemoteBackend(server.url + "/v1")  # pinned: nothing else is tried
        assert text_of(backend) == "add(3, 4)\n"
        assert [r.path for r in server.requests] == ["/v1/completions"]
        assert server.requests[0].body["prompt"] == REQUEST.prefix
        assert any("fimTemplate" in n for n in backend.take_notes())


def test_fim_template_setting_wins() -> None:
    with FakeBackend(Behaviour(endpoints=("openai",), model="mystery-7b")) as server:
        backend = RemoteBackend(server.url + "/v1", fim_template="<A>{prefix}<B>{suffix}<C>")
        text_of(backend)
        assert server.requests[0].body["prompt"] == f"<A>{REQUEST.prefix}<B>{REQUEST.suffix}<C>"


@pytest.mark.parametrize(
    ("path", "grammar"),
    [
        ("/infill", True),
        ("/completion", True),
        ("/api/generate", False),
        ("/v1/completions", False),
    ],
)
def test_a_healed_word_is_a_grammar_for_llama_server_only(path: str, grammar: bool) -> None:
    healed = replace(REQUEST, prefix="def f(a, b):\n    ", healed="ret")
    with FakeBackend() as server:
        backend = RemoteBackend(server.url + path)  # pinned: that protocol only
        text_of(backend, healed)
        text_of(backend)  # nothing backed up over: no grammar
        first, second = server.posts(path)
        if grammar:
            assert first.body["grammar"] == 'root ::= "ret" .*'
        else:  # nothing to constrain with: the caller filters
            assert "grammar" not in first.body and "grammar" not in first.body.get("options", {})
        assert "grammar" not in second.body


@pytest.mark.parametrize(
    ("word", "literal"),
    [
        ('say"', 'say\\"'),  # a quote would end the literal
        ("a\\b", "a\\\\b"),  # a backslash would start an escape
        ("naïve", "na\\u00EFve"),  # non-ASCII: code points
        ("變數", "\\u8B8A\\u6578"),
        ("x𝔘", "x\\U0001D518"),  # beyond the BMP: eight hex digits
        ("tab\t", "tab\\u0009"),  # a control character never goes in raw
    ],
)
def test_the_healing_grammar_escapes_the_word(word: str, literal: str) -> None:
    assert healing_grammar(word) == f'root ::= "{literal}" .*'
    with FakeBackend() as server:
        text_of(RemoteBackend(server.url), replace(REQUEST, healed=word))
        (seen,) = server.posts("/infill")
        assert seen.body["grammar"] == f'root ::= "{literal}" .*'  # as sent over HTTP


def test_ollama_generate_raw_fim_ndjson() -> None:
    with FakeBackend(Behaviour(endpoints=("ollama",))) as server:
        backend = RemoteBackend(server.url)
        assert text_of(backend) == "add(3, 4)\n"
        (seen,) = server.posts("/api/generate")
        assert seen.body["model"] == "qwen2.5-coder-1.5b:base"  # from /api/tags
        assert seen.body["raw"] is True and seen.body["prompt"] == QWEN
        assert seen.body["options"]["num_predict"] == 16 and seen.body["stream"] is True
        assert backend.protocol == "ollama"


def test_ollama_without_a_known_template_sends_the_suffix() -> None:
    with FakeBackend(Behaviour(endpoints=("ollama",), model="mystery")) as server:
        backend = RemoteBackend(server.url + "/api/generate")
        assert text_of(backend) == "add(3, 4)\n"
        (seen,) = server.posts("/api/generate")
        assert "raw" not in seen.body
        assert seen.body["prompt"] == REQUEST.prefix and seen.body["suffix"] == REQUEST.suffix


def test_ollama_unknown_model_names_the_setting() -> None:
    with FakeBackend(Behaviour(endpoints=("ollama",))) as server:
        backend = RemoteBackend(server.url, model="nope:7b")
        with pytest.raises(BackendError, match="backendModel") as info:
            text_of(backend)
        assert "not found" in str(info.value)


def test_401_names_the_api_key_setting_and_the_key_is_sent() -> None:
    with FakeBackend(Behaviour(api_key="s3cret")) as server:
        with pytest.raises(BackendError, match="backendApiKey") as info:
            text_of(RemoteBackend(server.url))
        assert "401" in str(info.value) and "Invalid API Key" in str(info.value)
        assert text_of(RemoteBackend(server.url, api_key="s3cret")) == "add(3, 4)\n"
        assert server.requests[-1].headers["Authorization"] == "Bearer s3cret"


def test_unreachable_names_the_url_and_backs_off() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    now = [100.0]
    backend = RemoteBackend(f"http://127.0.0.1:{port}", clock=lambda: now[0])
    with pytest.raises(BackendUnreachable, match=f"127.0.0.1:{port} is unreachable") as first:
        text_of(backend)
    assert "retrying in 1 s" in str(first.value)
    with pytest.raises(BackendUnreachable, match="retrying in 1 s"):
        text_of(backend)  # within the back-off: no connection tried
    now[0] += 1.5
    with pytest.raises(BackendUnreachable, match="retrying in 2 s"):
        text_of(backend)  # tried again, failed again: the wait doubles


def test_tls_error_is_named() -> None:
    with FakeBackend() as server:
        backend = RemoteBackend(server.url.replace("http://", "https://"))
        with pytest.raises(BackendError, match="TLS error"):
            text_of(backend)


def test_malformed_stream_is_an_error() -> None:
    with (
        FakeBackend(Behaviour(malformed=True)) as server,
        pytest.raises(BackendError, match="malformed"),
    ):
        text_of(RemoteBackend(server.url))


def test_json_nested_too_deep_to_parse_is_a_malformed_answer() -> None:
    with (
        FakeBackend(Behaviour(nested=True)) as server,
        pytest.raises(BackendError, match="malformed"),
    ):
        text_of(RemoteBackend(server.url))


def test_oversized_line_is_cut() -> None:
    with FakeBackend(Behaviour(oversized=True)) as server:
        with pytest.raises(BackendError, match="line over"):
            text_of(RemoteBackend(server.url))
        assert server.closed.wait(10)


def test_a_body_instead_of_a_stream_is_read() -> None:
    with FakeBackend(Behaviour(ignore_stream=True, endpoints=LLAMA)) as server:
        assert text_of(RemoteBackend(server.url)) == "add(3, 4)\n"


@pytest.mark.parametrize("endpoints", [("infill",), ("ollama",), ("openai",)])
def test_closing_the_stream_closes_the_connection(endpoints: tuple[str, ...]) -> None:
    with FakeBackend(Behaviour(endless=True, chunk_delay=0.01, endpoints=endpoints)) as server:
        stream = RemoteBackend(server.url).stream(REQUEST)
        assert [next(stream) for _ in range(3)] == ["t0 ", "t1 ", "t2 "]
        stream.close()  # type: ignore[attr-defined]
        assert server.closed.wait(10), "the server kept streaming to nobody"


def test_stop_ends_a_stalled_stream_and_closes_it() -> None:
    with FakeBackend(Behaviour(stall=True)) as server:
        asked = 0

        def stop() -> bool:  # once the server has the request, and is sending nothing
            nonlocal asked
            asked += 1
            return bool(server.posts("/infill"))

        assert "".join(RemoteBackend(server.url).stream(REQUEST, stop)) == ""
        assert asked >= 1
        assert server.closed.wait(10)
        assert not server.finished.is_set()


def test_no_endpoint_at_all_says_so() -> None:
    with (
        FakeBackend(Behaviour(endpoints=())) as server,
        pytest.raises(BackendError, match="no completion endpoint"),
    ):
        text_of(RemoteBackend(server.url))


def test_urls() -> None:
    assert split_url("http://h:8080/") == ("http://h:8080", None)
    assert split_url("https://h/llm/v1") == ("https://h/llm", "openai")
    assert split_url("http://h:11434/api/generate") == ("http://h:11434", "ollama")
    with pytest.raises(ValueError, match="http"):
        split_url("h:8080")


def test_fim_templates() -> None:
    assert template_for("Qwen/Qwen2.5-Coder-7B").family == "Qwen2.5-Coder"  # type: ignore[union-attr]
    assert template_for("starcoder2:3b").family == "StarCoder2"  # type: ignore[union-attr]
    assert template_for("deepseek-coder-6.7b-base").family == "DeepSeek-Coder"  # type: ignore[union-attr]
    assert template_for("codellama:7b-code").prompt("a", "b") == "<PRE> a <SUF>b <MID>"  # type: ignore[union-attr]
    assert template_for("codestral-22b").prompt("a", "b") == "[SUFFIX]b[PREFIX]a"  # type: ignore[union-attr]
    assert template_for("llama3") is None
    assert parse_template("{prefix}<X>{suffix}").prompt("{a}", "b") == "{a}<X>b"
    with pytest.raises(ValueError, match="prefix"):
        parse_template("<X>{suffix}")
    with pytest.raises(ValueError, match="no other field"):
        parse_template("{prefix}{suffix}{middle}")


@pytest.mark.parametrize(
    "layout",
    [
        "{prefix:x}{suffix}",
        "{prefix:>300000000}{suffix}",
        "{prefix!r}{suffix}",
        "{prefix}{prefix}{suffix}",
    ],
)
def test_a_fim_template_field_takes_no_format_and_comes_once(layout: str) -> None:
    """Such a template passed the setting's check and then failed (or sent a Python repr,
    or a 300 MB prompt) at every request."""
    with pytest.raises(ValueError, match="fimTemplate"):
        parse_template(layout)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.mark.parametrize(
    ("path", "events"),
    [
        ("/infill", [b'data: {"content": "a"}\n\n', b'data: {"content": "b", "stop": true}\n\n']),
        (
            "/v1",
            [
                b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n',
                b'data: {"choices": [{"text": "b", "finish_reason": "length"}]}\n\n',
                b"data: [DONE]\n\n",
            ],
        ),
    ],
    ids=["llama-server", "openai"],
)
def test_one_connection_serves_every_completion(path: str, events: list[bytes]) -> None:
    """The answer's body was closed before its end (the event after the last), which
    closes its connection: a new one, on https a new TLS handshake, per completion."""
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    answer = head + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n"
    not_here = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    def respond(method: str, path: str) -> bytes:
        return answer if method == "POST" else not_here

    with RawBackend(respond, keep_alive=True) as server:
        backend = RemoteBackend(server.url + path, model="m")
        assert "".join(backend.stream(REQUEST)) == "ab"  # (metadata asked beside it)
        opened = server.connections
        assert ["".join(backend.stream(REQUEST)) for _ in range(4)] == ["ab"] * 4
        backend.close()
        assert server.connections == opened

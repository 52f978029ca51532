"""A stateful fuzz of one real ``structspec-lsp`` process (hypothesis ``RuleBasedStateMachine``).

Random opens, edits (in and out of range), closes, inline and menu completion
requests, cancellations, settings changes (valid and not) and bad frames, all
on one server process. After every run: the server is alive, every request got
exactly one answer (a result, ``RequestCancelled`` or ``InvalidParams`` for
the positions that are negative), no answer carries a traceback, and the log
has none. Deterministic: ``derandomize`` and no example database.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from tests.helpers.raw_client import RawClient, frame, no_traceback

URIS = st.sampled_from([f"file:///work/f{i}.py" for i in range(3)])
TEXTS = st.text(alphabet="ab xy=():.,\n\t\r'é😀\x00", max_size=40)
LINES = st.integers(min_value=-1, max_value=8)
COLUMNS = st.integers(min_value=-1, max_value=50)
SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "maxTokens": st.sampled_from([1, 8, 24, "many", -1]),
        "debounceMs": st.sampled_from([0, 3, -5, "x"]),
        "languages": st.sampled_from([[], ["python"], ["rust"], 42]),
        "speculative": st.sampled_from([True, False, "perhaps"]),
        "sources": st.sampled_from([["lookup"], ["telepathy"], []]),
        "noSuchSetting": st.just(1),
    },
)
#: Bad frames that end where they start: each one costs only itself.
BAD_FRAMES = st.sampled_from(
    [
        b"Content-Length: 1000000000000\r\n\r\n",
        b"Content-Length: 99999999999999999999\r\n\r\n{}",
        b"Content-Length: abc\r\n\r\n{}",
        b"Content-Length: -3\r\n\r\n{}",
        b"Content-Length: 4\r\n\r\n" + b'{"jsonrpc": "2.0", "method": "x"}',  # cut short
        b"garbage without a header",
        frame(b"{not json"),
        frame(b"[1, 2, 3]"),
        frame(
            b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 1}}'
        ),
        frame(b'{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": [1]}}'),
        frame(b'{"jsonrpc": "2.0", "method": "$/unknownNotification", "params": {}}'),
    ]
)
ALLOWED_ERRORS = {-32800, -32602}  # RequestCancelled; InvalidParams (a negative position)


class LspMachine(RuleBasedStateMachine):
    client: RawClient  # set by the test
    outcomes: Counter[str]

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[Any] = []
        self.versions: dict[str, int] = {}

    @rule(uri=URIS, text=TEXTS)
    def open(self, uri: str, text: str) -> None:
        self.versions[uri] = 1
        self.client.open(uri, text)

    @rule(uri=URIS, text=TEXTS, start=st.tuples(LINES, COLUMNS), end=st.tuples(LINES, COLUMNS))
    def change(self, uri: str, text: str, start: tuple, end: tuple) -> None:
        version = self.versions.get(uri, 0) + 1
        self.versions[uri] = version
        rng = {
            "start": {"line": max(0, start[0]), "character": max(0, start[1])},
            "end": {"line": max(0, end[0]), "character": max(0, end[1])},
        }
        self.client.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": rng, "text": text}],
            },
        )

    @rule(uri=URIS)
    def close(self, uri: str) -> None:
        self.versions.pop(uri, None)
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    @rule(uri=URIS, line=LINES, column=COLUMNS, invoked=st.booleans())
    def inline(self, uri: str, line: int, column: int, invoked: bool) -> None:
        params = {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": column},
            "context": {"triggerKind": 1 if invoked else 2},
        }
        self.pending.append(self.client.request("textDocument/inlineCompletion", params))

    @rule(uri=URIS, line=LINES, column=COLUMNS)
    def completion(self, uri: str, line: int, column: int) -> None:
        params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": column}}
        self.pending.append(self.client.request("textDocument/completion", params))

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        msg_id = data.draw(st.sampled_from(self.pending))
        self.client.notify("$/cancelRequest", {"id": msg_id})

    @rule(values=SETTINGS, nested=st.booleans())
    def configure(self, values: dict, nested: bool) -> None:
        self.client.notify(
            "workspace/didChangeConfiguration",
            {"settings": {"structspec": values} if nested else values},
        )

    @rule(data=BAD_FRAMES)
    def bad_frame(self, data: bytes) -> None:
        self.client.send_raw(data)

    @rule()
    def status(self) -> None:
        params = {"command": "structspec.status", "arguments": []}
        self.pending.append(self.client.request("workspace/executeCommand", params))

    @invariant()
    def alive(self) -> None:
        assert self.client.alive(), self.client.stderr

    def teardown(self) -> None:
        for msg_id in self.pending:
            answer = self.client.response(msg_id, timeout=60)
            if "error" in answer:
                error = answer["error"]
                assert error["code"] in ALLOWED_ERRORS, answer
                assert "data" not in error or not error["data"], answer
                assert "Traceback" not in json.dumps(answer)
                self.outcomes["cancelled" if error["code"] == -32800 else "invalid"] += 1
            else:
                self.outcomes["result" if answer["result"] is not None else "null"] += 1
        answered = Counter(m.get("id") for m in self.client.responses())
        for msg_id in self.pending:
            assert answered[msg_id] == 1, (msg_id, answered[msg_id])


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_random_sessions_never_crash_and_answer_every_request():
    with RawClient() as client:
        client.initialize()
        LspMachine.client = client
        LspMachine.outcomes = Counter()
        run_state_machine_as_test(
            LspMachine,
            settings=settings(
                max_examples=12,
                stateful_step_count=30,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
        print(f"fuzz outcomes: {dict(LspMachine.outcomes)}")
        assert LspMachine.outcomes["result"] > 0  # the fuzz reached real completions
        assert client.alive(), client.stderr
        assert client.shutdown_and_exit() == 0
        assert no_traceback(client.stderr), client.stderr

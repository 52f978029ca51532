"""The infill suite's per-answer records and its choice of arrivals, on a scripted server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from structspec.bench.infill import (
    ARRIVALS,
    DEFAULT_ARRIVALS,
    OPTIONS,
    TYPED,
    Case,
    InfillServer,
    Scores,
    _arrivals_table,
    parse_arrivals,
)
from structspec.config import Settings


class ScriptedClient:
    """Answers inline completions from a script, and the status with growing counters."""

    def __init__(self, answers: list[tuple[str | None, dict[str, Any]]]) -> None:
        self.answers = answers  # (insert text or None for no item, stats after it)
        self.stats: dict[str, Any] = {}
        self.notified: list[str] = []
        self.highlights: list[dict[str, Any]] = []  # the positions highlights were asked at

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "workspace/executeCommand":
            return {"stats": self.stats, "cost": {"windowTokens": 1536}}
        if method == "textDocument/documentHighlight":
            self.highlights.append(params["position"])
            return None
        assert method == "textDocument/inlineCompletion"
        text, self.stats = self.answers.pop(0)
        return {"items": [] if text is None else [{"insertText": text}]}

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.notified.append(method)


CASE = Case("t/1", "humaneval", "file:///t.py", "python", "x = 1\n    \n", 1, "    ", "return x")


def test_every_answer_is_recorded_with_the_servers_account(tmp_path: Path) -> None:
    answers: list[tuple[str | None, dict[str, Any]]] = [
        ("return y\nmore", {"emptyReasons": {}}),  # generated: only its first line counts
        (None, {"emptyReasons": {"stop-rule": 1}}),  # empty: the reason whose count grew
        ("turn x", {"emptyReasons": {"stop-rule": 1}, "servedFromCache": 1}),
        (None, {"emptyReasons": {"stop-rule": 1}, "servedFromCache": 1}),  # nothing counted
    ]
    server = InfillServer("no context", {}, "", 1, 10.0)
    server.client = ScriptedClient(answers)  # type: ignore[assignment]
    scores = Scores()
    asyncio.run(server.run_case(CASE, "cold", 0.0, scores, tmp_path))
    records = scores.records
    assert [r["k"] for r in records] == list(range(TYPED + 1))
    assert [r["prediction"] for r in records] == ["return y", "r", "return x", "ret"]
    assert [r["reason"] for r in records] == ["model", "stop-rule", "without-model", "uncounted"]
    assert [r["exact"] for r in records] == [False, False, True, False]
    assert [r["word"] for r in records] == [True, False, True, False]
    for r in records:
        assert (r["case"], r["part"], r["config"], r["arrival"]) == (
            "t/1",
            "humaneval",
            "no context",
            "cold",
        )
        assert r["target"] == "return x" and r["ms"] >= 0 and r["window"] == 1536


def test_a_forced_arrival_is_taken_for_every_line(tmp_path: Path) -> None:
    """``plain``: no cursor report; the arrivals table lists only the arrivals asked."""
    server = InfillServer("no context", {}, "", 1, 10.0)
    client = ScriptedClient([("return x", {})] + [("", {})] * TYPED)
    server.client = client  # type: ignore[assignment]
    scores = Scores()
    asyncio.run(server.run_case(CASE, "plain", 0.0, scores, tmp_path))
    assert "structspec/didMoveCursor" not in client.notified
    lines: list[str] = []
    summary = _arrivals_table(
        {"no context": {"humaneval": scores}}, ["humaneval"], lines.append, ("plain",)
    )
    assert list(summary["no context"]) == ["plain"]
    assert summary["no context"]["plain"]["exact"] == 1


def test_a_highlight_client_asks_for_highlights_at_the_line_and_reports_no_cursor(
    tmp_path: Path,
) -> None:
    server = InfillServer("no context", {}, "", 1, 10.0)
    client = ScriptedClient([("return x", {})] + [("", {})] * TYPED)
    server.client = client  # type: ignore[assignment]
    scores = Scores()
    asyncio.run(server.run_case(CASE, "highlight", 0.0, scores, tmp_path))
    assert client.highlights == [{"line": CASE.line, "character": len(CASE.indent)}]
    assert "structspec/didMoveCursor" not in client.notified
    assert scores.first_ms["highlight"] and scores.records[0]["arrival"] == "highlight"


def test_arrivals_are_parsed_and_checked() -> None:
    assert parse_arrivals("plain") == ("plain",)
    assert parse_arrivals(" cold, prewarmed ") == ("cold", "prewarmed")
    assert parse_arrivals(ARRIVALS) == ARRIVALS
    assert parse_arrivals("plain,highlight") == ("plain", "highlight")
    assert set(DEFAULT_ARRIVALS) < set(ARRIVALS)
    for bad in ("", "warm", "cold,nope"):
        with pytest.raises(ValueError, match="arrivals must be among"):
            parse_arrivals(bad)


def test_the_window_is_the_static_default_whatever_rates_the_server_measured() -> None:
    """Rates measured while other processes ran would choose a smaller window all session."""
    assert OPTIONS["windowTokens"] == Settings().window_tokens

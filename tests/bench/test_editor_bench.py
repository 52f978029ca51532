"""The editor benchmark: the simulated user, the trace check, the report (stand-in)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from structspec.bench import editor, typist
from structspec.bench.editor import busy_loops, check_trace, run_editor_benchmark
from structspec.bench.jump import JUMP, JumpServer, file_by_file
from structspec.bench.points import Point, first_points, plan_points
from structspec.completion import trace
from structspec.model.base import Rows, TokenCheck
from structspec.runtime import open_model

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(30))


def test_trace_writes_nothing_when_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(trace.TRACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    trace.record([1, 2], [3])
    assert list(tmp_path.iterdir()) == []


def test_trace_appends_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(trace.TRACE_ENV, str(path))
    trace.record([1, 2], [3, 4])
    trace.record([5], [6], healed=b"ab")
    trace.record([7], [])  # nothing generated: nothing to check
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [
        {"prompt": [1, 2], "tokens": [3, 4]},
        {"prompt": [5], "tokens": [6], "healed": "6162"},
    ]


def test_trace_to_an_unwritable_path_does_not_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(trace.TRACE_ENV, str(tmp_path / "missing" / "trace.jsonl"))
    trace.record([1], [2])
    trace.record([1], [2])
    assert not (tmp_path / "missing").exists()


def test_check_trace_counts_greedy_tokens_exact_and_others_off(tmp_path: Path):
    model = open_model("standin")
    prompt = model.tokenize("def add(a, b):\n    return")
    greedy: list[int] = []
    for _ in range(6):
        greedy.append(int(model.logits([*prompt, *greedy]).argmax()))
    wrong = [(greedy[0] + 1) % model.n_vocab, *greedy[1:]]
    path = tmp_path / "trace.jsonl"
    path.write_text(
        json.dumps({"prompt": prompt, "tokens": greedy})
        + "\n"
        + json.dumps({"prompt": prompt, "tokens": wrong})
        + "\n"
    )
    exact, constrained = check_trace(model, path)
    assert constrained == 0
    assert exact.exact + exact.near_tie + exact.off == 12
    assert exact.exact >= 6  # every greedy token is the argmax
    assert exact.off + exact.near_tie >= 1  # the wrong first token is not


class CacheShapedChecks:
    """A model whose check of a token moves with the cache: 1.6 logits off when the
    check reuses it, ``true_gap`` from an empty cache and one row per pass (a real
    error is off in every shape)."""

    def __init__(self, true_gap: float) -> None:
        self.true_gap = true_gap
        self.cached = True

    def token_bytes(self, token: int) -> bytes:
        return b"x"

    def truncate(self, n: int) -> None:
        self.cached = n > 0

    def teacher_forced(self, prompt, output):
        gap = max(self.true_gap, 1.6) if self.cached else self.true_gap
        self.cached = True
        return [TokenCheck(t, t, gap) for t in output]

    def prefill(self, tokens) -> int:
        self.cached = True
        return 0

    def verify(self, tokens) -> Rows:
        row = np.zeros(8)
        row[7] = self.true_gap  # the traced tokens (3, 4) sit true_gap below the argmax
        return Rows([7], [self.true_gap], [row])


@pytest.mark.parametrize(("true_gap", "off"), [(0.0, 0), (0.5, 0), (3.0, 2)])
def test_a_token_off_is_checked_again_from_an_empty_cache(tmp_path: Path, true_gap, off):
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps({"prompt": [1, 2], "tokens": [3, 4]}) + "\n")
    exact, _ = check_trace(CacheShapedChecks(true_gap), path)  # type: ignore[arg-type]
    assert exact.exact + exact.near_tie + exact.off == 2
    assert exact.off == off and exact.worst_gap == true_gap


def test_check_trace_skips_tokens_constrained_by_healing(tmp_path: Path):
    model = open_model("standin")
    prompt = model.tokenize("x = 1\n")
    tokens = [int(model.logits(prompt).argmax())] * 3
    removed = model.token_bytes(tokens[0])  # the first token reproduces the removed bytes
    path = tmp_path / "trace.jsonl"
    path.write_text(
        json.dumps({"prompt": prompt, "tokens": tokens, "healed": removed.hex()}) + "\n"
    )
    exact, constrained = check_trace(model, path)
    assert constrained == 1
    assert exact.exact + exact.near_tie + exact.off == 2


def test_busy_loops_are_killed():
    with busy_loops(2) as procs:
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(RuntimeError), busy_loops(1) as procs:
        raise RuntimeError("the replay failed")
    assert procs[0].poll() is not None


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's reading and moving-on pauses cost test time and prove nothing here."""
    monkeypatch.setattr(typist, "READ_S", 0.0)
    monkeypatch.setattr(typist, "SETTLE_S", 0.0)
    monkeypatch.setattr(typist, "ARRIVE_S", 0.0)
    monkeypatch.setattr(typist, "SETTLE_MAX_S", 0.0)


def test_editor_benchmark_smoke(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text(SOURCE)
    lines: list[str] = []
    result = run_editor_benchmark(
        [str(src)],
        "standin",
        1,
        out=lines.append,
        points_per_file=2,
        max_chars=4,
        contention=1,
        log_dir=tmp_path,
    )
    for name in ("structspec", "greedy", "structspec---1-busy-loop"):
        assert "answer at m.py:" in (tmp_path / f"{name}.log").read_text()
    configs = result["configs"]
    assert set(configs) == {"structspec", "greedy", "structspec + 1 busy loop"}
    assert configs["structspec"]["keystrokes"] == result["keystrokes"] == 8
    keys = configs["structspec"]["keys"]
    assert keys["model"]["n"] + keys["cache"]["n"] == keys["all"]["n"] == 8
    assert keys["model"]["n"] > 0  # the stand-in answered something itself
    assert configs["structspec"]["after_accept"]["all"]["n"] > 0
    exactness = result["exactness"]
    assert exactness["exact"] > 0 and exactness["off"] == 0
    assert any(line.startswith("teacher-forced:") for line in lines)
    assert any(line.startswith("contention:") for line in lines)
    assert any("after accept" in line for line in lines)
    paced = result["paced"]
    assert set(paced) == {"structspec, paced", "structspec, paced + 1 busy loop"}
    quiet = paced["structspec, paced"]
    assert quiet["keystrokes"] == 8 and quiet["points"] == 2
    # The last key of a point is always waited for; the stand-in shows something.
    assert quiet["answered"] >= 2 and quiet["shown"] > 0
    assert any(line.startswith("typing at a steady pace") for line in lines)
    jump = result["jump"][JUMP]
    assert jump["first_shown_opened"]["n"] == jump["first_shown_jumped"]["n"] == 1
    assert jump["keys"]["all"]["n"] == 8 and jump["first_shown"]["without"] < 2
    assert jump["empty"] == sum(jump["empty_reasons"].values())
    assert any(line.startswith("jump and type") for line in lines)
    assert any(line.startswith("empty answers while typing") for line in lines)


class _SlowClient:
    """Answers the keystrokes' requests at once, except those it is told never to answer."""

    def __init__(self, never: set[int]) -> None:
        self.never = never
        self.ids = 0
        self.cancelled: list[int] = []
        self.changes: list[dict[str, Any]] = []

    def notify(self, method: str, params: Any) -> None:
        if method == "textDocument/didChange":
            self.changes.append(params)

    def start_request(self, method: str, params: Any) -> tuple[int, asyncio.Future[Any]]:
        self.ids += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.ids not in self.never:
            fut.set_result({"items": [{"insertText": "x"}]} if self.ids > 1 else {"items": []})
        return self.ids, fut

    def cancel(self, request_id: int) -> None:
        self.cancelled.append(request_id)


def test_the_paced_user_cancels_a_request_the_next_key_overtakes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(typist, "PACE_MS", 20.0)
    replay = typist.ReplayedServer("paced", {}, "standin", 1, 5.0, paced=True)
    client = _SlowClient(never={2})
    replay.client = client  # type: ignore[assignment]
    point = Point("file:///m.py", "python", "x = 1\n\n", 1, "", "abcd")
    replay.opened[point.uri] = 1
    asyncio.run(replay.type_point_paced(point))
    (typed,) = replay.result.paced
    assert [ms is None for ms in typed.keys] == [False, True, False, False]
    assert typed.shown == [False, False, True, True]  # the first answer was empty
    assert client.cancelled == [2]
    assert len(client.changes) == 5  # the point's text, then one change per key
    assert replay.text == "x = 1\nabcd\n"
    # The first suggestion came with the third key's answer, two paces in.
    assert typed.first_shown_ms is not None and typed.first_shown_ms >= 2 * 20.0


def test_servers_get_the_default_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("STRUCTSPEC_DEBOUNCE_MS", "0")
    monkeypatch.setenv("STRUCTSPEC_LLAMA_LOG", "1")  # not a setting: kept
    env = typist.server_env(tmp_path / "t.jsonl")
    assert "STRUCTSPEC_DEBOUNCE_MS" not in env and env["STRUCTSPEC_LLAMA_LOG"] == "1"
    assert env["STRUCTSPEC_CONFIG"] == os.devnull and env[trace.TRACE_ENV] == str(
        tmp_path / "t.jsonl"
    )
    monkeypatch.delenv(trace.TRACE_ENV, raising=False)
    assert trace.TRACE_ENV not in typist.server_env(None)


def test_servers_never_read_an_earlier_runs_prompt_cache(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("STRUCTSPEC_CACHE_DIR", "/somewhere/with/saved/prompts")
    assert typist.server_env(None)["STRUCTSPEC_CACHE_DIR"] == ""  # set and empty: off


def test_limit_takes_the_first_points_of_every_file_in_turn(tmp_path: Path):
    files = []
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(SOURCE)
        files.append(str(tmp_path / name))
    lines: list[str] = []
    result = run_editor_benchmark(
        files, "standin", 1, out=lines.append, max_chars=2, limit=2, exactness=False
    )
    assert result["points"] == 2 and result["keystrokes"] == 4
    points = plan_points(files, 3, 2)
    assert first_points(points, 3) == [points[0], points[3], points[1]]  # a, b, a
    assert result["exactness"] is None
    assert not any(line.startswith("teacher-forced:") for line in lines)


def test_a_variant_types_the_same_points_with_its_settings(tmp_path: Path):
    """``variant``: one more sequential and one more paced server, run with those settings
    (here completing no language, so the defaults show suggestions and it shows none)."""
    src = tmp_path / "m.py"
    src.write_text(SOURCE)
    lines: list[str] = []
    variant = {"languages": ["nothing"]}
    result = run_editor_benchmark(
        [str(src)],
        "standin",
        1,
        out=lines.append,
        max_chars=3,
        limit=1,
        exactness=False,
        contention=1,
        variant=variant,
    )
    name = editor.variant_name("structspec", variant)
    assert name == 'structspec, languages=["nothing"]'
    configs = result["configs"]
    loaded = f"{name} + 1 busy loop"
    assert set(configs) == {"structspec", "greedy", name, "structspec + 1 busy loop", loaded}
    assert configs[loaded]["suggestions"] == 0
    assert any(line.startswith(f"contention ({name}):") for line in lines)
    assert configs[name]["keystrokes"] == configs["structspec"]["keystrokes"] == 3
    assert configs["structspec"]["suggestions"] > 0 and configs[name]["suggestions"] == 0
    paced = result["paced"]
    paced_variant = editor.variant_name("structspec, paced", variant)
    assert set(paced) == {
        "structspec, paced",
        paced_variant,
        "structspec, paced + 1 busy loop",
        f"{paced_variant} + 1 busy loop",
    }
    assert any(f"variant {name}" in line for line in lines)


class _ScriptedServer:
    """Answers inline completions from a script; its status counts the empty ones by reason."""

    def __init__(self, script: list[str | None]) -> None:
        self.script = script  # per request: ``None`` a suggestion, else the empty reason
        self.asked = 0
        self.reasons: dict[str, int] = {}
        self.served = 0
        self.messages: list[tuple[str, Any]] = []

    def notify(self, method: str, params: Any) -> None:
        self.messages.append((method, params))

    async def request(self, method: str, params: Any) -> Any:
        if method == "workspace/executeCommand":
            return {"stats": {"emptyReasons": dict(self.reasons), "servedFromCache": self.served}}
        reason = self.script[self.asked]
        self.asked += 1
        if reason is None:
            self.served += self.asked == 3  # the third answer (at the jump) is typed through
            return {"items": [{"insertText": "y = 2"}]}
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        return {"items": []}


def test_the_jump_user_opens_jumps_clears_the_line_and_types_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(typist, "PACE_MS", 0.0)
    text = "a = 1\nbb = 22\nccc = 333\n"
    first = Point("file:///m.py", "python", "a = 1\n\nccc = 333\n", 1, "", "bb", " = 22")
    second = Point("file:///m.py", "python", "a = 1\nbb = 22\n\n", 2, "", "ccc = 333", "")
    server = JumpServer([first, second], JUMP, {}, "standin", 1, 5.0)
    client = _ScriptedServer(["prompt-unfinished", None] + [None] * 2 + ["stop-rule"] * 7)
    server.client = client  # type: ignore[assignment]

    async def run() -> None:  # its own order: the file's points one after the other
        await server.run_point(second)
        await server.run_point(first)

    asyncio.run(run())
    methods = [m for m, _ in client.messages]
    # Opened with the real file, its line cleared; two keys; the line's rest put back.
    assert methods[:5] == ["textDocument/didOpen"] + ["textDocument/didChange"] * 4
    assert client.messages[0][1]["textDocument"]["text"] == text
    cleared = client.messages[1][1]["contentChanges"][0]
    assert cleared == {
        "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 7}},
        "text": "",
    }
    assert client.messages[4][1]["contentChanges"][0]["text"] == " = 22"
    # The jump: no open, the second line cleared in the whole file.
    assert methods[5:] == ["textDocument/didChange"] * 10
    assert client.messages[5][1]["contentChanges"][0]["range"]["start"] == {
        "line": 2,
        "character": 0,
    }
    assert server.texts["file:///m.py"] == text
    opened, jumped = server.result.jumped
    assert (opened.opened, jumped.opened) == (True, False)
    assert opened.reasons == ["prompt-unfinished", None]
    assert jumped.reasons == [None, None] + ["stop-rule"] * 7
    assert [a.cached for a in jumped.keys] == [True] + [False] * 8
    assert opened.first_shown_ms is not None and opened.first_shown_ms >= sum(
        a.ms for a in opened.keys
    )
    assert jumped.first_shown_ms is not None and jumped.first_shown_ms >= jumped.keys[0].ms


def test_the_jump_user_types_each_files_points_one_after_the_other() -> None:
    a1, b1, a2, b2 = (
        Point(f"file:///{n}", "python", "", i, "", "x")
        for n, i in (("a.py", 1), ("b.py", 1), ("a.py", 9), ("b.py", 9))
    )
    assert file_by_file([a1, b1, a2, b2]) == [a1, a2, b1, b2]


def test_a_server_is_left_alone_while_it_warms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typist, "SETTLE_MAX_S", 60.0)
    server = typist.ReplayedServer("s", {}, "standin", 1, 5.0)
    answers = iter([{"warming": True}, {"warming": True}, {"warming": False}, {"warming": True}])
    asked: list[str] = []

    async def status() -> dict[str, Any]:
        asked.append("status")
        return next(answers)

    server.status = status  # type: ignore[method-assign]
    asyncio.run(server.settle())
    assert len(asked) == 3  # until it no longer warms

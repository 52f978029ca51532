"""The editor benchmark through a remote engine (``bench/remote_editor.py``), over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.fake_backends import LLAMA, Behaviour, FakeBackend

from structspec.bench import typist
from structspec.bench.editor import run_editor_benchmark
from structspec.bench.remote_editor import (
    REMOTE,
    REMOTE_PACED,
    EngineLog,
    kept_generating,
    running_engine,
)
from structspec.cli import main

#: What llama-server writes for a task started, cancelled, finished (its own log's lines).
STARTED = "0.01.000 I slot launch_slot_: id  0 | task {} | processing task, is_child = 0\n"
CANCELLED = "0.01.100 W srv          stop: cancel task, id_task = {}\n"
STOPPED = "0.01.101 I slot      release: id  0 | task {} | stop processing: n_tokens = 9\n"
FINISHED = (
    "0.01.200 I slot print_timing: id  0 | task {} |        eval time =     311.62 ms / "
    "   10 tokens (   34.62 ms per token,    28.88 tokens per second)\n"
)


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's reading and moving-on pauses cost test time and prove nothing here."""
    monkeypatch.setattr(typist, "READ_S", 0.0)
    monkeypatch.setattr(typist, "SETTLE_S", 0.0)
    monkeypatch.setattr(typist, "ARRIVE_S", 0.0)


def test_the_engine_log_counts_the_tasks_started_in_the_spans(tmp_path: Path):
    log = tmp_path / "llama-server.log"
    before = STARTED.format(0) + FINISHED.format(0)  # outside every span
    inside = (
        STARTED.format(1)
        + CANCELLED.format(1)
        + STOPPED.format(1)  # stopped at the cancel: closed, not kept generating
        + STARTED.format(2)
        + CANCELLED.format(2)
        + CANCELLED.format(3)  # cancelled while queued: a request too
        + FINISHED.format(4)  # a task of another span's, finished here
    )
    after = FINISHED.format(2)  # ran to its end after its cancel: kept generating
    log.write_text(before + inside + after)
    start = len(before.encode())
    tasks = EngineLog(log).tasks([(start, start + len(inside.encode()))])
    assert (tasks.requests, tasks.closed, tasks.kept_generating) == (3, 3, 1)
    assert EngineLog(log).tasks([]).requests == 0
    assert EngineLog(tmp_path / "none.log").tasks([(0, 10)]).requests == 0


def test_only_decoding_past_the_pass_in_flight_at_the_cancel_is_kept_generating():
    # Its one token came out of the prompt's evaluation in flight (a stop string met).
    assert not kept_generating(10.0, 12.2, 0.0, 1)
    # Cancelled during its last pass (35 ms a token): the pass in flight.
    assert not kept_generating(10.0, 10.03, 350.0, 11)
    # Decoded for 300 ms after the cancel: it kept generating.
    assert kept_generating(10.0, 10.3, 350.0, 11)
    # Cancelled while its prompt was evaluated, then decoded all its tokens.
    assert kept_generating(10.0, 12.0, 350.0, 11)
    # No timestamps in the log: any decode pass after the prompt's counts.
    assert kept_generating(None, None, 35.0, 2) and not kept_generating(None, None, 0.0, 1)


def test_a_draft_verified_in_the_pass_in_flight_is_not_kept_generating(tmp_path: Path):
    """With ``--spec-type`` one pass verifies a whole draft: the time of a pass is the
    generation's time over its passes (tokens less accepted draft tokens), which the
    server prints after the task's timings. The lines of a task from a real run: one
    64-token draft in flight at the cancel, 382 ms after it, no more passes."""
    log = tmp_path / "llama-server.log"
    log.write_text(
        "9.00.712.857 I slot launch_slot_: id  0 | task 7 | processing task, is_child = 0\n"
        "9.00.739.368 W srv          stop: cancel task, id_task = 7\n"
        "9.01.121.374 I slot print_timing: id  0 | task 7 |        eval time =     383.18 ms /"
        "    22 tokens (   18.25 ms per token,    54.81 tokens per second)\n"
        "9.01.121.408 I slot print_timing: id  0 | task 7 | draft acceptance = 1.00000 "
        "(   64 accepted /    64 generated), mean len = 65.00\n"
    )
    tasks = EngineLog(log).tasks([(0, log.stat().st_size)])
    assert (tasks.requests, tasks.closed, tasks.kept_generating) == (1, 1, 0)
    # The same tokens from 21 one-token passes (no draft accepted) would have kept going.
    assert kept_generating(540.739, 541.121, 383.18, 22, accepted=0)
    assert not kept_generating(540.739, 541.121, 383.18, 22, accepted=64)


def test_the_replay_types_through_a_llama_server(tmp_path: Path):
    """``remote`` and ``remote, paced`` type the same points as the local configurations,
    through a server speaking llama-server's protocol, and its log is read. The server
    answers the line being typed, so the keys after the first are typed through."""
    line = "total = add(3, 4)"
    src = tmp_path / "m.py"
    src.write_text(f"{line}\n" * 12)
    log = tmp_path / "llama-server.log"
    lines: list[str] = []
    with FakeBackend(Behaviour(answer=line + "\n", endpoints=LLAMA)) as fake:
        fake.log = log
        result = run_editor_benchmark(
            [str(src)],
            "standin",
            1,
            out=lines.append,
            limit=1,
            exactness=False,
            backend=running_engine(fake.url, str(log)),
        )
    configs = result["configs"]
    assert set(configs) == {"structspec", "greedy", REMOTE}
    keys = configs["structspec"]["keystrokes"]
    assert configs[REMOTE]["keystrokes"] == keys == len(line)
    assert configs[REMOTE]["suggestions"] > 0
    assert configs[REMOTE]["served_without_model"] > 0  # typed through
    assert set(result["paced"]) == {"structspec, paced", REMOTE_PACED}
    remote = result["remote"]
    assert remote["backend"] == fake.url
    sequential, paced = remote[REMOTE], remote[REMOTE_PACED]
    assert sequential["keystrokes"] == paced["keystrokes"] == keys
    # Typing through the suggestion: fewer requests than keys, each one seen in the log.
    assert 1 <= sequential["requests"] < keys
    assert sequential["kept_generating"] == paced["kept_generating"] == 0
    assert len(fake.posts("/infill")) >= sequential["requests"] + paced["requests"]
    assert any(line.startswith("through the remote engine") for line in lines)
    assert any(line.startswith("remote ") for line in lines)


def test_without_the_engines_log_its_requests_are_not_counted(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text("total = add(3, 4)\n" * 12)
    lines: list[str] = []
    with FakeBackend(Behaviour(endpoints=LLAMA)) as fake:
        result = run_editor_benchmark(
            [str(src)],
            "standin",
            1,
            out=lines.append,
            limit=1,
            exactness=False,
            paced=False,
            backend=running_engine(fake.url, None),
        )
    assert result["remote"] == {"backend": fake.url}
    assert result["configs"][REMOTE]["keystrokes"] == len("total = add(3, 4)")
    assert any("--backend-log" in line for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--suite", "editor", "--backend-log", "x.log"], "--backend-log needs --backend"),
        (["--suite", "editor", "--backend", "ftp://x"], "--backend:"),
        (["--suite", "editor", "--backend", "http://127.0.0.1:9", "--llama-server", "ls"], "both"),
        (["--suite", "editor", "--backend", "http://127.0.0.1:9", "--backend-log", "no"], "file"),
        (["--suite", "editor", "--llama-server", "not-a-binary"], "not an executable"),
        (["--suite", "editor", "--llama-server", "/bin/true"], "stand-in"),
        (["--suite", "humaneval", "--backend", "http://127.0.0.1:9"], "--suite editor only"),
    ],
)
def test_bad_backend_flags_are_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["benchmark", "--model", "standin", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err

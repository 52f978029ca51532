"""Hostile inputs on the command line: infinite numbers, files that are no files, deep JSON.

Each is a one-line error and exit status 2 (or, for ``structspec config``, a
warning on the bad setting), never a traceback or a read without end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def structspec(
    *args: str, config: Path | None = None, stdin: int | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSPEC_")}
    env["STRUCTSPEC_CONFIG"] = str(config) if config else os.devnull
    return subprocess.run(
        [sys.executable, "-m", "structspec", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        timeout=timeout,
    )


def one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.strip().count("\n") == 0, p.stderr
    for needle in needles:
        assert needle in p.stderr, (needle, p.stderr)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_an_infinite_number_in_the_config_file_is_a_bad_setting(tmp_path: Path, value: str):
    config = tmp_path / "config.toml"
    config.write_text(f"max_tokens = {value}\nthreads = 1e300\n")
    p = structspec("run", "--model", "standin", "--prompt", "x", config=config)
    one_line_error(p, "refusing to start", "max_tokens", "threads")
    shown = structspec("config", config=config)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "max_tokens must be" in shown.stdout and "threads must be" in shown.stdout


def test_an_infinite_benchmark_variant_is_one_line():
    p = structspec(
        "benchmark", "--model", "standin", "--suite", "editor", "--variant", "maxTokens=1e400"
    )
    one_line_error(p, "maxTokens must be a finite integer")


def test_the_language_server_starts_with_an_infinite_config_value(tmp_path: Path):
    """``structspec-lsp`` reports the bad value and runs (exit 0 on shutdown + exit)."""
    from tests.helpers.lsp import server_env
    from tests.helpers.raw_client import RawClient

    config = tmp_path / "config.toml"
    config.write_text("max_tokens = inf\n")
    env = server_env(STRUCTSPEC_CONFIG=str(config))
    with RawClient(env=env) as client:
        client.initialize()
        client.wait_for(lambda m: "max_tokens" in str(m.get("params", {}).get("message", "")))
        assert client.shutdown_and_exit() == 0
        assert "Traceback" not in client.stderr, client.stderr


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "input.fifo"
    os.mkfifo(path)  # no writer: a blocking open waits forever
    return str(path)


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_a_prompt_file_that_is_no_file_or_too_large_is_one_line(tmp_path: Path, kind: str):
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = _fifo(tmp_path)
    else:
        huge = tmp_path / "huge.txt"
        with huge.open("wb") as fh:
            fh.truncate(17 << 20)  # sparse
        path = str(huge)
    p = structspec("run", "--model", "standin", "--prompt-file", path, timeout=60)
    one_line_error(p, "prompt file", {"device": "a device", "fifo": "a FIFO"}.get(kind, "larger"))


def test_an_endless_prompt_on_stdin_is_one_line():
    with open("/dev/zero", "rb") as zero:
        p = structspec("run", "--model", "standin", "--prompt-file", "-", stdin=zero.fileno())
    one_line_error(p, "standard input is larger than 16 MiB")


def test_a_rules_file_fifo_is_one_line(tmp_path: Path):
    p = structspec(
        "run", "--model", "standin", "--prompt", "x", "--rules-file", _fifo(tmp_path), timeout=60
    )
    one_line_error(p, "a FIFO")


def test_a_deeply_nested_suite_line_is_one_line(tmp_path: Path):
    suite = tmp_path / "deep.jsonl"
    suite.write_text('{"id": 1, "prompt": "x"}\n' + "[" * 200_000 + "\n")
    p = structspec(
        "benchmark", "--model", "standin", "--suite", f"jsonl:{suite}", "--modes", "greedy"
    )
    one_line_error(p, "deep.jsonl:2", "nested too deeply")


def test_recordings_traces_and_cost_tables_refuse_fifos_and_deep_json(tmp_path: Path):
    """What ``benchmark --replay`` and friends read: an error, never a wait or a traceback."""
    from structspec.bench.recording import (
        Recording,
        ReplayError,
        load_cost_table,
        recording_from_trace,
    )

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    loaders = (
        Recording.load,
        load_cost_table,
        lambda p: recording_from_trace(p, model="m", cost_ms=(1.0,), threads=1),
    )
    for path, problem in ((_fifo(tmp_path), "a FIFO"), (str(deep), "cannot read")):
        for load in loaders:
            with pytest.raises(ReplayError, match=problem):
                load(path)


@pytest.mark.parametrize(
    "config",
    [
        "~nosuchuser-structspec/config.toml",  # no such user's home
        "/tmp/" + "n" * 300,  # a name longer than the file system takes
        "{tmp}",  # a folder
        "{tmp}/deep.toml",  # arrays nested deeper than the parser recurses
    ],
)
def test_a_config_file_that_cannot_be_read_is_a_warning_and_defaults(tmp_path: Path, config: str):
    (tmp_path / "deep.toml").write_text("a = " + "[" * 600 + "1" + "]" * 600 + "\n")
    path = Path(config.format(tmp=tmp_path))
    shown = structspec("config", config=path)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "using defaults" in " ".join((shown.stdout + shown.stderr).split())  # rich wraps
    assert structspec("run", "--model", "standin", "--prompt", "x", config=path).returncode == 2


@pytest.mark.parametrize(
    ("min_context", "share"),
    [
        ("1e400", "0.5"),  # a context length past any integer
        ("1", "1" + "0" * 400),  # a share past any float
        ("1", "NaN"),
    ],
)
def test_a_rules_file_with_numbers_out_of_range_is_one_line(
    tmp_path: Path, min_context: str, share: str
):
    from structspec.drafts.rule_set import FORMAT, VERSION

    path = tmp_path / "rules.json"
    path.write_text(
        f'{{"format": "{FORMAT}", "version": {VERSION}, "tokens": {{"1": "61", "2": "62"}},'
        f' "min_context": {min_context}, "max_context": 4,'
        f' "rules": [[[1], [2], "deterministic", 3, {share}]]}}'
    )
    p = structspec("run", "--model", "standin", "--prompt", "x", "--rules-file", str(path))
    one_line_error(p, "corrupt")


def test_mine_checks_its_output_before_mining_and_reports_a_full_disk(tmp_path: Path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "a.py").write_text("x = 1\n" * 50)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for out, needle in (
        (str(fifo), "cannot write"),  # nobody reads it: refused, not a hang
        (str(tmp_path / ("n" * 300)), "cannot write"),
        (str(tmp_path), "directory"),
        ("/dev/full", "No space left on device"),  # the write itself fails: not "wrote"
    ):
        p = structspec("mine", str(source), "-o", out, "--model", "standin", timeout=60)
        one_line_error(p, needle)


def test_closed_and_full_standard_streams_are_one_line(tmp_path: Path):
    script = (
        "import subprocess, sys\n"
        "args = [sys.executable, '-m', 'structspec', 'run', '--model', 'standin',"
        " '--max-tokens', '3']\n"
        "closed = subprocess.run([*args, '--prompt-file', '-'], stdin=subprocess.DEVNULL,"
        " capture_output=True, text=True, pass_fds=(), close_fds=True,"
        " preexec_fn=lambda: __import__('os').close(0))\n"
        "print(closed.returncode, closed.stderr.strip().splitlines()[-1:])\n"
        "full = subprocess.run([*args, '--prompt', 'def f'], stdout=open('/dev/full', 'w'),"
        " stderr=subprocess.PIPE, text=True)\n"
        "print(full.returncode, full.stderr.strip().splitlines()[-1:])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRUCTSPEC_")}
    env["STRUCTSPEC_CONFIG"] = os.devnull
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    closed, full = out.stdout.splitlines()
    assert closed.startswith("2 ") and "standard input is closed" in closed, out
    assert full.startswith("1 ") and "No space left on device" in full, out
    assert "Traceback" not in out.stdout + out.stderr


def test_the_language_servers_log_file_never_blocks(tmp_path: Path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    p = subprocess.run(
        [sys.executable, "-m", "structspec.lsp", "--stdio", "--log-file", str(fifo)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert p.returncode == 2 and "cannot open log file" in p.stderr and "Traceback" not in p.stderr


def test_a_stand_in_seed_that_is_no_integer_is_one_line():
    for seed in ("²", "9" * 5000):
        one_line_error(structspec("run", "--model", f"standin:{seed}", "--prompt", "x"), "seed")

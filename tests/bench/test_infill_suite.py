"""The infill suite: its cases, its scoring, and a stand-in run through the real language server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from structspec.bench.infill import (
    DEFAULT_ARRIVALS,
    TYPED,
    Scores,
    clear_line,
    edit_similarity,
    first_word,
    humaneval_cases,
)


def test_scoring():
    assert edit_similarity("abc", "abc") == 1.0
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("kitten", "sitting") == 1 - 3 / 7
    assert edit_similarity("", "abcd") == 0.0
    assert first_word("  return x") == "return"
    assert first_word("(a, b)") == "("
    assert first_word("") == ""
    s = Scores()
    s.add(0, "return number % 1.0  ", "return number % 1.0")
    s.add(TYPED, "ret = 0", "return number % 1.0")
    assert s.exact[0] == [True] and s.word[0] == [True]
    assert s.exact[TYPED] == [False] and s.long_word_at_typed == [False]


def test_cleared_line():
    text, indent, target = clear_line("def f():\n    return 1\n\n", 1)
    assert (text, indent, target) == ("def f():\n    \n\n", "    ", "return 1")
    assert clear_line("a\n\nb\n", 1) is None  # blank: nothing to predict
    assert clear_line("a\n", 5) is None


def test_humaneval_cases_mask_a_solution_line():
    cases = humaneval_cases(5)
    assert len(cases) == 5
    for case in cases:
        lines = case.text.splitlines()
        assert lines[case.line] == case.indent  # cleared to its indentation
        assert len(case.target) >= 4 and case.target == case.target.strip()
        assert case.uri.startswith("file:///humaneval/") and case.language == "python"


def test_infill_suite_runs_through_the_language_server(tmp_path):
    """Two lines of each part: each arrival once (cold, pre-warmed, plain, restart)."""
    out, md = tmp_path / "infill.json", tmp_path / "infill.md"
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
        + ["--suite", "infill", "--limit", "2", "--threads", "1"]
        + ["--json-out", str(out), "--markdown-out", str(md)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    files = data["files"]["no context"]["cases"]
    assert files >= 1  # the real files this machine has
    for config in ("no context", "project context"):
        he = data["humaneval"][config]
        assert he["cases"] == 2 and len(he["exact"]) == TYPED + 1
        arrivals = data["arrivals"][config]
        assert list(arrivals) == list(DEFAULT_ARRIVALS)
        lines = [arrivals[a]["lines"] for a in DEFAULT_ARRIVALS]  # in turn over the cases
        assert sum(lines) == 2 + files and lines[:3] == [1, 1, 1]
    lines = data["lines"]  # every answer: 2 configurations x (2 + files) lines x TYPED + 1
    assert len(lines) == 2 * (2 + files) * (TYPED + 1)
    assert {r["part"] for r in lines} == {"humaneval", "files"}
    assert all(r["reason"] and isinstance(r["prediction"], str) for r in lines)
    report = md.read_text()
    assert "command: `structspec benchmark" in report and "machine:" in report
    assert "humaneval (2 lines)" in report
    assert "first suggestion at the line by arrival" in report
    assert "(restart): " in report or files < 2


def test_the_benchmark_command_refuses_an_unknown_arrival():
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
        + ["--suite", "infill", "--arrivals", "cold,teleport"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0 and "--arrivals" in p.stderr and "teleport" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("idle", ["-1", "nan", "1e9"])
def test_the_benchmark_command_refuses_a_rest_out_of_range(idle: str):
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
        + ["--suite", "infill", f"--idle-s={idle}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0 and "--idle-s must be between 0 and 600" in p.stderr
    assert "Traceback" not in p.stderr


def test_window_comparison_runs_one_server_per_window():
    p = subprocess.run(
        [sys.executable, "-m", "structspec.bench.infill", "--model", "standin"]
        + ["--windows", "0,64", "--limit", "1", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    table = p.stdout.split("files (", 1)[1].split("\n\n", 1)[0]  # the part's table
    rows = [line.split()[:2] for line in table.splitlines() if line.startswith("window ")]
    assert rows == [["window", "whole"], ["window", "64"]]
    assert "humaneval (" not in p.stdout  # the real-file part only


def test_window_comparison_refuses_bad_windows():
    for bad in ("x", "-5", ","):
        p = subprocess.run(
            [sys.executable, "-m", "structspec.bench.infill", "--windows", bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 2 and "--windows" in p.stderr and "Traceback" not in p.stderr


def test_a_restarted_server_has_its_own_prefix_cache_and_the_shared_measurements(
    tmp_path, monkeypatch
):
    """A restart's folder holds its own prefix cache; cost tables and rates are shared."""
    from structspec.bench import typist

    home = tmp_path / "platform"
    monkeypatch.setattr(typist, "default_cache_home", lambda: home)
    case = tmp_path / "case"
    assert typist.server_env(None, case)["STRUCTSPEC_CACHE_DIR"] == str(case)
    typist.share_measurements(case)
    typist.share_measurements(case)  # already linked: left as it is
    for name in ("cost", "rates"):
        assert (case / name).resolve() == (home / name).resolve()
    (home / "cost" / "table.json").write_text("{}")
    assert (case / "cost" / "table.json").read_text() == "{}"

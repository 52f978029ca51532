"""``structspec benchmark`` end to end on the stand-in model and a JSON-lines suite."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from structspec.bench.harness import Run, summarize
from structspec.bench.suites import SuiteError, jsonl


def write_suite(path, prompts):
    path.write_text("\n".join(json.dumps({"id": i, "prompt": p}) for i, p in enumerate(prompts)))


def benchmark(suite, *args, timeout=300):
    """``structspec benchmark`` on the stand-in model in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
        + ["--suite", f"jsonl:{suite}", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_benchmark_on_standin(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["ab(x):\n", "x = a\nx = a\n", ""])
    out, trace, md = tmp_path / "out.json", tmp_path / "trace.csv", tmp_path / "bench.md"
    p = benchmark(
        suite,
        "--modes",
        "greedy,structspec",
        "--max-tokens",
        24,
        "--repeat",
        2,
        "--json-out",
        out,
        "--trace-csv",
        trace,
        "--markdown-out",
        md,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert len(data["prompts"]) == 3
    runs = data["prompts"][0]["runs"]
    assert {r["mode"] for r in runs} == {"greedy", "structspec"} and len(runs) == 4
    # the stand-in is exact: structspec output is greedy output
    by_mode = {r["mode"]: r["tokens"] for r in runs if r["repeat"] == 0}
    assert by_mode["greedy"] == by_mode["structspec"]
    summary = data["summary"]
    assert summary["modes"]["structspec"]["identical_to_greedy"] == 3
    assert summary["exactness"]["structspec"]["off"] == 0
    rows = list(csv.DictReader(trace.open()))
    assert rows and set(rows[0]) >= {"prompt", "pass", "source", "drafted", "accepted", "ms"}
    assert "## Summary" in md.read_text() and "vs greedy" in p.stdout


def test_bad_suite_is_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    p = benchmark(bad, "--modes", "greedy", timeout=120)
    assert p.returncode == 2 and "bad.jsonl:1" in p.stderr and "Traceback" not in p.stderr


def test_jsonl_errors(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text("not json\n")
    with pytest.raises(SuiteError, match="not JSON"):
        jsonl(f)
    with pytest.raises(SuiteError, match="cannot read"):
        jsonl(tmp_path / "missing.jsonl")


def test_summary_ratios():
    runs = [
        Run("p", "greedy", 0, [1] * 11, 2.0, 1.0),
        Run("p", "structspec", 0, [1] * 11, 1.5, 0.5, passes=5, drafted=8, accepted=6),
    ]
    s = summarize(runs, ["greedy", "structspec"])
    assert s["modes"]["greedy"]["decode_tps"] == pytest.approx(10.0)
    assert s["modes"]["structspec"]["aggregate_vs_greedy"] == pytest.approx(2.0)
    assert s["modes"]["structspec"]["ratio_vs_greedy"]["median"] == pytest.approx(2.0)
    assert s["modes"]["structspec"]["acceptance"] == pytest.approx(0.75)


def test_ablation_modes_run_side_by_side(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = a\nx = a\nx = a\n", "def f(x):\n"])
    out = tmp_path / "out.json"
    p = benchmark(
        suite,
        "--modes",
        "greedy,structspec,structspec:lookup+rules",
        "--max-tokens",
        16,
        "--json-out",
        out,
    )
    assert p.returncode == 0, p.stderr
    modes = json.loads(out.read_text())["summary"]["modes"]
    ablation = modes["structspec:lookup+rules"]
    assert set(ablation["sources"]) <= {"lookup", "rules"}
    assert "aggregate_vs_structspec:lookup+rules" in modes["structspec"]
    assert "## Against each base" in p.stdout
    assert "## Draft sources (structspec:lookup+rules)" in p.stdout


@pytest.mark.parametrize("mode", ["structspec:", "structspec:nosuch", "fast"])
def test_unknown_mode_is_one_line(tmp_path, mode):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = 1\n"])
    p = benchmark(suite, "--modes", f"greedy,{mode}", timeout=120)
    assert p.returncode == 2 and "unknown mode" in p.stderr and "Traceback" not in p.stderr


def test_summary_compares_with_ablations():
    runs = [
        Run("p", "structspec:lookup", 0, [1] * 11, 2.0, 1.0),
        Run("p", "structspec", 0, [1] * 11, 1.5, 0.8),
    ]
    s = summarize(runs, ["structspec", "structspec:lookup"])
    assert s["modes"]["structspec"]["aggregate_vs_structspec:lookup"] == pytest.approx(1.25)


def test_oracle_without_replay_is_refused(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = 1\n"])
    p = benchmark(suite, "--oracle")
    assert p.returncode != 0 and "--oracle needs --replay" in p.stderr


def test_server_logs_that_cannot_be_created_are_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
        + ["--suite", "editor", "--server-logs", str(blocker / "logs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "--server-logs" in p.stderr and "Traceback" not in p.stderr

"""``structspec benchmark`` end to end on the stand-in model and a JSON-lines suite."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from structspec.bench.harness import Run, summarize
from structspec.bench.suites import SuiteError, jsonl
from structspec.engine.sampling import Sampling


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


def test_cost_table_without_replay_is_refused(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = 1\n"])
    p = benchmark(suite, "--cost-table", str(tmp_path / "cost.json"))
    assert p.returncode != 0 and "--cost-table needs --replay" in p.stderr
    p = benchmark(suite, "--orders")
    assert p.returncode != 0 and "--orders needs --replay" in p.stderr


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


SAMPLING_FLAGS = ("--temperature", 0.8, "--top-k", 5, "--top-p", 0.9, "--min-p", 0.05)


def sampled_run(tmp_path, name, *args):
    """A sampled benchmark of three engine modes on the stand-in; its JSON and Markdown."""
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["def f(a):\n", "x = a\nx = a\n", "ab"])
    out, md = tmp_path / f"{name}.json", tmp_path / f"{name}.md"
    p = benchmark(
        suite,
        "--modes",
        "greedy,structspec,structspec:lookup",
        "--max-tokens",
        20,
        "--json-out",
        out,
        "--markdown-out",
        md,
        *args,
    )
    assert p.returncode == 0, p.stderr
    return p, json.loads(out.read_text()), md.read_text()


def tokens_by_prompt_and_mode(data):
    return {(p["id"], r["mode"]): r["tokens"] for p in data["prompts"] for r in p["runs"]}


def test_sampled_benchmark_states_its_parameters(tmp_path):
    p, data, md = sampled_run(tmp_path, "a", *SAMPLING_FLAGS, "--seed", 3)
    for report in (p.stdout, md):
        assert "temperature 0.8, top_k 5, top_p 0.9, min_p 0.05, seed 3" in report
        assert "| plain sampling |" in report and "vs plain sampling" in report
        # the argmax check does not apply: one line says where the distribution is proven
        assert "Teacher-forced exactness" not in report
        assert "tests/engine/test_sampling.py" in report
    summary = data["summary"]
    assert summary["sampling"] == {
        "temperature": 0.8,
        "top_k": 5,
        "top_p": 0.9,
        "min_p": 0.05,
        "seed": 3,
    }
    assert "exactness" not in summary
    # the stand-in's rows do not depend on the batch shape: the same seed, the same text
    assert summary["modes"]["structspec"]["identical_to_greedy"] == 3
    assert summary["modes"]["structspec:lookup"]["identical_to_greedy"] == 3
    assert "same seed, same text as plain sampling, prompts: structspec 3/3" in p.stdout


def test_sampled_benchmark_same_seed_same_tokens(tmp_path):
    _, first, _ = sampled_run(tmp_path, "a", *SAMPLING_FLAGS, "--seed", 3)
    _, again, _ = sampled_run(tmp_path, "b", *SAMPLING_FLAGS, "--seed", 3)
    _, other, _ = sampled_run(tmp_path, "c", *SAMPLING_FLAGS, "--seed", 4)
    _, greedy, _ = sampled_run(tmp_path, "d")
    assert tokens_by_prompt_and_mode(first) == tokens_by_prompt_and_mode(again)
    assert tokens_by_prompt_and_mode(first) != tokens_by_prompt_and_mode(other)
    assert tokens_by_prompt_and_mode(first) != tokens_by_prompt_and_mode(greedy)
    assert "decoding: greedy (temperature 0) in every mode" in (tmp_path / "d.md").read_text()


def test_sampled_benchmark_without_seed_compares_no_text(tmp_path):
    p, data, _ = sampled_run(tmp_path, "a", "--temperature", 0.7)
    assert "seed none" in p.stdout and "no --seed" in p.stdout
    assert all("identical_to_greedy" not in m for m in data["summary"]["modes"].values())


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--temperature", "-1"), "temperature must be"),
        (("--temperature", "nan"), "temperature must be"),
        (("--temperature", "1", "--top-p", "2"), "top_p must be"),
        (("--temperature", "1", "--min-p", "-0.1"), "min_p must be"),
        (("--temperature", "1", "--top-k", "-3"), "top_k must be"),
        (("--temperature", "warm"), "invalid float value"),
        (("--temperature", "1", "--suite", "editor"), "does not apply to the editor suite"),
        (("--temperature", "1", "--suite", "infill"), "does not apply to the infill suite"),
        (("--temperature", "1", "--record", "rec.json"), "does not apply to --record"),
        (("--temperature", "1", "--replay", "rec.json"), "does not apply to --replay"),
    ],
)
def test_bad_sampling_flags_are_one_line(tmp_path, flags, message):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = 1\n"])
    p = benchmark(suite, "--modes", "greedy,structspec", *flags, timeout=120)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


def test_summary_compares_sampled_text_only_with_the_same_random_numbers():
    runs = [
        Run("p", "greedy", 0, [1, 2], 1.0, 1.0),
        Run("p", "structspec", 0, [1, 2], 1.0, 1.0),
        Run("p", "pld", 0, [1, 2], 1.0, 1.0),
    ]
    modes = ["greedy", "structspec", "pld"]
    greedy = summarize(runs, modes)["modes"]
    assert greedy["structspec"]["identical_to_greedy"] == greedy["pld"]["identical_to_greedy"] == 1
    seeded = summarize(runs, modes, Sampling(0.7, seed=1))["modes"]
    assert seeded["structspec"]["identical_to_greedy"] == 1
    assert "identical_to_greedy" not in seeded["pld"]  # its own random stream
    unseeded = summarize(runs, modes, Sampling(0.7))["modes"]
    assert "identical_to_greedy" not in unseeded["structspec"]


@pytest.mark.model
def test_pld_baseline_runs_prompts_longer_than_a_batch():
    """llama-cpp-python's prompt lookup on a 700-token prompt (its scores buffer once held 512)."""
    from structspec.bench.harness import PromptLookupBaseline
    from structspec.bench.suites import Prompt
    from structspec.model.paths import default_model_path

    pld = PromptLookupBaseline(str(default_model_path()), 2, n_ctx=1024)
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(60))
    tokens = pld.llm.tokenize(text.encode())[:700]
    assert len(tokens) == 700
    run = pld.run(Prompt("long", text), tokens, 0, 8, lambda t: False)
    assert len(run.tokens) == 8


def test_serve_mode_over_http_gives_the_in_process_tokens(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["ab(x):\n", "x = a\nx = a\n"])
    out, md = tmp_path / "out.json", tmp_path / "bench.md"
    p = benchmark(
        suite,
        "--modes",
        "greedy,structspec,serve",
        "--max-tokens",
        16,
        "--rest",
        0.01,
        "--json-out",
        out,
        "--markdown-out",
        md,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    for prompt in data["prompts"]:
        by_mode = {r["mode"]: r["tokens"] for r in prompt["runs"]}
        assert by_mode["serve"] == by_mode["structspec"] == by_mode["greedy"]
        assert by_mode["serve"]  # the stand-in writes something
    summary = data["summary"]
    assert summary["modes"]["serve"]["identical_to_greedy"] == 2
    assert summary["exactness"]["serve"]["off"] == 0
    assert summary["rest_s"] == 0.01
    assert summary["modes"]["serve"]["outside_engine_ms"] > 0
    report = md.read_text()
    assert "vs structspec" in report and "0.01 s of rest before every request" in report
    assert "the engine's own prefill, drafting and verification" in report


def test_rest_out_of_range_is_one_line(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x"])
    p = benchmark(suite, "--rest", -1)
    assert p.returncode != 0 and "--rest must be between 0 and 60" in p.stderr


def test_a_serve_that_cannot_start_says_why():
    from structspec.bench.structspec_serve import ServeBaseline, ServeError, ServeOptions

    with pytest.raises(ServeError, match="exited with code .*seed must be an integer"):
        ServeBaseline(ServeOptions("standin:x", 1, 512, ("lookup",)))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_mode_order_balances_first_places_and_neighbours(n):
    from collections import Counter

    from structspec.bench.harness import mode_order

    modes = [f"m{i}" for i in range(n)]
    rows = [mode_order(modes, k) for k in range(2 * n)]
    assert all(sorted(row) == modes for row in rows)
    assert len(set(Counter(row[0] for row in rows).values())) == 1
    pairs = Counter((a, b) for row in rows for a, b in zip(row, row[1:], strict=False))
    assert len(pairs) == n * (n - 1) and len(set(pairs.values())) <= 1


@pytest.mark.parametrize("bad_id", ["\ud800", "a|b", "a\nb"])
def test_a_suite_id_the_report_cannot_print_is_refused(tmp_path, bad_id):
    """A lone surrogate failed the report's print after the whole run (no file written);
    '|' or a line break broke the Markdown table."""
    f = tmp_path / "s.jsonl"
    f.write_text(json.dumps({"id": bad_id, "prompt": "x = "}) + "\n")
    with pytest.raises(SuiteError, match="s.jsonl:1: id"):
        jsonl(f)


def test_plot_format_is_checked_before_the_run(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = "])
    p = benchmark(suite, "--modes", "greedy", "--max-tokens", 3, "--plot", tmp_path / "p.txt")
    assert p.returncode == 2 and "--plot must name a" in p.stderr and "Traceback" not in p.stderr


def test_the_files_are_written_when_stdout_is_closed(tmp_path):
    """``| head`` or a closed pipe: the run ended with 0 and none of its files written."""
    suite = tmp_path / "suite.jsonl"
    write_suite(suite, ["x = ", "def f(a):\n"])
    out, md = tmp_path / "out.json", tmp_path / "bench.md"
    argv = [sys.executable, "-m", "structspec", "benchmark", "--model", "standin"]
    argv += ["--suite", f"jsonl:{suite}", "--modes", "greedy", "--max-tokens", "3"]
    argv += ["--json-out", str(out), "--markdown-out", str(md)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # nobody reads what it prints
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert json.loads(out.read_text())["prompts"] and "## Summary" in md.read_text()

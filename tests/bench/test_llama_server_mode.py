"""The llama-server benchmark modes, against a stand-in for llama.cpp's server.

The stand-in speaks the part of llama-server's HTTP API the benchmark uses
(``/health``, ``/completion`` with token prompts, ``timings``) so that the
client side (start, readiness, request body, timing arithmetic, failures) is
checked without building llama.cpp.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from structspec.bench.harness import Run, acceptance_by_position, summarize
from structspec.bench.llama_server import (
    LlamaServerBaseline,
    LlamaServerError,
    spec_type,
)
from structspec.bench.suites import Prompt
from structspec.engine.sampling import Sampling
from structspec.engine.stats import PassTrace

FAKE = r'''#!{python}
"""A stand-in for llama-server: greedy 'generation' repeats the last prompt token."""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
spec = args[args.index("--spec-type") + 1] if "--spec-type" in args else None
with open({log!r}, "a") as fh:
    fh.write(json.dumps(args) + "\n")
if {exit_at_start}:
    sys.exit(3)

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200, {{"status": "ok"}})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open({log!r}, "a") as fh:
            fh.write(json.dumps(req) + "\n")
        n = req["n_predict"]
        toks = [req["prompt"][-1]] * n
        self._send(200, {{
            "content": "", "tokens": toks,
            "timings": {{"predicted_n": n, "predicted_ms": 100.0 * n,
                        "predicted_per_second": 10.0,
                        "draft_n": 6 if spec else 0, "draft_n_accepted": 4 if spec else 0}},
        }})

HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def fake_server(tmp_path: Path, exit_at_start: bool = False) -> tuple[Path, Path]:
    log = tmp_path / "calls.jsonl"
    exe = tmp_path / "llama-server"
    exe.write_text(FAKE.format(python=sys.executable, log=str(log), exit_at_start=exit_at_start))
    exe.chmod(0o755)
    return exe, log


def test_run_reports_the_servers_own_decode_rate(tmp_path):
    exe, log = fake_server(tmp_path)
    server = LlamaServerBaseline(str(exe), "llama-server:ngram-mod", "m.gguf", 2, 4096)
    try:
        run = server.run(Prompt("p0", "x", None), [2, 7, 9], 0, 12)
    finally:
        server.close()
    assert server.proc.poll() is not None  # closed
    assert run.mode == "llama-server:ngram-mod" and run.tokens == [9] * 12
    assert run.decode_tps == pytest.approx(10.0)  # the server's own predicted_per_second
    assert (run.drafted, run.accepted) == (6, 4)
    args, body = (json.loads(line) for line in log.read_text().splitlines())
    assert args[args.index("--spec-type") + 1] == "ngram-mod"
    assert args[args.index("--threads") + 1] == "2" and "127.0.0.1" in args
    # greedy, from a cold cache, the prompt as the same token ids
    assert body["prompt"] == [2, 7, 9] and body["samplers"] == ["top_k"] and body["top_k"] == 1
    assert body["cache_prompt"] is False and body["return_tokens"] is True


def test_greedy_mode_has_no_spec_type(tmp_path):
    exe, log = fake_server(tmp_path)
    LlamaServerBaseline(str(exe), "llama-server", "m.gguf", 1, 512).close()
    assert "--spec-type" not in json.loads(log.read_text().splitlines()[0])


def test_a_server_that_dies_at_start_is_a_clear_error(tmp_path):
    exe, _ = fake_server(tmp_path, exit_at_start=True)
    with pytest.raises(LlamaServerError, match="exited with code 3"):
        LlamaServerBaseline(str(exe), "llama-server", "m.gguf", 1, 512)


def test_spec_types():
    assert spec_type("llama-server") is None
    assert spec_type("llama-server:ngram-simple") == "ngram-simple"
    with pytest.raises(ValueError, match="unknown spec type"):
        spec_type("llama-server:draft-simple")


def test_summary_has_end_to_end_ratios_against_llama_server():
    runs = [
        Run("p", "llama-server:ngram-mod", 0, [1] * 11, 2.0, 1.0),
        Run("p", "structspec", 0, [1] * 11, 1.0, 0.5),
    ]
    s = summarize(runs, ["structspec", "llama-server:ngram-mod"])["modes"]["structspec"]
    assert s["aggregate_vs_llama-server:ngram-mod"] == pytest.approx(2.0)
    assert s["e2e_vs_llama-server:ngram-mod"] == pytest.approx(2.0)
    assert "identical_to_greedy" not in s


def test_acceptance_by_position():
    r = Run("p", "structspec", 0, [1], 1.0, 1.0)
    r.trace = [PassTrace(0, "lookup", 3, 1, 1.0), PassTrace(1, "lookup", 2, 2, 1.0)]
    assert acceptance_by_position([r]) == [(1, 2, 1.0), (2, 2, 0.5), (3, 1, 0.0)]


def benchmark(*args: object, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "structspec", "benchmark", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        ((), "need --llama-server PATH"),
        (("--llama-server", "/nonexistent/llama-server"), "not an executable file"),
    ],
)
def test_llama_server_modes_need_a_binary(tmp_path, extra, message):
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"id": "a", "prompt": "x = 1\\n"}\n')
    p = benchmark(
        "--model", "standin", "--suite", f"jsonl:{suite}", "--modes", "greedy,llama-server", *extra
    )
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


def test_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"id": "a", "prompt": "x = a\\nx = a\\n"}\n{"id": "b", "prompt": "y"}\n')
    png = tmp_path / "plot.png"
    p = benchmark(
        "--model",
        "standin",
        "--suite",
        f"jsonl:{suite}",
        "--modes",
        "greedy,structspec",
        "--max-tokens",
        16,
        "--plot",
        png,
    )
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def one_prompt_run(tmp_path, modes: str, *args):
    """``benchmark`` of one prompt on the default model beside the fake llama-server.

    Returns the process, its JSON output path and the fake server's request log.
    """
    exe, log = fake_server(tmp_path)
    suite = tmp_path / "s.jsonl"
    suite.write_text('{"id": "a", "prompt": "def add(a, b):\\n"}\n')
    out = tmp_path / "out.json"
    p = benchmark(
        "--suite",
        f"jsonl:{suite}",
        "--modes",
        modes,
        "--llama-server",
        exe,
        "--max-tokens",
        8,
        *args,
        "--json-out",
        out,
    )
    return p, out, log


@pytest.mark.model
def test_llama_server_mode_side_by_side_on_the_default_model(tmp_path):
    p, out, log = one_prompt_run(
        tmp_path, "greedy,structspec,llama-server:ngram-mod", "--threads", 2
    )
    assert p.returncode == 0, p.stderr
    modes = json.loads(out.read_text())["summary"]["modes"]
    assert modes["llama-server:ngram-mod"]["decode_tps"] == pytest.approx(10.0)
    assert "e2e_vs_llama-server:ngram-mod" in modes["structspec"]
    assert "llama-server:ngram-mod" not in json.loads(out.read_text())["summary"]["exactness"]
    assert "vs llama-server:ngram-mod" in p.stdout
    body = json.loads(log.read_text().splitlines()[1])
    assert len(body["prompt"]) > 3 and body["n_predict"] == 8


def test_sampled_request_names_the_engines_sampler_chain(tmp_path):
    exe, log = fake_server(tmp_path)
    seeded = Sampling(0.7, top_k=20, top_p=0.9, min_p=0.05, seed=(1 << 32) + 5)
    for sampling in (seeded, Sampling(0.7)):
        server = LlamaServerBaseline(str(exe), "llama-server", "m.gguf", 1, 512, sampling=sampling)
        try:
            server.run(Prompt("p0", "x", None), [2, 7], 0, 4)
        finally:
            server.close()
    seeded_body, unseeded_body = (json.loads(line) for line in log.read_text().splitlines()[1::2])
    # only the engine's samplers, in its order: none of the server's other defaults applies
    assert seeded_body["samplers"] == ["top_k", "top_p", "min_p", "temperature"]
    assert (seeded_body["temperature"], seeded_body["top_k"]) == (0.7, 20)
    assert (seeded_body["top_p"], seeded_body["min_p"]) == (0.9, 0.05)
    assert seeded_body["seed"] == 5  # llama.cpp's seeds are 32 bits
    assert "seed" not in unseeded_body and unseeded_body["top_k"] == 0


@pytest.mark.model
def test_every_mode_samples_on_the_default_model(tmp_path):
    p, out, log = one_prompt_run(
        tmp_path,
        "greedy,structspec,pld,llama-server",
        "--threads",
        1,  # llama-cpp-python's fixed threads crawl on a busy machine
        "--temperature",
        0.7,
        "--top-p",
        0.9,
        "--seed",
        1,
    )
    assert p.returncode == 0, p.stderr
    data = json.loads(out.read_text())
    assert data["summary"]["baseline_failures"] == []
    assert {r["mode"]: len(r["tokens"]) > 0 for r in data["prompts"][0]["runs"]} == {
        "greedy": True,
        "structspec": True,
        "pld": True,
        "llama-server": True,
    }
    assert "temperature 0.7, top_k 0 (off), top_p 0.9, min_p 0 (off), seed 1" in p.stdout
    body = json.loads(log.read_text().splitlines()[1])
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9 and body["seed"] == 1

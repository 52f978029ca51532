"""``structspec run`` with the sampling flags and token healing, on the stand-in model."""

from __future__ import annotations

import json
import subprocess
import sys


def run_json(*args: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "run", "--model", "standin", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_same_seed_same_text_with_or_without_drafts():
    flags = ("--prompt", "def f(a):", "--max-tokens", "24", "--temperature", "0.8")
    a = run_json(*flags, "--top-p", "0.9", "--seed", "3")
    b = run_json(*flags, "--top-p", "0.9", "--seed", "3", "--greedy")
    assert a["tokens"] == b["tokens"] and a["text"] == b["text"]
    others = {run_json(*flags, "--seed", str(s))["text"] for s in range(4, 8)}
    assert len(others) > 1


def test_bad_sampling_flag_is_one_line():
    p = subprocess.run(
        [sys.executable, "-m", "structspec", "run", "--model", "standin", "--prompt", "x"]
        + ["--temperature", "1", "--top-p", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "top_p" in p.stderr and p.stderr.strip().count("\n") == 0


def test_token_healing_flag_is_accepted():
    on = run_json("--prompt", "x = ab", "--max-tokens", "8")
    off = run_json("--prompt", "x = ab", "--max-tokens", "8", "--no-token-healing")
    # One character per stand-in token: nothing to heal, the same text either way.
    assert on["healed_tokens"] == off["healed_tokens"] == 0
    assert on["text"] == off["text"]

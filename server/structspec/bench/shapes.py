"""Model shapes: what the code models people run cost on this machine (speed only).

``python -m structspec.bench.shapes [--shape NAME ...] [--cache-dir D] [--quantize PATH]
--json-out F --markdown-out F``

No real code GGUF can be installed here, but its cost can: a GGUF with the
real architecture, hyper-parameters, vocabulary size and quantization mix and
*random* weights costs what the real one costs to evaluate. The suite:

1. builds each shape once into a cache directory (``shape_models.build_shape``): the
   ``gguf`` package writes Q8_0 with random weights and a synthetic byte-level
   BPE tokenizer of the real vocabulary size that carries the model's special
   and FIM tokens under their real names (llama.cpp finds the FIM layout by
   name), then llama.cpp's own ``llama-quantize`` requantizes it to Q4_K_M,
   which gives the head type those releases have (Q6_K: ``output.weight``, or
   ``token_embd.weight`` where the model ties them);
2. measures each shape and the default model in a child process of its own
   (``measure_model``: a clean peak RSS, and one shape that crashes llama.cpp
   does not take the others with it): load time, peak RSS, prompt tokens/s,
   decode tokens/s (one row per pass), the verification cost table (1-16
   rows) with the head structspec uses and, where that is its own kernel,
   with llama.cpp's head beside;
3. replays the recorded greedy outputs (``bench/replay.py``; the recordings
   are of the default model, so the acceptance is that model's) under each
   shape's cost table: the speed-up speculation would give at that cost;
4. ``window_tokens``: the prompt window the adaptive defaults choose at the
   measured rates (``structspec.rates``: what the machine evaluates in
   ``WINDOW_SECONDS``, at most the static default ``windowTokens``).

The weights are random: the figures say what a pass costs, nothing about the
quality of a suggestion.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from structspec.bench.shape_models import (
    DEFAULT,
    SHAPES,
    ShapeError,
    build_shape,
    default_cache_dir,
    shape_path,
)
from structspec.config import Settings
from structspec.rates import WARM_S, Rates, adaptive_defaults

#: A new place should be warm within this many seconds (the window's budget).
WINDOW_SECONDS = WARM_S
#: The cost table's row counts (``runtime.measure_verify_cost``).
ROWS = 16

# -- measuring one model (in a child process) -------------------------------
_TEXT = (
    "def fibonacci(n: int) -> list[int]:\n"
    '    """The first n Fibonacci numbers."""\n'
    "    a, b = 0, 1\n    out = []\n    for _ in range(n):\n"
    "        out.append(a)\n        a, b = b, a + b\n    return out\n\n\n"
)


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def measure_model(
    path: str, *, threads: int, prompt_tokens: int, decode_tokens: int
) -> dict[str, Any]:
    """Load time, peak RSS, prompt and decode rates and the cost table(s) of one GGUF.

    ``path`` empty: the default model.
    """
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path
    from structspec.runtime import measure_verify_cost

    file = Path(path) if path else default_model_path()
    t0 = time.perf_counter()
    model = LlamaModel.load(file, n_ctx=4096, threads=threads)
    load_s = time.perf_counter() - t0
    tokens = model.tokenize(_TEXT * 64)[:prompt_tokens]
    model.prefill(tokens[:16])  # warm-up: the first decode pages the weights in
    model.truncate(0)
    t0 = time.perf_counter()
    model.prefill(tokens)
    prompt_s = time.perf_counter() - t0
    token = tokens[-1]
    t0 = time.perf_counter()
    for _ in range(decode_tokens):
        token = int(model.verify([token]).argmax[0])
    decode_s = time.perf_counter() - t0
    verify = {model.head: list(measure_verify_cost(model).ms)}
    if model.head != "llama.cpp":
        with model.llama_cpp_head():
            verify["llama.cpp"] = list(measure_verify_cost(model).ms)
    result = {
        "model": file.name,
        "file_mb": file.stat().st_size / 2**20,
        "n_embd": model.n_embd,
        "n_vocab": model.n_vocab,
        "fim": model.fim_tokens() is not None,
        "load_s": load_s,
        "prompt_tokens": len(tokens),
        "prompt_tps": len(tokens) / prompt_s,
        "decode_tokens": decode_tokens,
        "decode_tps": decode_tokens / decode_s,
        "head": model.head,
        "verify_ms": verify,
    }
    model.close()
    result["rss_mb"] = _peak_rss_mb()
    return result


def _measure_in_child(path: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "structspec.bench.shapes", "--measure", path or DEFAULT,
        "--threads", str(args.threads), "--prompt-tokens", str(args.prompt_tokens),
        "--decode-tokens", str(args.decode_tokens),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ShapeError(f"measuring {path or DEFAULT} failed: {tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- prediction and the window ----------------------------------------------
def window_tokens(prompt_tps: float, decode_tps: float) -> int:
    """The ``windowTokens`` the adaptive defaults choose at these rates (``structspec.rates``)."""
    return adaptive_defaults(Rates(prompt_tps, decode_tps))["window_tokens"]


def predicted_speedups(
    tables: dict[str, Sequence[float]], recordings: Sequence[Path]
) -> dict[str, dict[str, float]]:
    """Per table name, per recording: the speed-up the replay predicts under that table.

    The recordings are of the default model (its tokenizer is opened for the
    sources); the engine is the default settings' (``runtime.assemble_engine``).
    """
    from structspec.bench.replay import Recording, replay
    from structspec.engine.control import CostModel
    from structspec.runtime import assemble_engine, open_model

    if not recordings:
        return {}
    settings = Settings()
    vocab = open_model("", context_size=256, threads=1)
    loaded = [(p, Recording.load(p)) for p in recordings]
    out: dict[str, dict[str, float]] = {}
    for name, ms in tables.items():
        cost = CostModel(tuple(ms))
        out[name] = {
            p.name: replay(
                rec, vocab, lambda m, c: assemble_engine(m, settings, c), cost=cost
            ).speedup
            for p, rec in loaded
            if rec.model == vocab.name
        }
    return out


# -- the report ---------------------------------------------------------------
def machine() -> dict[str, Any]:
    from structspec.runtime import cpu_name

    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average": load}


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown (what ``docs/BENCHMARKS-shapes.md`` is)."""
    m = report["machine"]
    load = ", ".join(f"{v:.2f}" for v in m.get("load_average", [])) or "unknown"
    end = ", ".join(f"{v:.2f}" for v in m.get("load_average_after", [])) or "unknown"
    lines = [
        "# Model shapes: what a pass costs",
        "",
        "**The weights are random: these figures are speed only, and say nothing about the "
        "quality of a suggestion.** Each shape is a GGUF with the real architecture, sizes, "
        "vocabulary size and special/FIM tokens of the model it is named after, "
        "quantized to Q4_K_M by llama.cpp's `llama-quantize` (the head type it gives is "
        "the one those releases have), so it costs what the real model costs to evaluate. "
        "`default` is the embedded default model itself (real weights), measured alike.",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} CPUs, {report['threads']} threads; "
        f"load average (1, 5, 15 min) {load} at the start, {end} at the end"
        + (
            " (other processes shared the cores: the rates are lower than on an idle machine)"
            if m.get("load_average") and m["load_average"][0] > (m["cores"] or 1)
            else ""
        )
        + ".",
        "",
        f"Prompt rate: {report['prompt_tokens']} prompt tokens in one prefill; decode rate: "
        f"{report['decode_tokens']} tokens, one row per pass; `window` = the prompt tokens "
        f"evaluated in {WINDOW_SECONDS:g} s at that rate, at most the default `windowTokens`; "
        "`predicted speed-up`: the replay of the recorded greedy outputs of the default model "
        f"({', '.join(report['recordings']) or 'none'}) under the shape's cost table.",
        "",
        "| model | file MB | load s | peak RSS MB | prompt tok/s | decode tok/s | head | "
        "window | predicted speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in report["shapes"].items():
        if "error" in r:
            lines.append(f"| {name} | {r['error']} |  |  |  |  |  |  |  |")
            continue
        by = r.get("predicted_speedup_by_recording", {})
        speed = ", ".join(f"{v:.2f}x" for v in by.values()) or "n/a"
        lines.append(
            f"| {name} | {r['file_mb']:.0f} | {r['load_s']:.1f} | {r['rss_mb']:.0f} | "
            f"{r['prompt_tps']:.1f} | {r['decode_tps']:.1f} | {r['head']} | "
            f"{r['window_tokens']} | {speed} |"
        )
    measured = {n: r for n, r in report["shapes"].items() if "error" not in r}
    if measured:
        columns = [(n, h) for n, r in measured.items() for h in r["verify_ms"]]
        lines += [
            "",
            "Verification cost per pass, ms (median of 5, row counts interleaved), by head:",
            "",
            "| rows | " + " | ".join(f"{n} ({h})" for n, h in columns) + " |",
            "| --- |" + " --- |" * len(columns),
        ]
        for row in range(ROWS):
            cells = [f"{measured[n]['verify_ms'][h][row]:.1f}" for n, h in columns]
            lines.append(f"| {row + 1} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "`head`: the code that computes a verification pass's logits (`model/head.py` "
            "takes Q8_0 and Q6_K heads on CPUs with AVX2, AVX-VNNI or AVX-512 VNNI, once it "
            "agrees with llama.cpp's logits at load; anything else keeps llama.cpp's).",
        ]
    return "\n".join(lines) + "\n"


# -- the command ----------------------------------------------------------------
_BUILD_HINT = (
    "llama-quantize not found: build it with tools/build-llama-server.sh (from a checkout; "
    "it builds llama-quantize beside llama-server) and pass --quantize "
    "DIR/llama.cpp/build/bin/llama-quantize"
)


def _recordings_default() -> list[Path]:
    data = Path(__file__).resolve().parents[3] / "tests" / "data"
    names = ("humaneval-40x128.replay.json", "editor-python-25.replay.json")
    return [data / n for n in names if (data / n).is_file()]


def parser(prog: str = "python -m structspec.bench.shapes") -> argparse.ArgumentParser:
    """The suite's options (``structspec benchmark --suite shapes`` passes its own on)."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__)
    names = [*SHAPES, DEFAULT]
    p.add_argument(
        "--shape", action="append", choices=names, help="default: all, and the default model"
    )
    p.add_argument("--cache-dir", default="", help=f"default: {default_cache_dir()}")
    p.add_argument("--quantize", default="", help="llama.cpp's llama-quantize (default: on PATH)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument(
        "--recording",
        action="append",
        default=None,
        help="replay recordings (default: the repository's)",
    )
    p.add_argument("--json-out", default="")
    p.add_argument("--markdown-out", default="")
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)  # the child's job
    return p


def run_shapes(args: argparse.Namespace, command: str) -> int:
    """Build what is missing, measure every selected model, write the JSON and Markdown."""
    import shutil

    selected = args.shape or [*SHAPES, DEFAULT]
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    quantize = args.quantize or shutil.which("llama-quantize") or ""
    missing = [n for n in selected if n != DEFAULT and not shape_path(SHAPES[n], cache).is_file()]
    if missing and not (quantize and os.access(quantize, os.X_OK)):
        print(_BUILD_HINT, file=sys.stderr)
        return 2
    recordings = [Path(r) for r in args.recording] if args.recording else _recordings_default()
    report: dict[str, Any] = {
        "command": command,
        "machine": machine(),
        "threads": args.threads,
        "prompt_tokens": args.prompt_tokens,
        "decode_tokens": args.decode_tokens,
        "recordings": [p.name for p in recordings],
        "random_weights": True,
        "shapes": {},
    }
    failed = False
    for name in selected:
        try:
            if name == DEFAULT:
                path = ""
            else:
                print(
                    f"shapes: building {name} (once)" if name in missing else f"shapes: {name}",
                    file=sys.stderr,
                )
                path = str(build_shape(SHAPES[name], cache, quantize))
            print(f"shapes: measuring {name}", file=sys.stderr)
            r = _measure_in_child(path, args)
        except (ShapeError, OSError, ValueError) as exc:
            print(f"shapes: {exc}", file=sys.stderr)
            report["shapes"][name] = {"error": str(exc)}
            failed = True
            continue
        r["window_tokens"] = window_tokens(r["prompt_tps"], r["decode_tps"])
        report["shapes"][name] = r
    tables = {n: r["verify_ms"][r["head"]] for n, r in report["shapes"].items() if "error" not in r}
    from structspec.bench.replay import ReplayError
    from structspec.model.base import ModelError

    try:
        predicted = predicted_speedups(tables, recordings)
    except (ReplayError, ModelError) as exc:  # a bad recording, no default model
        print(f"shapes: no predicted speed-up: {exc}", file=sys.stderr)
        predicted = {}
    for name, by in predicted.items():
        r = report["shapes"][name]
        r["predicted_speedup_by_recording"] = by
        r["predicted_speedup"] = next(iter(by.values()), None)
    report["machine"]["load_average_after"] = machine()["load_average"]
    text = json.dumps(report, indent=1)
    markdown = render_markdown(report)
    for out, body in ((args.json_out, text), (args.markdown_out, markdown)):
        if out:
            Path(out).write_text(body + ("" if body.endswith("\n") else "\n"), encoding="utf-8")
    print(markdown)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.measure:
        path = "" if args.measure == DEFAULT else args.measure
        r = measure_model(
            path,
            threads=args.threads,
            prompt_tokens=args.prompt_tokens,
            decode_tokens=args.decode_tokens,
        )
        print(json.dumps(r))
        return 0
    argv = sys.argv[1:] if argv is None else list(argv)
    command = "python -m structspec.bench.shapes " + " ".join(shlex.quote(a) for a in argv)
    return run_shapes(args, command.strip())


if __name__ == "__main__":
    raise SystemExit(main())

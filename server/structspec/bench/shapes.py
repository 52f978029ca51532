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
   does not take the others with it), loaded as the language server loads it
   (Q5_0 matrices widened to Q8_0, ``model/widen.py``): load time, peak RSS, prompt tokens/s,
   decode tokens/s (one row per pass), the verification cost table (1-16
   rows) with the head structspec uses and, where that is its own kernel,
   with llama.cpp's head beside; and each head's own cost (``measure_head_ms``):
   passes of 1, 4, 8 and 16 rows with each head and with none, on the shape's
   *head probe* (``Shape.head_probe``: the same vocabulary, width and head
   type with one layer, built beside it), so that the head's cost is not a
   small difference of two large pass times;
3. replays the recorded greedy outputs (``bench/replay.py``; the recordings
   are of the default model, so the acceptance is that model's) under each
   shape's cost table: the speed-up speculation would give at that cost;
4. ``window_tokens``: the prompt window the adaptive defaults choose at the
   measured rates (``structspec.rates``: what the machine evaluates in
   ``WINDOW_SECONDS``, at most the static default ``windowTokens``, at least
   ``WINDOW_MIN``), and ``first_window_tokens``: the window of a first answer
   at a new place (``completion.prompt.first_window_tokens``: at most what
   the rate evaluates in ``WINDOW_SECONDS``, below the window's floor too).

The weights are random: the figures say what a pass costs, nothing about the
quality of a suggestion.

The output head, per shape (``head_ms``, ``head_type``, ``head_reason``,
``head_verdict``): which code computes it and why (``LlamaModel.head_reason``,
decided at load), and where structspec's kernel covers the head's type, the
ratio of the two heads' own costs at 8 rows against ``HEAD_TARGET``.
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
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from structspec.model.llama import LlamaModel

#: A new place should be warm within this many seconds (the window's budget).
WINDOW_SECONDS = WARM_S
#: The cost table's row counts (``runtime.measure_verify_cost``).
ROWS = 16
#: The row counts of each head's own cost (``measure_head_ms``).
HEAD_ROWS = (1, 4, 8, 16)
#: Where the kernel covers the head's type, a pass's head of ``HEAD_VERDICT_ROWS``
#: rows should cost at most this share of llama.cpp's (issue 31).
HEAD_TARGET = 0.8
HEAD_VERDICT_ROWS = 8
#: Repetitions of each head-cost measurement (the median is kept).
HEAD_REPS = 9
#: Prompt-rate measurements per model (the median is kept).
PROMPT_REPS = 3

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


def measure_head_ms(
    model: LlamaModel, *, rows: Sequence[int] = HEAD_ROWS, reps: int = HEAD_REPS
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Each head's own cost per row count (ms), and the pass with no head, of a ``LlamaModel``.

    On a 1.5B-7B model the layers are most of a verification pass, so the
    whole pass hides what its head costs. For each row count these passes run
    back to back after the same 400-token context: a verification pass with
    the head in use, one with llama.cpp's (where the head in use is
    structspec's), and the same rows decoded with no logits. With no row
    asking for logits llama.cpp computes no output row: the last layer
    gathers the output rows (``ggml_get_rows`` by ``out_ids``) before its
    feed-forward, and ggml skips empty tensors, so the output matrix is not
    touched; that pass also skips the last layer's feed-forward on those rows,
    which every head pays alike (the ratio of two heads is, if anything, too
    close to 1). The passes of each row count are interleaved in every
    repetition, so drift of a shared machine hits them alike; a head's cost is
    the median of its passes less the median of the no-head passes (a median
    each: a pass stalled by another process spoils one sample, not a
    difference), at least 0. Row keys are strings (as JSON has them).

    Returns ``({head: {rows: ms}}, {rows: no-head pass ms})``.
    """
    text = "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    context = model.tokenize(text * 12)[:400]
    probe = model.tokenize(text * 2, add_bos=False)[:16]
    heads = [model.head] if model.head == "llama.cpp" else [model.head, "llama.cpp"]

    def run(head: str | None, n: int) -> float:
        t0 = time.perf_counter()
        if head is None:
            model.prefill([*context, *probe[:n]])  # no row asks for logits
        elif head == model.head:
            with model.kernel_every_pass():  # (its own cost where it leaves a pass to llama.cpp's)
                model.verify(probe[:n])
        else:
            with model.llama_cpp_head():
                model.verify(probe[:n])
        ms = (time.perf_counter() - t0) * 1000.0
        model.truncate(len(context))
        return ms

    # every pass on the same threads, whatever other processes do meanwhile
    with model.threads_pinned(model.threads):
        model.prefill(context)
        for head in [*heads, None]:  # warm-up: the first pass of a shape pages its code in
            run(head, max(rows))
        passes: dict[str | None, dict[int, list[float]]] = {
            h: {n: [] for n in rows} for h in [*heads, None]
        }
        for _ in range(reps):
            for n in rows:
                for head, by_rows in passes.items():
                    by_rows[n].append(run(head, n))
        model.truncate(0)

    med = {h: {n: sorted(v)[len(v) // 2] for n, v in by.items()} for h, by in passes.items()}
    bare = med.pop(None)
    head_ms = {
        str(h): {str(n): max(0.0, ms - bare[n]) for n, ms in by.items()} for h, by in med.items()
    }
    return head_ms, {str(n): ms for n, ms in bare.items()}


def head_verdict(r: dict[str, Any]) -> dict[str, Any]:
    """The head verdict of one shape's measurement ``r`` (``head_ms``, ``head``, ``head_reason``).

    Where both heads were measured: structspec's ``HEAD_VERDICT_ROWS``-row
    head cost over llama.cpp's, and whether it is at most ``HEAD_TARGET``.
    Where only llama.cpp's was: why it is kept (``head_reason``).
    """
    key = str(HEAD_VERDICT_ROWS)
    ours = r.get("head_ms", {}).get("structspec", {}).get(key)
    theirs = r.get("head_ms", {}).get("llama.cpp", {}).get(key)
    verdict: dict[str, Any] = {
        "rows": HEAD_VERDICT_ROWS,
        "target": HEAD_TARGET,
        "ratio": None,
        "met": None,
    }
    if ours is None or theirs is None:
        verdict["text"] = f"llama.cpp's head is kept: {r.get('head_reason') or 'unknown'}"
    elif theirs <= 0.0:
        verdict["text"] = (
            f"llama.cpp's head measured no cost at {HEAD_VERDICT_ROWS} rows (noise): no ratio"
        )
    else:
        ratio = ours / theirs
        met = ratio <= HEAD_TARGET
        verdict.update(ratio=ratio, met=met)
        verdict["text"] = (
            f"{HEAD_VERDICT_ROWS} rows: structspec's head costs {ratio:.2f}x llama.cpp's "
            f"(target <= {HEAD_TARGET:g}x: {'met' if met else 'NOT met'})"
        )
    return verdict


def measure_model(
    path: str, *, threads: int, prompt_tokens: int, decode_tokens: int, head_probe: str = ""
) -> dict[str, Any]:
    """Load time, peak RSS, prompt and decode rates, the cost table(s) and head costs of one GGUF.

    ``path`` empty: the default model. ``head_probe``: the shape's one-layer
    GGUF (``Shape.head_probe``) whose passes give each head's own cost; empty:
    the model's own passes (the default model, whose layers are cheap).
    """
    from structspec.model.llama import LlamaModel
    from structspec.model.paths import default_model_path
    from structspec.model.widen import widened_weights
    from structspec.runtime import measure_verify_cost

    file = Path(path) if path else default_model_path()
    widened_weights(file)  # as the language server loads it; written before the load is timed
    t0 = time.perf_counter()
    model = LlamaModel.load(file, n_ctx=4096, threads=threads, widen=True)
    load_s = time.perf_counter() - t0
    tokens = model.tokenize(_TEXT * 64)[:prompt_tokens]
    model.prefill(tokens[:16])  # warm-up: the first decode pages the weights in
    model.truncate(0)
    prompt_runs = []
    for _ in range(PROMPT_REPS):
        t0 = time.perf_counter()
        model.prefill(tokens)
        prompt_runs.append(time.perf_counter() - t0)
        model.truncate(0)
    prompt_s = sorted(prompt_runs)[len(prompt_runs) // 2]
    token = tokens[-1]
    t0 = time.perf_counter()
    for _ in range(decode_tokens):
        token = int(model.verify([token]).argmax[0])
    decode_s = time.perf_counter() - t0
    verify = {model.head: list(measure_verify_cost(model).ms)}
    if model.head != "llama.cpp":
        with model.llama_cpp_head():
            verify["llama.cpp"] = list(measure_verify_cost(model).ms)
    head_ms, no_head_ms = ({}, {}) if head_probe else measure_head_ms(model)
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
        "widened": model.weights != model.path,  # Q5_0 loaded as Q8_0 (model/widen.py)
        "head": model.head,
        "head_type": model.head_type,
        "head_reason": model.head_reason,
        "verify_ms": verify,
        "head_ms": head_ms,
        "no_head_ms": no_head_ms,
        "head_measured_on": "one layer" if head_probe else "the model",
    }
    model.close()
    result["rss_mb"] = _peak_rss_mb()  # before the probe: its peak is the model's alone
    if head_probe:
        probe = LlamaModel.load(head_probe, n_ctx=4096, threads=threads)
        try:
            result["head_ms"], result["no_head_ms"] = measure_head_ms(probe)
            if probe.head != result["head"]:
                result["head_probe_head"] = probe.head
        finally:
            probe.close()
    return result


def _measure_in_child(path: str, args: argparse.Namespace, head_probe: str = "") -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "structspec.bench.shapes", "--measure", path or DEFAULT,
        "--threads", str(args.threads), "--prompt-tokens", str(args.prompt_tokens),
        "--decode-tokens", str(args.decode_tokens), "--head-probe", head_probe,
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


def first_window(prompt_tps: float, window: int) -> int:
    """The window of a first answer at a new place, of ``window`` tokens at ``prompt_tps``."""
    from structspec.completion.prompt import first_window_tokens

    return first_window_tokens(prompt_tps, window)


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
    vocab = open_model("", context_size=256, threads=1, widen=False)
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
        f"evaluated in {WINDOW_SECONDS:g} s at that rate, at most the default `windowTokens` and "
        "at least 128; `first window`: the window a first answer at a new place evaluates "
        f"(at most {WINDOW_SECONDS:g} s of it), and its seconds at the prompt rate; "
        "`predicted speed-up`: the replay of the recorded greedy outputs of the default model "
        f"({', '.join(report['recordings']) or 'none'}) under the shape's cost table.",
        "",
        "| model | file MB | load s | peak RSS MB | prompt tok/s | decode tok/s | head | "
        "window | first window | predicted speed-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in report["shapes"].items():
        if "error" in r:
            lines.append(f"| {name} | {r['error']} |  |  |  |  |  |  |  |  |")
            continue
        by = r.get("predicted_speedup_by_recording", {})
        speed = ", ".join(f"{v:.2f}x" for v in by.values()) or "n/a"
        first = r.get("first_window_tokens")
        first_cell = "n/a" if first is None else f"{first} ({first / r['prompt_tps']:.1f} s)"
        lines.append(
            f"| {name} | {r['file_mb']:.0f} | {r['load_s']:.1f} | {r['rss_mb']:.0f} | "
            f"{r['prompt_tps']:.1f} | {r['decode_tps']:.1f} | {r['head']} | "
            f"{r['window_tokens']} | {first_cell} | {speed} |"
        )
    measured = {n: r for n, r in report["shapes"].items() if "error" not in r}
    widened = [n for n, r in measured.items() if r.get("widened")]
    if widened:
        lines += [
            "",
            "Loaded as the language server loads them (setting `widen_weights`): the Q5_0 "
            f"matrices of {', '.join(widened)} widened to Q8_0, the same weights "
            "(`model/widen.py`, `docs/MEASUREMENTS.md` §16); the copy is written before the "
            "load is timed.",
        ]
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
        lines += _head_section(measured)
    return "\n".join(lines) + "\n"


def _head_section(measured: dict[str, dict[str, Any]]) -> list[str]:
    """The section "The output head": each head's own cost per row count, the verdict."""
    shown = {n: r for n, r in measured.items() if r.get("head_ms")}
    if not shown:
        return []
    lines = [
        "",
        "## The output head",
        "",
        "On a 1.5B-7B model the layers are most of a pass, so the whole-pass tables above "
        "hide what the head costs. Each head's own cost: a verification pass of n rows with "
        "that head, less the same rows decoded with no logits (llama.cpp then computes no "
        "output row, and skips the last layer's feed-forward on those rows too, which both "
        "heads pay: the ratio is if anything too close to 1); the median of "
        f"{HEAD_REPS} repetitions, the heads, the no-head pass and the row counts interleaved. "
        "A shape's passes are those of its head probe: the same vocabulary, width and head "
        "type with one layer (a head's cost is then most of a pass, not a small difference "
        "of two large, noisy pass times); the default model's are its own. "
        f"Where structspec's kernel covers the head's type, {HEAD_VERDICT_ROWS} rows should "
        f"cost at most {HEAD_TARGET:g}x llama.cpp's head; elsewhere the reason llama.cpp's "
        "head is kept is given (decided when the model loads: `LlamaModel.head_reason`). "
        "structspec's column is its kernel at every row count; a pass of fewer rows than "
        "the kernel takes for the type (`head.MIN_ROWS`: one row of a Q6_K head) runs "
        "llama.cpp's head.",
    ]
    for name, r in shown.items():
        head_ms: dict[str, dict[str, float]] = r["head_ms"]
        heads = [h for h in ("structspec", "llama.cpp") if h in head_ms]
        verdict = r.get("head_verdict") or head_verdict(r)
        lines += [
            "",
            f"### {name}",
            "",
            f"Head type {r.get('head_type') or 'unknown'}; head used: {r['head']}; "
            f"why: {r.get('head_reason') or 'not recorded'}.",
            "",
            "| rows | "
            + " | ".join(f"{h} head ms" for h in heads)
            + " | no-head pass ms |"
            + (" structspec / llama.cpp |" if len(heads) == 2 else ""),
            "| --- |" + " --- |" * (len(heads) + 1 + (len(heads) == 2)),
        ]
        for n in HEAD_ROWS:
            key = str(n)
            cells = [_ms(head_ms[h].get(key)) for h in heads]
            cells.append(_ms(r.get("no_head_ms", {}).get(key)))
            if len(heads) == 2:
                ours, theirs = head_ms["structspec"].get(key), head_ms["llama.cpp"].get(key)
                cells.append(f"{ours / theirs:.2f}x" if ours is not None and theirs else "n/a")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        if r.get("head_probe_head"):
            lines += ["", f"(The head probe used {r['head_probe_head']}'s head.)"]
        lines += ["", f"Verdict: {verdict['text']}."]
    return lines


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


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
    p.add_argument("--head-probe", default="", help=argparse.SUPPRESS)  # and its head probe
    return p


def run_shapes(args: argparse.Namespace, command: str) -> int:
    """Build what is missing, measure every selected model, write the JSON and Markdown."""
    import shutil

    selected = args.shape or [*SHAPES, DEFAULT]
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    quantize = args.quantize or shutil.which("llama-quantize") or ""
    missing = [
        n
        for n in selected
        if n != DEFAULT
        and not all(shape_path(s, cache).is_file() for s in (SHAPES[n], SHAPES[n].head_probe()))
    ]
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
                path = probe = ""
            else:
                print(
                    f"shapes: building {name} (once)" if name in missing else f"shapes: {name}",
                    file=sys.stderr,
                )
                path = str(build_shape(SHAPES[name], cache, quantize))
                probe = str(build_shape(SHAPES[name].head_probe(), cache, quantize))
            print(f"shapes: measuring {name}", file=sys.stderr)
            r = _measure_in_child(path, args, probe)
        except (ShapeError, OSError, ValueError) as exc:
            print(f"shapes: {exc}", file=sys.stderr)
            report["shapes"][name] = {"error": str(exc)}
            failed = True
            continue
        r["window_tokens"] = window_tokens(r["prompt_tps"], r["decode_tps"])
        r["first_window_tokens"] = first_window(r["prompt_tps"], r["window_tokens"])
        r["head_verdict"] = head_verdict(r)
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
            head_probe=args.head_probe,
        )
        print(json.dumps(r))
        return 0
    argv = sys.argv[1:] if argv is None else list(argv)
    command = "python -m structspec.bench.shapes " + " ".join(shlex.quote(a) for a in argv)
    return run_shapes(args, command.strip())


if __name__ == "__main__":
    raise SystemExit(main())

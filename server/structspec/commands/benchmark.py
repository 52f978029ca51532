"""``structspec benchmark``: decoding modes side by side on the same prompts, in one run."""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from structspec.bench.harness import (
    MODES,
    BaselineError,
    Exactness,
    PromptLookupBaseline,
    Run,
    ablation_sources,
    comparison_bases,
    run_engine,
    summarize,
    teacher_forced_gaps,
)
from structspec.bench.suites import SuiteError, load_suite
from structspec.cli import UserError
from structspec.commands.common import add_model_arguments, settings_from_args
from structspec.config import SOURCE_NAMES, resolve_sources


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "benchmark", help="compare greedy, structspec and llama-cpp PLD side by side"
    )
    p.add_argument(
        "--suite",
        default="humaneval",
        help="humaneval (default), mixed, editor, infill, or jsonl:PATH",
    )
    add_model_arguments(p)
    p.add_argument("--limit", type=int, help="first N prompts only")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per prompt (default 128)")
    p.add_argument("--repeat", type=int, default=1, help="runs per prompt and mode (default 1)")
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated: greedy,structspec,pld, and structspec:NAME+NAME for "
        "structspec with only those draft sources (an ablation, e.g. structspec:lookup+rules)",
    )
    p.add_argument(
        "--no-exactness", action="store_true", help="skip the teacher-forced exactness check"
    )
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure the verification cost table again before running",
    )
    p.add_argument("--files", help="editor suite: glob of source files to type through")
    p.add_argument("--json-out", help="write per-prompt, per-mode tokens and stats as JSON")
    p.add_argument("--trace-csv", help="write one row per verification pass")
    p.add_argument("--markdown-out", help="write the report as Markdown (docs/BENCHMARKS.md)")
    p.set_defaults(func=run)


def _valid_ablation(mode: str) -> bool:
    names = ablation_sources(mode)
    if not names:
        return False
    try:
        resolve_sources(names)
    except ValueError:
        return False
    return True


def _command_line() -> str:
    return "structspec " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    import llama_cpp

    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"llama-cpp-python {llama_cpp.__version__}, {platform.system()} {platform.release()}"
    )


def run(args: argparse.Namespace) -> int:
    if args.suite == "editor":
        return _run_editor(args)
    if args.suite == "infill":
        return _run_infill(args)
    modes = list(dict.fromkeys(m.strip() for m in args.modes.split(",") if m.strip()))
    unknown = [m for m in modes if m not in MODES and not _valid_ablation(m)]
    if unknown or not modes:
        raise UserError(
            f"unknown mode(s) {', '.join(unknown) or '(none)'}; use {','.join(MODES)} "
            f"or structspec:SOURCE+SOURCE with sources from {', '.join(SOURCE_NAMES)}, all"
        )
    if args.repeat < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        raise UserError("--repeat, --max-tokens and --limit must be positive")
    try:
        prompts = load_suite(args.suite)
    except SuiteError as exc:
        raise UserError(str(exc)) from None
    if args.limit:
        prompts = prompts[: args.limit]

    from structspec.runtime import load_engine

    settings = settings_from_args(args).settings
    engine = load_engine(settings)
    model = engine.model
    if args.recalibrate and hasattr(model, "cost_model") and engine.planner is not None:
        engine.planner.cost = model.cost_model(refresh=True)
    engines = {m: engine for m in ("greedy", "structspec")}
    for mode in modes:
        names = ablation_sources(mode)
        if names is not None:
            engines[mode] = load_engine(settings, model=model, sources=names)
    pld = None
    if "pld" in modes:
        path = getattr(model, "path", None)
        if path is None:
            raise UserError("the pld mode needs a GGUF model")
        pld = PromptLookupBaseline(str(path), settings.threads, n_ctx=settings.context_size)

    from tqdm import tqdm

    runs: list[Run] = []
    baseline_failures: list[str] = []
    prompt_tokens: dict[str, list[int]] = {}
    exact = {m: Exactness() for m in modes if m != "pld"}
    bar = tqdm(
        total=len(prompts) * args.repeat * len(modes),
        desc="benchmark",
        unit="run",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
    )
    for i, prompt in enumerate(prompts):
        tokens = model.tokenize(prompt.prompt)
        prompt_tokens[prompt.id] = tokens
        for rep in range(args.repeat):
            order = modes[(i + rep) % len(modes) :] + modes[: (i + rep) % len(modes)]
            for mode in order:
                if mode == "pld":
                    assert pld is not None
                    try:
                        runs.append(pld.run(prompt, tokens, rep, args.max_tokens, model.is_eog))
                    except BaselineError as exc:
                        baseline_failures.append(str(exc))
                        print(f"structspec: warning: {exc}", file=sys.stderr)
                else:
                    runs.append(
                        run_engine(engines[mode], prompt, tokens, mode, rep, args.max_tokens)
                    )
                bar.update(1)
        if not args.no_exactness:
            for mode in exact:
                out = next(r.tokens for r in runs if r.prompt_id == prompt.id and r.mode == mode)
                exact[mode].add(teacher_forced_gaps(model, tokens, out))
    bar.close()

    summary = summarize(runs, modes)
    summary["baseline_failures"] = baseline_failures
    if not args.no_exactness:
        summary["exactness"] = {m: vars(e) for m, e in exact.items()}
    command = _command_line()
    report = _report(command, args, settings.threads, model.name, prompts, runs, summary, modes)
    print(report)
    if args.markdown_out:
        Path(args.markdown_out).write_text(report + "\n", encoding="utf-8")
    if args.json_out:
        _write_json(args.json_out, command, prompts, prompt_tokens, runs, summary)
    if args.trace_csv:
        _write_trace(args.trace_csv, runs)
    return 0


def _fmt(v: Any, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _report(
    command: str,
    args: argparse.Namespace,
    threads: int,
    model_name: str,
    prompts: list,
    runs: list[Run],
    summary: dict[str, Any],
    modes: list[str],
) -> str:
    lines = [
        "# structspec benchmark",
        "",
        f"- command: `{command}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {_machine()}",
        f"- model: {model_name}, {threads} threads; suite {args.suite}, {len(prompts)} prompts, "
        f"max {args.max_tokens} tokens, {args.repeat} repeat(s)",
        "- speed: decode tokens/s after the first token (the prompt's prefill is the same work in "
        "every mode); every run starts from a cold cache; modes interleaved per prompt",
        "",
        "## Summary",
        "",
        "| mode | tok/s | e2e tok/s | vs greedy (aggregate) "
        "| vs greedy per prompt: median [p10, min] "
        "| vs pld (aggregate) | tokens/pass | acceptance | identical to greedy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    n = summary["prompts"]
    ablations = [b for b in comparison_bases(modes) if b not in ("greedy", "pld")]
    for mode in modes:
        m = summary["modes"][mode]
        per = m.get("ratio_vs_greedy")
        per_s = f"{per['median']:.2f} [{per['p10']:.2f}, {per['min']:.2f}]" if per else "-"
        ident = f"{m['identical_to_greedy']}/{n}" if "identical_to_greedy" in m else "-"
        lines.append(
            f"| {mode} | {m['decode_tps']:.1f} | {m['e2e_tps']:.1f} | "
            f"{_fmt(m.get('aggregate_vs_greedy'))} | {per_s} | {_fmt(m.get('aggregate_vs_pld'))} | "
            f"{_fmt(m['tokens_per_pass'])} | {_fmt(m['acceptance'])} | {ident} |"
        )
    if ablations:
        lines += [
            "",
            "## Ablation",
            "",
            "| mode | " + " | ".join(f"vs {a}" for a in ablations) + " |",
            "| --- | " + " | ".join("---" for _ in ablations) + " |",
        ]
        for mode in modes:
            m = summary["modes"][mode]
            cells = []
            for a in ablations:
                agg, per = m.get(f"aggregate_vs_{a}"), m.get(f"ratio_vs_{a}")
                cells.append(
                    "-"
                    if agg is None or per is None
                    else f"{agg:.2f} (per prompt median {per['median']:.2f}, min {per['min']:.2f})"
                )
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    if args.repeat > 1:
        lines += ["", "Aggregate ratio per repeat (median [min, max]):", ""]
        for mode in modes:
            for base in comparison_bases(modes):
                s = summary["modes"][mode].get(f"aggregate_vs_{base}_per_repeat")
                if s:
                    lines.append(
                        f"- {mode} vs {base}: {s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]"
                    )
    failures = summary.get("baseline_failures") or []
    if failures:
        lines += [
            "",
            f"The pld baseline failed on {len(failures)} prompt(s) (left out of its "
            "tokens/s and of the ratios against it):",
            "",
        ]
        lines += [f"- {f}" for f in failures]
    for mode in modes:
        src = summary["modes"][mode].get("sources")
        if not src:
            continue
        lines += [
            "",
            f"## Draft sources ({mode})",
            "",
            "| source | drafted | accepted | acceptance | share of accepted |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, s in src.items():
            lines.append(
                f"| {name} | {s['drafted']} | {s['accepted']} | {s['acceptance']:.2f} | "
                f"{s['share_of_accepted']:.2f} |"
            )
    if "exactness" in summary:
        lines += [
            "",
            "## Teacher-forced exactness",
            "",
            "Each emitted token checked against the argmax of its row with prompt + output "
            "evaluated in one batch. Near-tie: below the argmax by at most 1.0 logit "
            "(batch-shape noise, FACTS.md); off: further.",
            "",
            "| mode | tokens | exact argmax | near-ties | off | worst gap |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for mode, e in summary["exactness"].items():
            total = e["exact"] + e["near_tie"] + e["off"]
            lines.append(
                f"| {mode} | {total} | {e['exact']} | {e['near_tie']} | {e['off']} | "
                f"{e['worst_gap']:.3f} |"
            )
    lines += [
        "",
        "## Per prompt",
        "",
        "| prompt | "
        + " | ".join(f"{m} tok/s" for m in modes)
        + (" | structspec / greedy" if {"structspec", "greedy"} <= set(modes) else "")
        + " |",
        "| --- | "
        + " | ".join("---" for _ in modes)
        + (" | ---" if {"structspec", "greedy"} <= set(modes) else "")
        + " |",
    ]
    by: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        by.setdefault((r.prompt_id, r.mode), []).append(r.decode_tps)
    import statistics

    for p in prompts:
        meds = {m: statistics.median(by[(p.id, m)]) for m in modes if (p.id, m) in by}
        row = f"| {p.id} | " + " | ".join(f"{meds.get(m, 0):.1f}" for m in modes)
        if {"structspec", "greedy"} <= set(modes) and meds.get("greedy"):
            row += f" | {meds['structspec'] / meds['greedy']:.2f}"
        lines.append(row + " |")
    return "\n".join(lines)


def _write_json(
    path: str,
    command: str,
    prompts: list,
    prompt_tokens: dict[str, list[int]],
    runs: list[Run],
    summary: dict[str, Any],
) -> None:
    data = {
        "command": command,
        "summary": summary,
        "prompts": [
            {
                "id": p.id,
                "prompt": p.prompt,
                "prompt_tokens": prompt_tokens[p.id],
                "runs": [
                    {
                        "mode": r.mode,
                        "repeat": r.repeat,
                        "tokens": r.tokens,
                        "seconds": r.seconds,
                        "decode_seconds": r.decode_seconds,
                        "decode_tps": r.decode_tps,
                        "passes": r.passes,
                        "drafted": r.drafted,
                        "accepted": r.accepted,
                        "sources": {
                            k: {"drafted": d, "accepted": a} for k, (d, a) in r.sources.items()
                        },
                    }
                    for r in runs
                    if r.prompt_id == p.id
                ],
            }
            for p in prompts
        ],
    }
    Path(path).write_text(json.dumps(data), encoding="utf-8")


def _write_trace(path: str, runs: list[Run]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["prompt", "mode", "repeat", "pass", "source", "drafted", "accepted", "ms"])
        for r in runs:
            for t in r.trace:
                w.writerow(
                    [
                        r.prompt_id,
                        r.mode,
                        r.repeat,
                        t.index,
                        t.source,
                        t.drafted,
                        t.accepted,
                        f"{t.ms:.3f}",
                    ]
                )


def _write_lines_report(path: str, title: str, lines: list[str]) -> None:
    """A Markdown report of a run's printed lines, with the command and the machine."""
    report = [
        f"# structspec benchmark: {title}",
        "",
        f"- command: `{_command_line()}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {_machine()}",
        "",
        "```",
        *lines,
        "```",
    ]
    Path(path).write_text("\n".join(report) + "\n", encoding="utf-8")


def _run_printed(
    args: argparse.Namespace, suite: str, title: str, run: Callable[[Callable[[str], None]], Any]
) -> int:
    """Run a suite that prints its report line by line; write its Markdown and JSON."""
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    try:
        result = run(out)
    except (OSError, ValueError) as exc:
        raise UserError(f"{suite} benchmark: {exc}") from None
    if args.markdown_out:
        _write_lines_report(args.markdown_out, title, lines)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result), encoding="utf-8")
    return 0


def _run_infill(args: argparse.Namespace) -> int:
    from structspec.bench.infill import run_infill_benchmark

    if args.limit is not None and args.limit < 1:
        raise UserError("--limit must be positive")
    settings = settings_from_args(args).settings
    return _run_printed(
        args,
        "infill",
        "single-line infilling",
        lambda out: run_infill_benchmark(
            settings.model, settings.threads, out=out, limit=args.limit or 40
        ),
    )


def _run_editor(args: argparse.Namespace) -> int:
    import glob

    from structspec.bench.editor import run_editor_benchmark

    files = sorted(glob.glob(args.files, recursive=True)) if args.files else []
    if args.files and not files:
        raise UserError(f"no files match {args.files!r}")
    settings = settings_from_args(args).settings
    return _run_printed(
        args,
        "editor",
        "editor replay",
        lambda out: run_editor_benchmark(files, settings.model, settings.threads, out=out),
    )

"""``structspec benchmark``: decoding modes side by side on the same prompts, in one run.

``--temperature`` above 0 (with ``--top-k``, ``--top-p``, ``--min-p``,
``--seed``, the flags of ``structspec run``) benchmarks sampling: every mode
samples with those parameters, ``greedy`` becoming plain sampling (no drafts),
the base of the speed ratios (``bench/harness.py``). Sampled output has no
argmax to check, so the teacher-forced exactness check gives way to a pointer
to the tests that prove the distribution (``SAMPLING_PROOF``).
"""

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
from typing import TYPE_CHECKING, Any

from structspec.bench import EXTRA_INSTALL, missing_extra
from structspec.bench.harness import (
    GREEDY,
    MODES,
    BaselineError,
    Exactness,
    PromptLookupBaseline,
    Run,
    ablation_sources,
    acceptance_by_position,
    comparison_bases,
    is_external_mode,
    is_llama_server_mode,
    output_gaps,
    run_engine,
    summarize,
)
from structspec.bench.llama_server import (
    SPEC_TYPES,
    LlamaServerBaseline,
    LlamaServerError,
    spec_type,
)
from structspec.bench.suites import SuiteError, load_suite
from structspec.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    check_writable,
    sampling_from_args,
    settings_from_args,
)
from structspec.config import SOURCE_NAMES, resolve_sources
from structspec.errors import UserError
from structspec.model.extras import gguf_extras

if TYPE_CHECKING:
    from structspec.bench.suites import Prompt
    from structspec.config import Settings
    from structspec.engine.decode import Engine
    from structspec.engine.sampling import Sampling
    from structspec.model.base import Model

#: Where the distribution of speculative sampling is proven (sampled output
#: cannot be checked token by token against an argmax).
SAMPLING_PROOF = (
    "tests/engine/test_sampling.py::test_speculative_sampling_has_the_exact_distribution "
    "(chi-square against the exact distribution, on the stand-in model)"
)
#: The suites whose prompts the modes decode side by side (the others replay an
#: editor or fill single lines, greedily).
SAMPLED_SUITES = "humaneval, mixed and jsonl:PATH"


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
    p.add_argument("--limit", type=int, help="first N prompts only (editor: N cursor points)")
    p.add_argument(
        "--before-chars",
        type=int,
        default=7000,
        help="infill: characters of a real file kept before the cleared line "
        "(default 7000, about 2,000 tokens; 16000 is about 4,000)",
    )
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per prompt (default 128)")
    add_sampling_arguments(p)  # temperature > 0: every mode samples, greedy is plain sampling
    p.add_argument("--repeat", type=int, default=1, help="runs per prompt and mode (default 1)")
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated: greedy (no drafts; with --temperature: plain sampling), "
        "structspec,pld, structspec:NAME+NAME for "
        "structspec with only those draft sources (an ablation, e.g. structspec:lookup+rules), "
        "and with --llama-server: llama-server (greedy) and llama-server:TYPE "
        "(its --spec-type TYPE, e.g. llama-server:ngram-mod)",
    )
    p.add_argument(
        "--llama-server",
        metavar="PATH",
        help="llama.cpp's llama-server binary for the llama-server modes "
        "(tools/build-llama-server.sh builds one)",
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw per-prompt speed ratios and acceptance by draft position",
    )
    p.add_argument(
        "--no-exactness",
        action="store_true",
        help="skip the teacher-forced exactness check (never run when sampling)",
    )
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure the verification cost table again before running",
    )
    p.add_argument(
        "--files",
        help="editor suite: glob of source files to type through (default: real files of "
        "several languages found on the machine, none of this project's)",
    )
    p.add_argument(
        "--contention",
        type=int,
        default=0,
        metavar="N",
        help="editor suite: replay structspec again with N busy-loop processes running",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="editor suite: also type with this setting changed (LSP spelling, e.g. "
        "debounceMs=0; repeat for several), sequential and paced, in turn with the defaults",
    )
    p.add_argument(
        "--server-logs",
        metavar="DIR",
        help="editor suite: each language server writes its log to DIR/<configuration>.log "
        "(one line per model answer: prompt evaluation and decode times)",
    )
    p.add_argument("--json-out", help="write per-prompt, per-mode tokens and stats as JSON")
    p.add_argument("--trace-csv", help="write one row per verification pass")
    p.add_argument("--markdown-out", help="write the report as Markdown (docs/BENCHMARKS.md)")
    p.add_argument(
        "--record",
        metavar="OUT",
        help="decode the suite greedily and write a recording for --replay (no other output); "
        "editor suite: the structspec server's generations as a recording, after the report",
    )
    p.add_argument(
        "--replay",
        metavar="RECORDING",
        nargs="+",
        help="run recordings through the planner and sources: predicted speed-up and a hash "
        "of every pass, without decoding",
    )
    p.add_argument(
        "--oracle",
        action="store_true",
        help="with --replay: also replay with a control that knows which draft tokens the "
        "model accepts (the bound for the planner over the same sources)",
    )
    p.add_argument(
        "--orders",
        action="store_true",
        help="with --replay: also replay the planner with the prompts in three more orders "
        "(reversed, even then odd, rotated by half): its statistics carry from prompt to prompt",
    )
    p.add_argument(
        "--cost-table",
        metavar="FILE",
        help="with --replay: plan and predict with this cost table instead of the recording's "
        "(a file of ~/.cache/structspec/cost/, or a JSON list of ms per pass of 1, 2, ... rows)",
    )
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
    import llama_cpp

    from structspec.runtime import cpu_name

    cpu = cpu_name()

    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"llama-cpp-python {llama_cpp.__version__}, {platform.system()} {platform.release()}"
    )


def _valid_llama_server(mode: str) -> bool:
    if not is_llama_server_mode(mode):
        return False
    try:
        spec_type(mode)
    except ValueError:
        return False
    return True


def _sampled_elsewhere(args: argparse.Namespace) -> str | None:
    """What refuses sampling in this invocation (``None``: nothing)."""
    if args.replay:
        return "--replay (a recording is of greedy decoding)"
    if args.record:
        return "--record (a recording is of greedy decoding)"
    if args.suite in ("editor", "infill"):
        return f"the {args.suite} suite (greedy; sampling is benchmarked on {SAMPLED_SUITES})"
    return None


def _check_bench_extra() -> None:
    """One line naming what to install when the ``structspec[bench]`` extra is missing."""
    missing = missing_extra()
    if missing:
        raise UserError(
            f"structspec benchmark needs the bench extra ({', '.join(missing)} not installed): "
            f"{EXTRA_INSTALL}"
        )


def run(args: argparse.Namespace) -> int:
    _check_bench_extra()
    check_writable(args.json_out, args.trace_csv, args.markdown_out, args.plot)  # before the run
    sampling = sampling_from_args(args)
    refused = None if sampling.greedy else _sampled_elsewhere(args)
    if refused:
        raise UserError(f"--temperature {sampling.temperature} does not apply to {refused}")
    if args.replay:
        return _run_replay(args)
    if args.oracle:
        raise UserError("--oracle needs --replay RECORDING")
    if args.cost_table or args.orders:
        flag = "--cost-table" if args.cost_table else "--orders"
        raise UserError(f"{flag} needs --replay RECORDING")
    if args.suite == "editor":
        return _run_editor(args)
    if args.suite == "infill":
        return _run_infill(args)
    modes = list(dict.fromkeys(m.strip() for m in args.modes.split(",") if m.strip()))
    unknown = [
        m for m in modes if m not in MODES and not _valid_ablation(m) and not _valid_llama_server(m)
    ]
    if unknown or not modes:
        raise UserError(
            f"unknown mode(s) {', '.join(unknown) or '(none)'}; use {','.join(MODES)}, "
            f"structspec:SOURCE+SOURCE with sources from {', '.join(SOURCE_NAMES)}, all, "
            f"or llama-server[:TYPE] with TYPE from {', '.join(SPEC_TYPES)}"
        )
    server_modes = [m for m in modes if is_llama_server_mode(m)]
    if server_modes and not args.llama_server:
        raise UserError(f"{', '.join(server_modes)} need --llama-server PATH")
    if args.llama_server and not os.access(args.llama_server, os.X_OK):
        raise UserError(f"--llama-server {args.llama_server}: not an executable file")
    if args.repeat < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        raise UserError("--repeat, --max-tokens and --limit must be positive")
    try:
        prompts = load_suite(args.suite)
    except SuiteError as exc:
        raise UserError(str(exc)) from None
    if args.limit:
        prompts = prompts[: args.limit]

    from structspec.runtime import cost_model_for, load_engine, open_model, thread_costs_for

    settings = settings_from_args(args).settings
    if args.record:
        return _run_record(args, settings, prompts)
    model = open_model(settings.model, context_size=settings.context_size, threads=settings.threads)
    if args.recalibrate:  # measured again into the cache, where every engine below reads it
        thread_costs_for(model, cost_model_for(model, refresh=True), refresh=True)
    engine = load_engine(settings, model=model)
    engines = {m: engine for m in ("greedy", "structspec")}  # greedy: no drafts
    for mode in modes:
        names = ablation_sources(mode)
        if names is not None:
            engines[mode] = load_engine(settings, model=model, sources=names)
    pld = None
    extras = gguf_extras(model)
    if extras is None and ("pld" in modes or server_modes):
        first = "pld" if "pld" in modes else server_modes[0]
        raise UserError(f"the {first} mode needs a GGUF model")
    path = str(extras.path) if extras is not None else ""
    if "pld" in modes:
        pld = PromptLookupBaseline(
            path, settings.threads, n_ctx=settings.context_size, sampling=sampling
        )
    servers: dict[str, LlamaServerBaseline] = {}
    try:
        for mode in server_modes:
            servers[mode] = LlamaServerBaseline(
                args.llama_server,
                mode,
                path,
                settings.threads,
                settings.context_size,
                sampling=sampling,
            )
        return _run_suite(args, settings, engines, model, modes, prompts, pld, servers, sampling)
    except LlamaServerError as exc:
        raise UserError(str(exc)) from None
    finally:
        for server in servers.values():
            server.close()


def _run_suite(
    args: argparse.Namespace,
    settings: Settings,
    engines: dict[str, Engine],
    model: Model,
    modes: list[str],
    prompts: list[Prompt],
    pld: PromptLookupBaseline | None,
    servers: dict[str, LlamaServerBaseline],
    sampling: Sampling = GREEDY,
) -> int:
    from tqdm import tqdm

    runs: list[Run] = []
    baseline_failures: list[str] = []
    prompt_tokens: dict[str, list[int]] = {}
    # Sampled output has no argmax to be checked against (SAMPLING_PROOF instead).
    check_exactness = sampling.greedy and not args.no_exactness
    exact = {m: Exactness() for m in modes if not is_external_mode(m)}
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
                elif mode in servers:
                    runs.append(servers[mode].run(prompt, tokens, rep, args.max_tokens))
                else:
                    runs.append(
                        run_engine(
                            engines[mode], prompt, tokens, mode, rep, args.max_tokens, sampling
                        )
                    )
                bar.update(1)
        if check_exactness:
            for mode in exact:
                out = next(r.tokens for r in runs if r.prompt_id == prompt.id and r.mode == mode)
                gaps, rechecked = output_gaps(model, tokens, out)
                exact[mode].add(gaps, rechecked=rechecked)
    bar.close()

    summary = summarize(runs, modes, sampling)
    summary["sampling"] = vars(sampling)
    summary["baseline_failures"] = baseline_failures
    if check_exactness:
        summary["exactness"] = {m: vars(e) for m, e in exact.items()}
    command = _command_line()
    extras = gguf_extras(model)
    # which code computes the output head: the greedy and structspec modes share it
    name = f"{model.name} (output head: {extras.head})" if extras is not None else model.name
    report = _report(command, args, settings.threads, name, prompts, runs, summary, modes, sampling)
    print(report)
    if args.markdown_out:
        Path(args.markdown_out).write_text(report + "\n", encoding="utf-8")
    if args.json_out:
        _write_json(args.json_out, command, prompts, prompt_tokens, runs, summary)
    if args.trace_csv:
        _write_trace(args.trace_csv, runs)
    if args.plot:
        _plot(args.plot, runs, summary, modes, sampling)
    return 0


def _label(mode: str, sampling: Sampling) -> str:
    """A mode as reports name it: sampled, ``greedy`` is plain sampling, and says so."""
    return "plain sampling" if mode == "greedy" and not sampling.greedy else mode


def _plot(
    path: str,
    runs: list[Run],
    summary: dict[str, Any],
    modes: list[str],
    sampling: Sampling = GREEDY,
) -> None:
    """Per-prompt speed ratio of each mode against each base, and acceptance by position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), width_ratios=(3, 2))
    labels, data = [], []
    for mode in modes:
        for base in comparison_bases(modes):
            ratios = summary["modes"][mode].get(f"ratios_vs_{base}")
            if base != mode and ratios:
                labels.append(f"{_label(mode, sampling)} vs {_label(base, sampling)}")
                data.append(ratios)
    if data:
        left.boxplot(data, showfliers=True)
        left.set_xticks(range(1, len(labels) + 1), labels, fontsize=7, rotation=35, ha="right")
    left.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    left.set_ylabel("decode tokens/s ratio, per prompt")
    left.set_title(f"Per-prompt speed ({summary['prompts']} prompts)")
    for mode in modes:
        pos = acceptance_by_position([r for r in runs if r.mode == mode])
        if pos:
            right.plot(
                [p for p, _, _ in pos],
                [a for _, _, a in pos],
                marker="o",
                label=_label(mode, sampling),
            )
    right.set_xlabel("position in the draft")
    right.set_ylabel("acceptance")
    right.set_ylim(0, 1)
    right.set_title("Acceptance by draft position")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    sampling: Sampling = GREEDY,
) -> str:
    def label(mode: str) -> str:
        return _label(mode, sampling)

    base = label("greedy")
    lines = [
        "# structspec benchmark",
        "",
        f"- command: `{command}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {_machine()}",
        f"- model: {model_name}, {threads} threads; suite {args.suite}, {len(prompts)} prompts, "
        f"max {args.max_tokens} tokens, {args.repeat} repeat(s)",
        _decoding_line(sampling),
        "- speed: decode tokens/s after the first token (the prompt's prefill is the same work in "
        "every mode); every run starts from a cold cache; modes interleaved per prompt",
        "",
        "## Summary",
        "",
        f"| mode | tok/s | e2e tok/s | vs {base} (aggregate) "
        f"| vs {base} per prompt: median [p10, min] "
        f"| vs pld (aggregate) | tokens/pass | acceptance | identical to {base} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    n = summary["prompts"]
    for mode in modes:
        m = summary["modes"][mode]
        per = m.get("ratio_vs_greedy")
        per_s = f"{per['median']:.2f} [{per['p10']:.2f}, {per['min']:.2f}]" if per else "-"
        ident = f"{m['identical_to_greedy']}/{n}" if "identical_to_greedy" in m else "-"
        lines.append(
            f"| {label(mode)} | {m['decode_tps']:.1f} | {m['e2e_tps']:.1f} | "
            f"{_fmt(m.get('aggregate_vs_greedy'))} | {per_s} | {_fmt(m.get('aggregate_vs_pld'))} | "
            f"{_fmt(m['tokens_per_pass'])} | {_fmt(m['acceptance'])} | {ident} |"
        )
    bases = comparison_bases(modes)
    if bases:
        lines += [
            "",
            "## Against each base",
            "",
            "Decode: tokens/s after the first token, aggregate (per prompt median, min). "
            "End to end: all tokens over the request's wall clock, prefill included "
            "(what a client waits for), aggregate.",
            "",
            "| mode | " + " | ".join(f"vs {label(b)}" for b in bases) + " |",
            "| --- | " + " | ".join("---" for _ in bases) + " |",
        ]
        for mode in modes:
            m = summary["modes"][mode]
            cells = []
            for b in bases:
                agg, per, e2e = (
                    m.get(f"aggregate_vs_{b}"),
                    m.get(f"ratio_vs_{b}"),
                    m.get(f"e2e_vs_{b}"),
                )
                cells.append(
                    "-"
                    if agg is None or per is None
                    else f"decode {agg:.2f} ({per['median']:.2f}, {per['min']:.2f}); "
                    f"e2e {_fmt(e2e)}"
                )
            lines.append(f"| {label(mode)} | " + " | ".join(cells) + " |")
    if args.repeat > 1:
        lines += ["", "Aggregate ratio per repeat (median [min, max]):", ""]
        for mode in modes:
            for b in comparison_bases(modes):
                s = summary["modes"][mode].get(f"aggregate_vs_{b}_per_repeat")
                if s:
                    lines.append(
                        f"- {label(mode)} vs {label(b)}: "
                        f"{s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]"
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
    if not sampling.greedy:
        lines += ["", "## Exactness", "", *_sampled_exactness(summary, modes)]
    if "exactness" in summary:
        lines += [
            "",
            "## Teacher-forced exactness",
            "",
            "Each emitted token checked against the argmax of its row with prompt + output "
            "evaluated in one batch. Near-tie: below the argmax by at most 1.0 logit "
            "(batch-shape noise, docs/MEASUREMENTS.md); off: further. A generation with a "
            "token off is checked again one row per pass, as plain greedy decoding evaluates "
            "it, and that check counts (rechecked: how many generations).",
            "",
            "| mode | tokens | exact argmax | near-ties | off | worst gap | rechecked |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for mode, e in summary["exactness"].items():
            total = e["exact"] + e["near_tie"] + e["off"]
            lines.append(
                f"| {mode} | {total} | {e['exact']} | {e['near_tie']} | {e['off']} | "
                f"{e['worst_gap']:.3f} | {e['rechecked']} |"
            )
    lines += [
        "",
        "## Per prompt",
        "",
        "| prompt | "
        + " | ".join(f"{label(m)} tok/s" for m in modes)
        + (f" | structspec / {base}" if {"structspec", "greedy"} <= set(modes) else "")
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


def _decoding_line(sampling: Sampling) -> str:
    """The report header's line on how every mode chose its tokens."""
    if sampling.greedy:
        return "- decoding: greedy (temperature 0) in every mode"
    s = sampling
    seed = "none (random: texts not comparable)" if s.seed is None else str(s.seed)
    return (
        f"- sampling, in every mode: temperature {s.temperature:g}, "
        f"top_k {s.top_k}{' (off)' if s.top_k == 0 else ''}, "
        f"top_p {s.top_p:g}{' (off)' if s.top_p == 1 else ''}, "
        f"min_p {s.min_p:g}{' (off)' if s.min_p == 0 else ''}, seed {seed}; "
        "plain sampling is the engine with no drafts (mode `greedy`), the base of the ratios"
    )


def _sampled_exactness(summary: dict[str, Any], modes: list[str]) -> list[str]:
    """What stands for the teacher-forced check when the output is sampled."""
    lines = [
        "- teacher-forced check: not applicable to sampled output; speculative sampling's "
        f"distribution is proven in {SAMPLING_PROOF}",
    ]
    n = summary["prompts"]
    same = [
        f"{mode} {m['identical_to_greedy']}/{n}"
        for mode in modes
        if "identical_to_greedy" in (m := summary["modes"][mode])
    ]
    if same:
        lines.append(
            f"- same seed, same text as plain sampling, prompts: {', '.join(same)} (on a GGUF "
            "model the batch shape moves the logits a little, so a sampled token can differ: "
            "reported, not a failure)"
        )
    if summary["sampling"]["seed"] is None:
        lines.append("- no --seed: every run drew its own random numbers; texts not compared")
    return lines


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
    if args.before_chars < 1:
        raise UserError("--before-chars must be positive")
    settings = settings_from_args(args).settings
    return _run_printed(
        args,
        "infill",
        "single-line infilling",
        lambda out: run_infill_benchmark(
            settings.model,
            settings.threads,
            out=out,
            limit=args.limit or 40,
            before_chars=args.before_chars,
        ),
    )


def _run_editor(args: argparse.Namespace) -> int:
    import glob

    from structspec.bench.editor import run_editor_benchmark

    files = sorted(glob.glob(args.files, recursive=True)) if args.files else []
    if args.files and not files:
        raise UserError(f"no files match {args.files!r}")
    if args.contention < 0 or (args.limit is not None and args.limit < 1):
        raise UserError("--contention must be 0 or more and --limit positive")
    settings = settings_from_args(args).settings
    variant = _editor_variant(args.variant)
    logs = Path(args.server_logs) if args.server_logs else None
    if logs is not None:
        try:
            logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--server-logs {args.server_logs}: {exc.strerror or exc}") from None
    return _run_printed(
        args,
        "editor",
        "editor replay",
        lambda out: run_editor_benchmark(
            files,
            settings.model,
            settings.threads,
            out=out,
            limit=args.limit,
            contention=args.contention,
            exactness=not args.no_exactness,
            log_dir=logs,
            record=Path(args.record) if args.record else None,
            variant=variant,
        ),
    )


def _editor_variant(items: list[str]) -> dict[str, Any]:
    """``--variant debounceMs=0`` as the server's ``initializationOptions``, checked here."""
    from structspec.config import Settings, apply

    variant: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name = key.strip()
        if not sep or not name:
            raise UserError(f"--variant {item!r}: write SETTING=VALUE, e.g. debounceMs=0")
        if name in variant:  # one variant: a second value would silently win
            raise UserError(f"--variant names {name} twice (the flags make one variant)")
        try:  # 0, false, "text": as a client sends them; anything else a string
            variant[name] = json.loads(value)
        except ValueError:
            variant[name] = value.strip()
    _, _, errors = apply(Settings(), variant, camel_case=True)
    if errors:
        raise UserError(f"--variant: {'; '.join(errors)}")
    return variant


def _run_record(args: argparse.Namespace, settings: Any, prompts: list) -> int:
    from structspec.bench.replay import record
    from structspec.runtime import cost_model_for, open_model

    model = open_model(settings.model, context_size=settings.context_size, threads=settings.threads)
    cost = cost_model_for(model)
    rec = record(
        model,
        ((p.id, p.language, model.tokenize(p.prompt)) for p in prompts),
        max_tokens=args.max_tokens,
        cost_ms=cost.ms,
        threads=settings.threads,
    )
    try:
        Path(args.record).write_text(rec.to_json(), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {args.record}: {exc}") from None
    print(f"recorded {len(rec.prompts)} prompts to {args.record}")
    return 0


def _run_replay(args: argparse.Namespace) -> int:
    from structspec.bench.replay import (
        Recording,
        ReplayError,
        ReplayResult,
        load_cost_table,
        orders_line,
        prompt_orders,
        replay,
        replay_markdown,
        report,
    )
    from structspec.runtime import assemble_engine, open_model

    try:
        recordings = [(path, Recording.load(path)) for path in args.replay]
        cost = load_cost_table(args.cost_table) if args.cost_table else None
    except ReplayError as exc:
        raise UserError(str(exc)) from None
    settings = settings_from_args(args).settings
    vocab = open_model(settings.model, context_size=256, threads=1)  # its tokenizer only
    for path, recording in recordings:
        if vocab.name != recording.model:
            raise UserError(f"{path}: the recording is of {recording.model}, not {vocab.name}")
    rows = []
    by_order: dict[str, dict[str, ReplayResult]] = {}
    failed = False
    for path, recording in recordings:
        prompts = recording.prompts[: args.limit] if args.limit else None
        results = {}
        for control in ("planner", "oracle") if args.oracle else ("planner",):
            results[control] = replay(
                recording,
                vocab,
                lambda model, cost: assemble_engine(model, settings, cost),
                prompts=prompts,
                oracle=control == "oracle",
                cost=cost,
            )
            print(f"== {path}: {control}")
            print(report(results[control], recording, cost_table=args.cost_table))
            failed = failed or bool(results[control].mismatches)
        if args.oracle:
            gap = results["planner"].speedup / results["oracle"].speedup
            print(f"planner / oracle: {gap:.3f}")
        if args.orders:
            ordered: dict[str, ReplayResult] = {}
            for name, order in prompt_orders(prompts or recording.prompts).items():
                ordered[name] = (
                    results["planner"]
                    if name == "recorded"
                    else replay(
                        recording,
                        vocab,
                        lambda model, cost: assemble_engine(model, settings, cost),
                        prompts=order,
                        cost=cost,
                    )
                )
                failed = failed or bool(ordered[name].mismatches)
            print(f"planner in four orders: {orders_line(ordered)}")
            by_order[path] = ordered
        rows.append((path, recording, results))
    if args.markdown_out:
        text = replay_markdown(_command_line(), rows, by_order or None)
        Path(args.markdown_out).write_text(text, encoding="utf-8")
    return 1 if failed else 0

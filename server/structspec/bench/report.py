"""The side-by-side suites' report (Markdown), their JSON and trace files, and the machine line.

``suite_report`` renders what ``structspec benchmark`` prints for the suites
whose modes decode side by side (``bench/side_by_side.py``), one section per
function: the header, the summary, each mode against each base, the
per-repeat ratios, the baseline's failures, the draft sources, exactness and
the per-prompt table. ``lines_report`` wraps the printed lines of the editor
and infill suites the same way (command, date, machine).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from structspec.bench.harness import GREEDY, SERVE_MODE, Run, comparison_bases
from structspec.bench.suites import Prompt
from structspec.engine.sampling import Sampling

#: Where the distribution of speculative sampling is proven (sampled output
#: cannot be checked token by token against an argmax).
SAMPLING_PROOF = (
    "tests/engine/test_sampling.py::test_speculative_sampling_has_the_exact_distribution "
    "(chi-square against the exact distribution, on the stand-in model)"
)


def machine() -> str:
    """The CPU, cores, Python, llama-cpp-python and OS of this run, in one line."""
    import llama_cpp

    from structspec.runtime import cpu_name

    return (
        f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"llama-cpp-python {llama_cpp.__version__}, {platform.system()} {platform.release()}"
    )


def _date() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def label(mode: str, sampling: Sampling) -> str:
    """A mode as reports name it: sampled, ``greedy`` is plain sampling, and says so."""
    return "plain sampling" if mode == "greedy" and not sampling.greedy else mode


def _fmt(v: Any, nd: int = 2) -> str:
    return "-" if v is None else f"{v:.{nd}f}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class SuiteRun:
    """What a side-by-side run was, for its report's header and tables."""

    command: str
    suite: str
    max_tokens: int
    repeat: int
    threads: int
    #: The model, with the code that computes its output head when known.
    model_name: str
    prompts: Sequence[Prompt]
    modes: Sequence[str]
    sampling: Sampling = GREEDY
    #: Seconds of rest before every request.
    rest_s: float = 0.0

    def label(self, mode: str) -> str:
        return label(mode, self.sampling)


def suite_report(run: SuiteRun, runs: Sequence[Run], summary: dict[str, Any]) -> str:
    """The Markdown report of a side-by-side run (``summary``: ``harness.summarize``'s)."""
    lines = [
        *_header(run),
        *_summary_table(run, summary),
        *_bases_table(run, summary),
        *_per_repeat(run, summary),
        *_baseline_failures(summary),
        *_source_tables(run, summary),
    ]
    if not run.sampling.greedy:
        lines += ["", "## Exactness", "", *sampled_exactness(summary, run.modes)]
    if "exactness" in summary:
        lines += _exactness_table(summary)
    lines += _per_prompt_table(run, runs)
    return "\n".join(lines)


def _header(run: SuiteRun) -> list[str]:
    return [
        "# structspec benchmark",
        "",
        f"- command: `{run.command}`",
        f"- date: {_date()}",
        f"- machine: {machine()}",
        f"- model: {run.model_name}, {run.threads} threads; suite {run.suite}, "
        f"{len(run.prompts)} prompts, max {run.max_tokens} tokens, {run.repeat} repeat(s)",
        decoding_line(run.sampling),
        "- speed: decode tokens/s after the first token (the prompt's prefill is the same work in "
        "every mode); every run starts from a cold cache; modes interleaved per prompt"
        + (f", {run.rest_s:g} s of rest before every request" if run.rest_s else ""),
        f"- load average (1, 5, 15 min) at the end: {_load_average()}",
    ]


def _load_average() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def _summary_table(run: SuiteRun, summary: dict[str, Any]) -> list[str]:
    base = run.label("greedy")
    lines = [
        "",
        "## Summary",
        "",
        f"| mode | tok/s | e2e tok/s | vs {base} (aggregate) "
        f"| vs {base} per prompt: median [p10, min] "
        f"| vs pld (aggregate) | tokens/pass | acceptance | identical to {base} |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    n = summary["prompts"]
    for mode in run.modes:
        m = summary["modes"][mode]
        per = m.get("ratio_vs_greedy")
        per_s = f"{per['median']:.2f} [{per['p10']:.2f}, {per['min']:.2f}]" if per else "-"
        ident = f"{m['identical_to_greedy']}/{n}" if "identical_to_greedy" in m else "-"
        lines.append(
            f"| {run.label(mode)} | {m['decode_tps']:.1f} | {m['e2e_tps']:.1f} | "
            f"{_fmt(m.get('aggregate_vs_greedy'))} | {per_s} | {_fmt(m.get('aggregate_vs_pld'))} | "
            f"{_fmt(m['tokens_per_pass'])} | {_fmt(m['acceptance'])} | {ident} |"
        )
    return lines


def _bases_table(run: SuiteRun, summary: dict[str, Any]) -> list[str]:
    """Every mode's decode and end-to-end ratio to each base (none: no lines)."""
    bases = comparison_bases(run.modes)
    if not bases:
        return []
    lines = [
        "",
        "## Against each base",
        "",
        "Decode: tokens/s after the first token, aggregate (per prompt median, min). "
        "End to end: all tokens over the request's wall clock, prefill included "
        "(what a client waits for), aggregate (per prompt median [p10, p90]).",
        "",
        "| mode | " + " | ".join(f"vs {run.label(b)}" for b in bases) + " |",
        "| --- | " + " | ".join("---" for _ in bases) + " |",
    ]
    for mode in run.modes:
        m = summary["modes"][mode]
        cells = []
        for b in bases:
            agg, per, e2e = m.get(f"aggregate_vs_{b}"), m.get(f"ratio_vs_{b}"), m.get(f"e2e_vs_{b}")
            e2e_per = m.get(f"e2e_ratio_vs_{b}")
            spread = (
                f" ({e2e_per['median']:.2f} [{e2e_per['p10']:.2f}, {e2e_per['p90']:.2f}])"
                if e2e_per
                else ""
            )
            cells.append(
                "-"
                if agg is None or per is None
                else f"decode {agg:.2f} ({per['median']:.2f}, {per['min']:.2f}); "
                f"e2e {_fmt(e2e)}{spread}"
            )
        lines.append(f"| {run.label(mode)} | " + " | ".join(cells) + " |")
    if SERVE_MODE in run.modes:
        outside = [
            f"{run.label(mode)} {m['outside_engine_ms']:.1f} ms"
            for mode in run.modes
            if "outside_engine_ms" in (m := summary["modes"][mode])
        ]
        lines += [
            "",
            "A request's wall clock less the engine's own prefill, drafting and verification "
            "(the engine's bookkeeping between passes; for serve also HTTP, JSON, the queue "
            "and the worker thread), median: " + ", ".join(outside) + ".",
        ]
    return lines


def _per_repeat(run: SuiteRun, summary: dict[str, Any]) -> list[str]:
    if run.repeat <= 1:
        return []
    lines = ["", "Aggregate ratio per repeat (median [min, max]):", ""]
    for mode in run.modes:
        for b in comparison_bases(run.modes):
            s = summary["modes"][mode].get(f"aggregate_vs_{b}_per_repeat")
            if s:
                lines.append(
                    f"- {run.label(mode)} vs {run.label(b)}: "
                    f"{s['median']:.2f} [{s['min']:.2f}, {s['max']:.2f}]"
                )
    return lines


def _baseline_failures(summary: dict[str, Any]) -> list[str]:
    failures = summary.get("baseline_failures") or []
    if not failures:
        return []
    return [
        "",
        f"The pld baseline failed on {len(failures)} prompt(s) (left out of its "
        "tokens/s and of the ratios against it):",
        "",
        *(f"- {f}" for f in failures),
    ]


def _source_tables(run: SuiteRun, summary: dict[str, Any]) -> list[str]:
    """Per mode with draft sources: each source's drafted and accepted tokens."""
    lines: list[str] = []
    for mode in run.modes:
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
    return lines


def _exactness_table(summary: dict[str, Any]) -> list[str]:
    lines = [
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
    return lines


def _per_prompt_table(run: SuiteRun, runs: Sequence[Run]) -> list[str]:
    """Each prompt's median decode tokens/s per mode (and structspec over greedy)."""
    modes = run.modes
    both = {"structspec", "greedy"} <= set(modes)
    lines = [
        "",
        "## Per prompt",
        "",
        "| prompt | "
        + " | ".join(f"{run.label(m)} tok/s" for m in modes)
        + (f" | structspec / {run.label('greedy')}" if both else "")
        + " |",
        "| --- | " + " | ".join("---" for _ in modes) + (" | ---" if both else "") + " |",
    ]
    by: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        by.setdefault((r.prompt_id, r.mode), []).append(r.decode_tps)
    for p in run.prompts:
        meds = {m: statistics.median(by[(p.id, m)]) for m in modes if (p.id, m) in by}
        row = f"| {p.id} | " + " | ".join(f"{meds.get(m, 0):.1f}" for m in modes)
        if both and meds.get("greedy"):
            row += f" | {meds['structspec'] / meds['greedy']:.2f}"
        lines.append(row + " |")
    return lines


def decoding_line(sampling: Sampling) -> str:
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


def sampled_exactness(summary: dict[str, Any], modes: Sequence[str]) -> list[str]:
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


def write_json(
    path: str,
    command: str,
    prompts: Sequence[Prompt],
    prompt_tokens: dict[str, list[int]],
    runs: Sequence[Run],
    summary: dict[str, Any],
) -> None:
    """Per prompt and mode: the prompt, its tokens and each run's tokens and stats."""
    data = {
        "command": command,
        "summary": summary,
        "prompts": [
            {
                "id": p.id,
                "prompt": p.prompt,
                "prompt_tokens": prompt_tokens[p.id],
                "runs": [_run_json(r) for r in runs if r.prompt_id == p.id],
            }
            for p in prompts
        ],
    }
    Path(path).write_text(json.dumps(data), encoding="utf-8")


def _run_json(r: Run) -> dict[str, Any]:
    return {
        "mode": r.mode,
        "repeat": r.repeat,
        "tokens": r.tokens,
        "seconds": r.seconds,
        "decode_seconds": r.decode_seconds,
        "decode_tps": r.decode_tps,
        "passes": r.passes,
        "drafted": r.drafted,
        "accepted": r.accepted,
        "sources": {k: {"drafted": d, "accepted": a} for k, (d, a) in r.sources.items()},
    }


def write_trace(path: str, runs: Sequence[Run]) -> None:
    """One CSV row per verification pass of every run."""
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


def lines_report(command: str, title: str, lines: Sequence[str]) -> str:
    """A Markdown report of a run's printed lines, with the command and the machine."""
    report = [
        f"# structspec benchmark: {title}",
        "",
        f"- command: `{command}`",
        f"- date: {_date()}",
        f"- machine: {machine()}",
        "",
        "```",
        *lines,
        "```",
    ]
    return "\n".join(report) + "\n"

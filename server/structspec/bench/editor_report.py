"""The editor benchmark's printed report, one function per part (``bench/editor.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from structspec.bench import typist
from structspec.bench.editor_stats import ConfigResult, jump_summary, paced_summary
from structspec.bench.harness import Exactness
from structspec.bench.points import Point
from structspec.bench.typist import Out


def print_plan(
    files: Sequence[str],
    languages: dict[str, int],
    points: Sequence[Point],
    variant: str | None,
    threads: int,
    out: Out,
) -> None:
    """What is typed: the files by language, the points and keystrokes, the configurations."""
    total = sum(len(p.typed) for p in points)
    out(
        f"editor replay: {len(files)} file(s) "
        f"({', '.join(f'{k} {v}' for k, v in languages.items())}), {len(points)} cursor points, "
        f"{total} keystrokes per configuration; default settings"
        f"{'; variant ' + variant if variant else ''}; "
        f"{threads} thread(s)"
    )
    for name in files:
        out(f"  {name}")


@dataclass(frozen=True)
class EditorNumbers:
    """The numbers the report printed, for the benchmark's JSON."""

    model: str
    summaries: dict[str, dict[str, Any]]
    paced: dict[str, dict[str, Any]]
    jump: dict[str, dict[str, Any]]
    speculation_ratio: float
    speculation_decode_ratio: float
    contention_ratio: float
    exactness: dict[str, Any] | None


def report_results(
    results: dict[str, ConfigResult],
    points: int,
    loaded: Sequence[tuple[str, str]],
    loops: str,
    checked: tuple[Exactness, int] | None,
    model: str,
    out: Out,
) -> EditorNumbers:
    """Print every configuration's results; the numbers printed.

    ``loaded``: ``(quiet name, loaded name)`` of the configurations replayed
    again under contention (``loops`` says with what); ``checked``: the
    teacher-forced check's counts and the tokens token healing constrained;
    ``model``: the model spec, named when no server reported its model.
    """
    paced = {name: paced_summary(r.paced) for name, r in results.items() if r.paced}
    jump = {name: jump_summary(r.jumped) for name, r in results.items() if r.jumped}
    summaries = {name: r.summary() for name, r in results.items() if not r.paced and not r.jumped}
    model_name = next((s["model"] for s in summaries.values() if s["model"]), model or "default")
    out(f"model: {model_name}")
    out(
        "first request of a run (the whole prompt evaluated): "
        + ", ".join(f"{name} {s['first_ms']:.0f} ms" for name, s in summaries.items())
    )
    width = max(len(name) for name in summaries) + len(": after accept")
    _keystrokes(summaries, width, out)
    ratio, decode_ratio = _speculation(summaries["structspec"], summaries["greedy"], out)
    _after_accept(summaries, points, width, out)
    contention_ratio = _contention(summaries, loaded, loops, out)
    if paced:
        paced_report(paced, out)
    for name, summary in jump.items():
        jump_report(name, summary, max(width, len("keystroke to suggestion")), out)
    exact = _exactness(checked, out) if checked is not None else None
    return EditorNumbers(
        model_name, summaries, paced, jump, ratio, decode_ratio, contention_ratio, exact
    )


def _keystrokes(summaries: dict[str, dict[str, Any]], width: int, out: Out) -> None:
    out("keystroke to suggestion, ms:")
    out(table_header("configuration", width))
    for name, s in summaries.items():
        out(report_row(name, s["keys"], width))
    out(
        "(model: answers the model computed; cache: answers served without it, typed through "
        "or pre-generated; target: p50 <= 120 ms, p95 <= 350 ms)"
    )
    out(
        "suggestions shown after a keystroke: "
        + ", ".join(
            f"{name} {s['suggestions']} of {s['keystrokes']} "
            f"(median {s['suggestion_chars_p50']:.0f} characters)"
            for name, s in summaries.items()
        )
    )


def _speculation(s: dict[str, Any], g: dict[str, Any], out: Out) -> tuple[float, float]:
    """Speculative against greedy tokens/s on model-computed answers: (all, decode)."""

    def speed_ratio(key: str) -> float:
        return s[key] / g[key] if g[key] else 0.0

    ratio, decode_ratio = speed_ratio("tokens_per_second"), speed_ratio("decode_tokens_per_second")
    out(
        "speculation on model-computed answers: decode (the passes after the prompt's "
        f"evaluation) {s['decode_tokens_per_second']:.1f} tok/s vs greedy "
        f"{g['decode_tokens_per_second']:.1f} tok/s = {decode_ratio:.2f}x (target >= 1.3x); "
        f"with the prompt's evaluation {s['tokens_per_second']:.1f} vs "
        f"{g['tokens_per_second']:.1f} tok/s = {ratio:.2f}x"
    )
    return ratio, decode_ratio


def _after_accept(summaries: dict[str, dict[str, Any]], points: int, width: int, out: Out) -> None:
    s, g = summaries["structspec"], summaries["greedy"]
    out(
        f"after accepting a suggestion, ms ({points - s['no_suggestion_points']} of "
        f"{points} points had one for structspec, "
        f"{points - g['no_suggestion_points']} for greedy):"
    )
    out(table_header("configuration: request", width))
    for name, summary in summaries.items():
        out(report_row(f"{name}: after accept", summary["after_accept"], width))
        out(report_row(f"{name}: next line", summary["next_line"], width))
    out("(target: after accept p50 <= 30 ms)")


def _contention(
    summaries: dict[str, dict[str, Any]], loaded: Sequence[tuple[str, str]], loops: str, out: Out
) -> float:
    """Loaded against quiet keystroke p95 per configuration; the defaults' ratio (0: none)."""
    contention_ratio = 0.0
    for name, loaded_name in loaded:
        quiet_p95 = summaries[name]["keys"]["all"]["p95_ms"]
        loaded_p95 = summaries[loaded_name]["keys"]["all"]["p95_ms"]
        ratio_loaded = loaded_p95 / quiet_p95 if quiet_p95 else 0.0
        label = f" ({name})"
        if name == "structspec":  # the defaults' ratio is the one reported
            contention_ratio, label = ratio_loaded, ""
        out(
            f"contention{label}: keystroke p95 {quiet_p95:.1f} ms quiet vs {loaded_p95:.1f} ms "
            f"with {loops} = {ratio_loaded:.2f}x (target <= 2x with 2)"
        )
    return contention_ratio


def _exactness(checked: tuple[Exactness, int], out: Out) -> dict[str, Any]:
    exact, constrained = checked
    total_checked = exact.exact + exact.near_tie + exact.off
    out(
        f"teacher-forced: {total_checked} tokens checked, {exact.off} off "
        f"({exact.near_tie} near-ties within 1.0 logit, worst gap {exact.worst_gap:.3f}; "
        f"{constrained} constrained by token healing not checked)"
    )
    return {**vars(exact), "constrained": constrained}


def paced_report(results: dict[str, dict[str, Any]], out: Out) -> None:
    out(
        f"typing at a steady pace (a key every {typist.PACE_MS:.0f} ms, "
        f"{typist.ARRIVE_S:.1f} s after arriving "
        "at the point; a request still unanswered at the next key is cancelled):"
    )
    width = max(len(name) for name in results)
    out(
        f"{'configuration':<{width}}  keys  answered  shown | answered p50    p95 | "
        "first suggestion at a point: p50    p95    max  points without"
    )
    for name, p in results.items():
        out(
            f"{name:<{width}}  {p['keystrokes']:4d}  {p['answered']:8d}  {p['shown']:5d} | "
            f"{p['answered_p50_ms']:12.1f} {p['answered_p95_ms']:6.1f} | "
            f"{p['first_shown_p50_ms']:32.1f} {p['first_shown_p95_ms']:6.1f} "
            f"{p['first_shown_max_ms']:6.1f}  {p['points_without']:3d} of {p['points']}"
        )
    out(
        "(answered: before the next key, or the line's last; first suggestion: from the "
        "point's first keystroke)"
    )


def report_row(name: str, s: dict[str, dict[str, float]], width: int) -> str:
    a, m, c = s["all"], s["model"], s["cache"]
    return (
        f"{name:<{width}} {a['n']:>5.0f} {a['p50_ms']:>7.1f} {a['p95_ms']:>7.1f} | "
        f"{m['n']:>5.0f} {m['p50_ms']:>7.1f} {m['p95_ms']:>7.1f} | "
        f"{c['n']:>5.0f} {c['p50_ms']:>7.1f} {c['p95_ms']:>7.1f}"
    )


def table_header(first: str, width: int) -> str:
    return (
        f"{first:<{width}} {'n':>5} {'p50':>7} {'p95':>7} | {'model':>5} {'p50':>7} {'p95':>7} | "
        f"{'cache':>5} {'p50':>7} {'p95':>7}"
    )


def jump_report(name: str, summary: dict[str, Any], width: int, out: Out) -> None:
    """Print the jump-and-type part of one configuration."""
    f, fo, fj = summary["first_shown"], summary["first_shown_opened"], summary["first_shown_jumped"]
    out(
        f"jump and type ({name}: a plain client, no cursor report; at each new place a file "
        f"opened or a jump within one, the line cleared and typed at once, a key every "
        f"{typist.PACE_MS:.0f} ms or after the answer when it is slower):"
    )
    out(
        f"first suggestion at a new place, ms from arriving: p50 {f['p50_ms']:.1f}, "
        f"p95 {f['p95_ms']:.1f}, max {f['max_ms']:.1f} ({f['without']} of {f['n']} places "
        f"without one; files opened: {fo['n']}, p50 {fo['p50_ms']:.1f}; jumps: {fj['n']}, "
        f"p50 {fj['p50_ms']:.1f}) (target: p50 <= 250 ms, p95 <= 500 ms)"
    )
    out(table_header("keystroke to suggestion", width))
    out(report_row("all keystrokes", summary["keys"], width))
    out(report_row("first key at a place", summary["first_keys"], width))
    out("(target: all keystrokes p95 <= 300 ms)")
    reasons = ", ".join(f"{r} {n}" for r, n in summary["empty_reasons"].items()) or "none"
    out(
        f"empty answers while typing: {summary['empty']} of {summary['keys']['all']['n']:.0f} "
        f"({summary['empty_fraction']:.1%}; target <= 10%): the model's choice "
        f"{summary['empty_model_choice']}, others {summary['empty_other']} (by reason: {reasons})"
    )

"""What a replay predicts, as the command prints it and as Markdown (``bench/replay.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from structspec.bench.recording import Recording
from structspec.bench.replay import (
    PASS_KINDS,
    EngineFactory,
    PassLoss,
    ReplayResult,
    prompt_orders,
    replay,
)
from structspec.engine.control import CostModel
from structspec.model.base import Model


def report(result: ReplayResult, recording: Recording, *, cost_table: str | None = None) -> str:
    """The replay's prediction in a few lines (the hash last, for scripts).

    ``cost_table`` names the file whose table replaced the recording's.
    """
    table = cost_table or f"the recording's, {recording.threads} threads"
    lines = [
        f"replay: {result.prompts} prompts, {result.tokens} tokens, {result.passes} passes "
        f"({recording.model}, cost table: {table})",
        f"predicted: {result.predicted_ms:.1f} ms vs greedy {result.greedy_ms:.1f} ms: "
        f"speed-up {result.speedup:.3f}x, {result.tokens / max(result.passes, 1):.2f} tokens/pass",
        "slowest prompt: {} {:.3f}x".format(*result.slowest),
    ]
    for key, (drafted, accepted) in sorted(result.by_source.items()):
        lines.append(f"  {key}: drafted {drafted}, accepted {accepted}")
    if result.by_kind:
        lines.append("by kind of generation:")
    for kind, k in sorted(result.by_kind.items()):
        lines.append(
            f"  {kind}: {k.prompts} generations, {k.tokens} tokens, speed-up {k.speedup:.3f}x"
        )
    lines.append("time lost against the best proposal of each pass, by kind of pass:")
    for kind in PASS_KINDS:
        if kind in result.losses:
            lines.append(_loss_line(kind, result.losses[kind]))
    lines.append("  by sent draft length:")
    for label, loss in sorted(result.by_length.items(), key=lambda kv: int(kv[0].split("-")[0])):
        lines.append("  " + _loss_line(label, loss))
    if result.mismatches:
        lines.append(
            f"OUTPUT DIFFERS from the recording on {len(result.mismatches)} prompt(s): "
            + ", ".join(result.mismatches)
        )
    lines.append(f"proposals sha256: {result.proposals_digest}")
    lines.append(f"passes sha256: {result.digest}")
    return "\n".join(lines)


def _loss_line(label: str, loss: PassLoss) -> str:
    accepted = f", accepted {loss.accepted}/{loss.drafted}" if loss.drafted else ""
    return f"  {label}: {loss.passes} passes{accepted}, lost {loss.loss_ms:.0f} ms"


def orders_line(results: dict[str, ReplayResult]) -> str:
    """The planner's speed-up (and slowest prompt) in each prompt order, and their means."""
    cells = [f"{name} {r.speedup:.3f}x ({r.slowest[1]:.3f}x)" for name, r in results.items()]
    n = max(len(results), 1)
    mean = sum(r.speedup for r in results.values()) / n
    slowest = sum(r.slowest[1] for r in results.values()) / n
    return ", ".join(cells) + f"; mean {mean:.3f}x (slowest {slowest:.3f}x)"


Rows = Sequence[tuple[str, Recording, dict[str, ReplayResult]]]
"""Per recording (its path, itself): each control's result (``planner``, ``oracle``)."""


def replay_markdown(
    command: str, rows: Rows, orders: dict[str, dict[str, ReplayResult]] | None = None
) -> str:
    """A Markdown section: the command, and per recording each control's predicted speed-up.

    ``orders`` (recording path -> ``prompt_orders`` name -> the planner's
    result) adds a table of the planner in each prompt order.
    """
    controls = list(dict.fromkeys(c for _, _, results in rows for c in results))
    parts = [
        f"`{command}`",
        "",
        *_speedup_table(rows, controls),
        *_kind_table(rows, controls),
        "",
        *_digest_lines(rows),
        "",
        *_loss_table(rows),
        *(_orders_table(orders) if orders else []),
    ]
    return "\n".join(parts) + "\n"


def _table_head(head: list[str]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]


def _speedup_table(rows: Rows, controls: list[str]) -> list[str]:
    """Per recording: each control's speed-up, tokens per pass and slowest prompt."""
    head = ["recording", "prompts x tokens"]
    for c in controls:
        head += [f"{c} speed-up", f"{c} tokens/pass", f"{c} slowest prompt"]
    if "oracle" in controls and "planner" in controls:
        head.append("planner / oracle")
    lines = _table_head(head)
    for path, rec, results in rows:
        first = next(iter(results.values()))
        cells = [f"`{path}`", f"{first.prompts} x {rec.max_tokens}"]
        for c in controls:
            r = results.get(c)
            cells += [
                f"{r.speedup:.3f}x" if r else "",
                f"{r.tokens / max(r.passes, 1):.2f}" if r else "",
                f"{r.slowest[1]:.3f}x" if r else "",
            ]
        if "oracle" in results and "planner" in results:
            cells.append(f"{results['planner'].speedup / results['oracle'].speedup:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _digest_lines(rows: Rows) -> list[str]:
    return [
        f"- `{path}` planner passes sha256 `{results['planner'].digest}`"
        for path, _, results in rows
        if "planner" in results
    ]


def _loss_table(rows: Rows) -> list[str]:
    """Per recording: the planner's passes and lost time by kind of pass."""
    lines = [
        "Time the planner lost against the best proposal of each pass "
        "(passes, predicted ms; `structspec benchmark --replay` prints it per draft length too):",
        "",
        *_table_head(["recording", *PASS_KINDS]),
    ]
    for path, _, results in rows:
        if "planner" in results:
            by_kind = results["planner"].losses
            cells = [
                f"{by_kind[k].passes}, {by_kind[k].loss_ms:.0f}" if k in by_kind else "0, 0"
                for k in PASS_KINDS
            ]
            lines.append(f"| `{path}` | " + " | ".join(cells) + " |")
    return lines


def _kind_table(rows: Rows, controls: list[str]) -> list[str]:
    """Editor recordings by kind of generation (none: no lines)."""
    editor = [
        (path, results) for path, _, results in rows if any(r.by_kind for r in results.values())
    ]
    if not editor:
        return []
    lines = [
        "",
        "An editor recording by kind of generation (generations, tokens; each control's speed-up):",
        "",
        *_table_head(
            ["recording", "kind", "generations", "tokens", *(f"{c} speed-up" for c in controls)]
        ),
    ]
    for path, results in editor:
        first = next(iter(results.values()))
        for kind, k in sorted(first.by_kind.items()):
            cells = [
                f"{results[c].by_kind[kind].speedup:.3f}x"
                if c in results and kind in results[c].by_kind
                else ""
                for c in controls
            ]
            lines.append(
                f"| `{path}` | {kind} | {k.prompts} | {k.tokens} | " + " | ".join(cells) + " |"
            )
    return lines


def _orders_table(orders: dict[str, dict[str, ReplayResult]]) -> list[str]:
    """The planner's speed-up (slowest prompt) in each prompt order, and their mean."""
    names = list(dict.fromkeys(n for results in orders.values() for n in results))
    lines = [
        "",
        "The planner with the prompts in four orders (speed-up, slowest prompt):",
        "",
        *_table_head(["recording", *names, "mean"]),
    ]
    for path, results in orders.items():
        cells = [
            f"{results[n].speedup:.3f}x ({results[n].slowest[1]:.3f}x)" if n in results else ""
            for n in names
        ]
        mean = sum(r.speedup for r in results.values()) / max(len(results), 1)
        slow = sum(r.slowest[1] for r in results.values()) / max(len(results), 1)
        cells.append(f"{mean:.3f}x ({slow:.3f}x)")
        lines.append(f"| `{path}` | " + " | ".join(cells) + " |")
    return lines


@dataclass
class ReplayRun:
    """The results of ``replay_and_report``: ``replay_markdown``'s rows and orders."""

    rows: list[tuple[str, Recording, dict[str, ReplayResult]]]
    #: Recording path -> ``prompt_orders`` name -> the planner's result (empty: not asked).
    by_order: dict[str, dict[str, ReplayResult]]

    @property
    def failed(self) -> bool:
        """A replay's output differs from its recording (the control changed the output)."""
        every = [r for _, _, results in self.rows for r in results.values()]
        every += [r for results in self.by_order.values() for r in results.values()]
        return any(r.mismatches for r in every)


def replay_and_report(
    recordings: Sequence[tuple[str, Recording]],
    vocab: Model,
    make_engine: EngineFactory,
    *,
    limit: int | None = None,
    oracle: bool = False,
    orders: bool = False,
    cost: CostModel | None = None,
    cost_table: str | None = None,
    out: Callable[[str], None] = print,
) -> ReplayRun:
    """Replay each ``(path, recording)`` and print its report (``structspec benchmark --replay``).

    The planner always; with ``oracle`` the oracle too, and with ``orders`` the
    planner in ``prompt_orders``' other orders.
    """
    rows: list[tuple[str, Recording, dict[str, ReplayResult]]] = []
    by_order: dict[str, dict[str, ReplayResult]] = {}
    for path, recording in recordings:
        prompts = recording.prompts[:limit] if limit else None
        results = {}
        for control in ("planner", "oracle") if oracle else ("planner",):
            results[control] = replay(
                recording,
                vocab,
                make_engine,
                prompts=prompts,
                oracle=control == "oracle",
                cost=cost,
            )
            out(f"== {path}: {control}")
            out(report(results[control], recording, cost_table=cost_table))
        if oracle:
            out(f"planner / oracle: {results['planner'].speedup / results['oracle'].speedup:.3f}")
        if orders:
            ordered: dict[str, ReplayResult] = {}
            for name, order in prompt_orders(prompts or recording.prompts).items():
                ordered[name] = (
                    results["planner"]
                    if name == "recorded"
                    else replay(recording, vocab, make_engine, prompts=order, cost=cost)
                )
            out(f"planner in four orders: {orders_line(ordered)}")
            by_order[path] = ordered
        rows.append((path, recording, results))
    return ReplayRun(rows, by_order)

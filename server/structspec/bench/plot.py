"""``structspec benchmark --plot``: per-prompt speed ratios and acceptance by draft position.

matplotlib comes with the ``structspec[bench]`` extra; it is imported only here,
when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from structspec.bench.harness import GREEDY, Run, acceptance_by_position, comparison_bases
from structspec.bench.report import label
from structspec.engine.sampling import Sampling


def plot(
    path: str,
    runs: Sequence[Run],
    summary: dict[str, Any],
    modes: Sequence[str],
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
                labels.append(f"{label(mode, sampling)} vs {label(base, sampling)}")
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
                label=label(mode, sampling),
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

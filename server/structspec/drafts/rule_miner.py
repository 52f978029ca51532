"""Mining rule sets from token streams (``structspec mine``): count contexts, keep the sure ones.

See ``rule_set`` for what a rule, a tier and a veto are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from structspec.drafts.rule_set import (
    CHAIN_THRESHOLDS,
    TIERS,
    Rule,
    RuleSet,
    tier_of,
)


@dataclass(frozen=True)
class MineOptions:
    """How ``mine_rules`` counts and keeps rules."""

    min_count: int = 8
    min_context: int = 2
    max_context: int = 8
    max_continuation: int = 12


def _context_stats(
    streams: Sequence[Sequence[int]], opts: MineOptions
) -> dict[int, dict[tuple[int, ...], tuple[int, int, int]]]:
    """Per context length: context -> (most frequent next token, its count, total count).

    Only contexts seen at least ``min_count`` times are kept. Counting is
    vectorised: contexts are hashed into 64-bit keys (a rolling polynomial
    hash; collisions among a few million keys are vanishingly unlikely) and
    sorted, then each kept context is read back exactly from the tokens.
    """
    parts: list[np.ndarray] = []
    for s in streams:
        if len(s):
            parts.append(np.asarray(s, dtype=np.int64))
            parts.append(np.array([-1], dtype=np.int64))  # contexts never cross a file
    stats: dict[int, dict[tuple[int, ...], tuple[int, int, int]]] = {}
    if not parts:
        return stats
    seq = np.concatenate(parts)
    tokens = seq.tolist()
    n_all = len(seq)
    idx = np.arange(n_all)
    valid_next = seq >= 0
    ok = np.ones(n_all, dtype=bool)
    h = np.zeros(n_all, dtype=np.uint64)
    mult = np.uint64(1_000_003)
    with np.errstate(over="ignore"):
        for n in range(1, opts.max_context + 1):
            prev = np.full(n_all, -1, dtype=np.int64)
            prev[n:] = seq[:-n]
            ok &= prev >= 0
            h = h * mult + (prev + 1).astype(np.uint64)
            if n < opts.min_context:
                continue
            sel = ok & valid_next
            hs, nx, pos = h[sel], seq[sel], idx[sel]
            if not len(hs):
                stats[n] = {}
                continue
            order = np.lexsort((nx, hs))
            hs, nx, pos = hs[order], nx[order], pos[order]
            group_start = np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])
            totals = np.diff(np.r_[group_start, len(hs)])
            pair_start = np.flatnonzero(np.r_[True, (hs[1:] != hs[:-1]) | (nx[1:] != nx[:-1])])
            pair_len = np.diff(np.r_[pair_start, len(hs)])
            group_of_pair = np.searchsorted(group_start, pair_start, side="right") - 1
            best = np.zeros(len(group_start), dtype=np.int64)
            np.maximum.at(best, group_of_pair, pair_len)
            # The most frequent next token of each group (the first pair run of maximal length).
            is_best = pair_len == best[group_of_pair]
            best_next = np.full(len(group_start), -1, dtype=np.int64)
            rev = np.flatnonzero(is_best)[::-1]  # assign in reverse: the first run wins
            best_next[group_of_pair[rev]] = nx[pair_start[rev]]
            keep = np.flatnonzero(totals >= opts.min_count)
            table: dict[tuple[int, ...], tuple[int, int, int]] = {}
            for g, rep, tot, b, nt in zip(
                keep.tolist(),
                pos[group_start[keep]].tolist(),
                totals[keep].tolist(),
                best[keep].tolist(),
                best_next[keep].tolist(),
                strict=True,
            ):
                del g
                table[tuple(tokens[rep - n : rep])] = (nt, b, tot)
            stats[n] = table
    return stats


def mine_rules(
    streams: Iterable[Sequence[int]],
    opts: MineOptions | None = None,
    *,
    tokenizer: dict[str, Any] | None = None,
    languages: Sequence[str] = (),
    meta: dict[str, Any] | None = None,
) -> RuleSet:
    """Mine a rule set from token sequences (each a whole file, tokenized without BOS)."""
    opts = opts or MineOptions()
    if not 1 <= opts.min_context <= opts.max_context:
        raise ValueError("need 1 <= min_context <= max_context")
    stats = _context_stats(list(streams), opts)
    table = RuleSet({}, opts.min_context, opts.max_context, dict(tokenizer or {}), tuple(languages))
    share_of: dict[tuple[int, ...], float] = {}  # context -> raw share of its first token
    for n in range(opts.min_context, opts.max_context + 1):
        for ctx, (nxt, best, total) in stats.get(n, {}).items():
            p = round(best / (total + 1), 4)  # as stored in a file
            tier = tier_of(p)
            backoff = table.lookup(ctx[1:]) if n > opts.min_context else None
            if tier is None:
                if backoff is not None and not backoff.veto:
                    table.rules[ctx] = Rule(ctx, (), "frequent", total, p)  # veto
                continue
            if (
                backoff is not None
                and not backoff.veto
                and backoff.continuation[0] == nxt
                and TIERS.index(tier) >= TIERS.index(backoff.tier)
            ):
                # The suffix already says this. A longer context that agrees with less
                # confidence mostly has fewer samples (the smoothing is harsher on it):
                # keep the better-supported suffix's tier.
                continue
            table.rules[ctx] = Rule(ctx, (nxt,), tier, total, p)
            share_of[ctx] = best / total
    # Chain continuations: after the first token, follow the rules themselves
    # while the product of the first-token shares stays above the tier's bar
    # (raw shares: the smoothing that sets a tier would compound along a chain).
    chained: dict[tuple[int, ...], Rule] = {}
    for ctx, rule in table.rules.items():
        if rule.veto:
            chained[ctx] = rule
            continue
        seq = [*ctx, rule.continuation[0]]
        share = share_of[ctx]
        bar = CHAIN_THRESHOLDS[rule.tier]
        while len(seq) - len(ctx) < opts.max_continuation:
            nxt_rule = table.lookup(seq)
            if nxt_rule is None or nxt_rule.veto:
                break
            share *= share_of[nxt_rule.context]
            if share < bar:
                break
            seq.append(nxt_rule.continuation[0])
        chained[ctx] = Rule(ctx, tuple(seq[len(ctx) :]), rule.tier, rule.seen, rule.p)
    table.rules = chained
    table.meta = dict(meta or {})
    table.meta.update(
        min_count=opts.min_count,
        max_continuation=opts.max_continuation,
        tiers=table.tier_counts(),
    )
    return table

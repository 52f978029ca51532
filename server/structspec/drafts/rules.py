"""Mined n-gram rules: drafts from what followed the same tokens in real code.

A rule maps a *context* (the last ``n`` tokens, the pending one included) to
the *continuation* tokens that followed it in a mined corpus. Rules are mined by
``structspec mine`` (``mine_rules`` below) and saved in a gzip'd JSON file.

Tiers
    Each rule has a confidence tier from the smoothed share ``p = best / (total
    + 1)`` of the context's occurrences followed by its first token:
    ``deterministic`` (p >= 0.95), ``strong`` (p >= 0.8), ``frequent``
    (p >= 0.5). The tier is the draft's ``tier``, so the controller learns the
    acceptance of each tier on its own, and each tier has a draft cap.

Backoff and vetoes
    Lookup tries the longest context first (one dict hit per length). A longer
    context is stored only where it says something its suffix does not: a
    different first token or a higher tier, or a *veto* (an empty continuation) where
    the longer context is seen often but is unpredictable while its suffix
    would have drafted. A longer context that agrees with its suffix is kept
    only when it is more confident.

Cooldown
    A rule whose drafts are rejected at the first token ``cooldown_after``
    times in a row is muted for a number of passes that doubles each time it
    fails again after a cooldown (the model, not the corpus, is the truth).

Tokenizer safety
    Rules are token ids of one tokenizer. The file stores the tokenizer's name,
    vocabulary size and fingerprint (SHA-256 of every token's bytes), and the
    bytes of every token id it uses. At load, if every used id still has the
    same bytes in the model's vocabulary, the ids are used as they are;
    otherwise the tokens are mapped by their bytes, rules with a token the
    vocabulary lacks are dropped, and a warning says so.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import numpy as np

from structspec.drafts.base import Draft, DraftContext, SourceError
from structspec.drafts.feedback import Cooldown
from structspec.syntax.table import GrammarTableError, load_table

if TYPE_CHECKING:
    from structspec.drafts.registry import SourceOptions

FORMAT = "structspec-rules"
VERSION = 1

TIERS = ("deterministic", "strong", "frequent")
#: Minimum smoothed first-token share of each tier.
TIER_THRESHOLDS = {"deterministic": 0.95, "strong": 0.8, "frequent": 0.5}
#: A continuation is extended while the raw share of the whole chain stays above this.
CHAIN_THRESHOLDS = {"deterministic": 0.6, "strong": 0.5, "frequent": 0.4}
#: Longest draft a rule of each tier may propose.
DEFAULT_CAPS = {"deterministic": 12, "strong": 8, "frequent": 4}

#: Acceptance priors of the tiers for the controller (``RulesSource.priors``):
#: first-token acceptance measured on 8 held-out stdlib modules (0.94 / 0.71 / 0.45)
#: and on 24 HumanEval greedy outputs of the default model (1.0 / 0.9 / 0.65).
PRIORS = {"rules:deterministic": 0.95, "rules:strong": 0.75, "rules:frequent": 0.5}

#: The packaged default rules (mined for the default model's tokenizer).
DEFAULT_RULES_FILE = "python-stdlib.gemma3.rules.json.gz"

def _language_of_suffix() -> dict[str, str]:
    """The language table's suffix -> languageId (empty without a table)."""
    try:
        return load_table().language_of_suffixes()
    except GrammarTableError:
        return {}


#: Languages of the files a rules file is mined from, by suffix (``structspec mine``).
LANGUAGE_OF_SUFFIX = _language_of_suffix()


class RulesError(SourceError):
    """A rules file cannot be used; the message is one line for the user."""


class Tokenizer(Protocol):
    """The part of ``Model`` that mining and loading need."""

    name: str
    n_vocab: int

    def tokenize(self, text: str, *, add_bos: bool = True) -> list[int]: ...

    def token_bytes(self, token: int) -> bytes: ...


class Rule(NamedTuple):
    """``context`` -> ``continuation`` (empty: a veto).

    ``seen``: occurrences of the context when mined; ``p``: smoothed share of its first token.
    """

    context: tuple[int, ...]
    continuation: tuple[int, ...]
    tier: str
    seen: int
    p: float

    @property
    def veto(self) -> bool:
        return not self.continuation


def vocab_fingerprint(tok: Tokenizer) -> str:
    """SHA-256 of the vocabulary size and every token's bytes: equal for equal tokenizers."""
    h = hashlib.sha256(str(tok.n_vocab).encode())
    for t in range(tok.n_vocab):
        piece = tok.token_bytes(t)
        h.update(len(piece).to_bytes(4, "little"))
        h.update(piece)
    return h.hexdigest()


def tier_of(p: float) -> str | None:
    for tier in TIERS:
        if p >= TIER_THRESHOLDS[tier]:
            return tier
    return None


# --------------------------------------------------------------------------- rule sets


@dataclass
class RuleSet:
    """Rules indexed by context, with what they were mined from."""

    rules: dict[tuple[int, ...], Rule]
    min_context: int
    max_context: int
    tokenizer: dict[str, Any] = field(default_factory=dict)
    languages: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rules)

    def lookup(self, tokens: Sequence[int]) -> Rule | None:
        """The rule of the longest stored context that ends ``tokens`` (vetoes included)."""
        n_tok = len(tokens)
        rules = self.rules
        for n in range(min(self.max_context, n_tok), self.min_context - 1, -1):
            rule = rules.get(tuple(tokens[n_tok - n :]))
            if rule is not None:
                return rule
        return None

    def tier_counts(self) -> dict[str, int]:
        counts = {t: 0 for t in (*TIERS, "veto")}
        for rule in self.rules.values():
            counts["veto" if rule.veto else rule.tier] += 1
        return counts

    # -- file format -------------------------------------------------------
    def to_json(self, tok: Tokenizer) -> dict[str, Any]:
        used = sorted({t for r in self.rules.values() for t in (*r.context, *r.continuation)})
        return {
            "format": FORMAT,
            "version": VERSION,
            "tokenizer": self.tokenizer,
            "languages": list(self.languages),
            "min_context": self.min_context,
            "max_context": self.max_context,
            "meta": self.meta,
            # The bytes of every token id used: lets a load check (or remap) the vocabulary.
            "tokens": {str(t): tok.token_bytes(t).hex() for t in used},
            "rules": [
                [list(r.context), list(r.continuation), r.tier, r.seen, round(r.p, 4)]
                for r in sorted(self.rules.values(), key=lambda r: (len(r.context), r.context))
            ],
        }

    def save(self, path: str | Path, tok: Tokenizer) -> int:
        """Write the rules to ``path`` (gzip'd JSON); return the file size in bytes."""
        data = json.dumps(self.to_json(tok), separators=(",", ":")).encode()
        path = Path(path)
        with gzip.GzipFile(filename="", mode="wb", fileobj=path.open("wb"), mtime=0) as f:
            f.write(data)
        return path.stat().st_size

    @classmethod
    def load(cls, path: str | Path, model: Tokenizer) -> RuleSet:
        """Read a rules file for ``model``'s tokenizer (see the module docstring).

        Raises ``RulesError`` with a one-line message when the file is missing,
        unreadable, not a rules file, or has no rule usable with this vocabulary.
        """
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise RulesError(f"cannot read rules file {path}: {exc.strerror or exc}") from None
        try:
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            data = json.loads(raw)
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise RulesError(f"{path} is not a rules file (corrupt: {exc})") from None
        return cls.from_json(data, model, str(path))

    @classmethod
    def from_json(cls, data: Any, model: Tokenizer, origin: str = "rules") -> RuleSet:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RulesError(f"{origin} is not a structspec rules file")
        if data.get("version") != VERSION:
            raise RulesError(
                f"{origin} has rules format version {data.get('version')!r}; "
                f"this structspec reads version {VERSION} (mine it again)"
            )
        try:
            tokenizer = dict(data.get("tokenizer") or {})
            pieces = {int(k): bytes.fromhex(v) for k, v in dict(data["tokens"]).items()}
            min_ctx, max_ctx = int(data["min_context"]), int(data["max_context"])
            rows = list(data["rules"])
            languages = tuple(str(x) for x in data.get("languages") or ())
            meta = dict(data.get("meta") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise RulesError(f"{origin} is corrupt ({type(exc).__name__}: {exc})") from None
        if not 1 <= min_ctx <= max_ctx <= 64:
            raise RulesError(f"{origin} is corrupt (context lengths {min_ctx}..{max_ctx})")

        warnings: list[str] = []
        mapping: dict[int, int] | None = None  # None: the ids are valid as they are
        same_vocab = tokenizer.get("n_vocab") == model.n_vocab and all(
            0 <= t < model.n_vocab and model.token_bytes(t) == b for t, b in pieces.items()
        )
        if not same_vocab:
            mapping = _remap(pieces, model)
            warnings.append(
                f"{origin} was mined with another tokenizer "
                f"({tokenizer.get('name', 'unknown')}, {tokenizer.get('n_vocab', '?')} tokens); "
                f"{len(mapping)}/{len(pieces)} of its tokens exist in {model.name}'s vocabulary"
            )

        rules: dict[tuple[int, ...], Rule] = {}
        # Validate the token ids once over their set, then build rules with minimal work per row.
        try:
            used = {t for row in rows for part in (row[0], row[1]) for t in part}
        except (TypeError, IndexError, KeyError) as exc:
            raise RulesError(f"{origin} is corrupt ({type(exc).__name__}: {exc})") from None
        if any(type(t) is not int for t in used) or not used <= pieces.keys():
            raise RulesError(
                f"{origin} is corrupt (a rule uses a token the file does not describe)"
            )
        dropped = 0
        for row in rows:
            try:
                ctx_raw, cont_raw, tier, seen, p = row
                if mapping is None:
                    ctx, cont = tuple(ctx_raw), tuple(cont_raw)
                else:
                    ctx = tuple(mapping[t] for t in ctx_raw)
                    cont = tuple(mapping[t] for t in cont_raw)
                if tier not in TIERS or not min_ctx <= len(ctx) <= max_ctx:
                    raise ValueError(f"bad rule {row!r:.60}")
                rules[ctx] = Rule(ctx, cont, tier, int(seen), float(p))
            except KeyError:
                dropped += 1  # a token the vocabulary lacks
            except (TypeError, ValueError) as exc:
                raise RulesError(f"{origin} is corrupt ({exc})") from None
        if mapping is not None:
            warnings.append(f"{dropped} of {len(rows)} rules dropped, {len(rules)} kept")
            if rows and not any(not r.veto for r in rules.values()):
                raise RulesError(
                    f"{origin} does not fit {model.name}'s tokenizer (no usable rule); "
                    "mine rules for this model with `structspec mine`"
                )
        return cls(rules, min_ctx, max_ctx, tokenizer, languages, meta, warnings)


def _remap(pieces: dict[int, bytes], model: Tokenizer) -> dict[int, int]:
    """Old id -> new id for the tokens whose bytes the model's vocabulary has."""
    by_bytes: dict[bytes, int] = {}
    for t in range(model.n_vocab):
        by_bytes.setdefault(model.token_bytes(t), t)
    by_bytes.pop(b"", None)  # special and control tokens have no bytes: never map to them
    return {old: by_bytes[b] for old, b in pieces.items() if b in by_bytes}


# --------------------------------------------------------------------------- mining


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


# --------------------------------------------------------------------------- the source


def default_rules_path() -> Path:
    """The packaged default rules file."""
    return Path(str(resources.files("structspec.drafts") / "data" / DEFAULT_RULES_FILE))


class RulesSource:
    """Drafts from mined rules, with per-tier caps and cooldown of failing rules."""

    name = "rules"
    priors: ClassVar[Mapping[str, float]] = PRIORS

    @classmethod
    def build(cls, model: Tokenizer, options: SourceOptions) -> RulesSource:
        """The registry's constructor: ``options.rules_file``, else the packaged rules.

        Raises ``RulesError`` for a rules file that cannot be used.
        """
        if options.rules_file:
            return cls.load(options.rules_file, model)
        return cls.default(model)

    def __init__(
        self,
        rules: RuleSet,
        *,
        caps: dict[str, int] | None = None,
        cooldown_after: int = 3,
        cooldown_passes: int = 64,
    ) -> None:
        self.rules = rules
        self.caps = {**DEFAULT_CAPS, **(caps or {})}
        self.cooldown = Cooldown(cooldown_after, cooldown_passes)
        self.warnings = list(rules.warnings)
        self._languages = frozenset(rules.languages)
        self._last: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @classmethod
    def load(cls, path: str | Path, model: Tokenizer, **kwargs: Any) -> RulesSource:
        """A source over the rules file at ``path``; ``RulesError`` if it cannot be used."""
        return cls(RuleSet.load(path, model), **kwargs)

    @classmethod
    def default(cls, model: Tokenizer, **kwargs: Any) -> RulesSource:
        """The packaged default rules; an empty source with a warning if they do not fit."""
        try:
            return cls.load(default_rules_path(), model, **kwargs)
        except RulesError as exc:
            source = cls(RuleSet({}, 1, 1), **kwargs)
            source.warnings.append(f"rules source disabled: {exc}")
            return source

    def muted(self, context: Sequence[int]) -> bool:
        """Whether the rule of ``context`` is cooling down now."""
        return self.cooldown.muted(tuple(context))

    def propose(self, ctx: DraftContext) -> Draft | None:
        self.cooldown.tick()
        if ctx.max_tokens <= 0 or not self.rules.rules:
            return None
        if ctx.language is not None and self._languages and ctx.language not in self._languages:
            return None
        rule = self.rules.lookup(ctx.tokens)
        if rule is None or rule.veto or self.cooldown.muted(rule.context):
            return None
        cont = rule.continuation[: min(ctx.max_tokens, self.caps.get(rule.tier, 0))]
        if not cont:
            return None
        self._last = (rule.context, cont)
        return Draft(cont, self.name, rule.tier)

    def observe(self, draft: Draft, accepted: int) -> None:
        last = self._last
        # The planner may have cut the draft: it is ours if it is a prefix of the last proposal.
        if last is None or draft.tokens != last[1][: len(draft.tokens)]:
            return
        self.cooldown.record(last[0], accepted > 0)

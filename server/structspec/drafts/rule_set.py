"""Mined n-gram rule sets: the file format, loading across tokenizers, and lookup.

A rule maps a *context* (the last ``n`` tokens, the pending one included) to
the *continuation* tokens that followed it in a mined corpus. Rule sets are
mined by ``structspec mine`` (``rule_miner``), saved as gzip'd JSON, and
drafted from by the ``rules`` source (``rules``).

Tiers
    Each rule has a confidence tier from the smoothed share ``p = best / (total
    + 1)`` of the context's occurrences followed by its first token:
    ``deterministic`` (p >= 0.95), ``strong`` (p >= 0.8), ``frequent``
    (p >= 0.5). The tier is the draft's ``tier``, so the planner learns the
    acceptance of each tier on its own, and each tier has a draft cap.

Backoff and vetoes
    Lookup tries the longest context first (one dict hit per length). A longer
    context is stored only where it says something its suffix does not: a
    different first token or a higher tier, or a *veto* (an empty continuation) where
    the longer context is seen often but is unpredictable while its suffix
    would have drafted. A longer context that agrees with its suffix is kept
    only when it is more confident.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from structspec.drafts.base import SourceError
from structspec.files import MIB, FileLimitError, read_bounded, size_text, write_atomic
from structspec.syntax.table import GrammarTableError, load_table

FORMAT = "structspec-rules"
VERSION = 1

TIERS = ("deterministic", "strong", "frequent")
#: Minimum smoothed first-token share of each tier.
TIER_THRESHOLDS = {"deterministic": 0.95, "strong": 0.8, "frequent": 0.5}
#: A continuation is extended while the raw share of the whole chain stays above this.
CHAIN_THRESHOLDS = {"deterministic": 0.6, "strong": 0.5, "frequent": 0.4}

#: The packaged default rules (mined for the default model's tokenizer).
DEFAULT_RULES_FILE = "python-stdlib.gemma3.rules.json.gz"
#: Most bytes of a rules file, compressed or not (the packaged one is 2 MiB
#: of JSON): a setting may name ``/dev/zero`` or a gzip bomb.
MAX_RULES_BYTES = 64 * MIB


def _language_of_suffix() -> dict[str, str]:
    """The language table's suffix -> languageId (empty without a table)."""
    try:
        return load_table().language_of_suffixes()
    except GrammarTableError:
        return {}


#: Languages of the files a rules file is mined from, by suffix (``structspec mine``).
LANGUAGE_OF_SUFFIX = _language_of_suffix()


def _gunzip(data: bytes, limit: int) -> bytes:
    """Decompress gzip ``data`` to at most ``limit`` bytes (``ValueError`` past it).

    One member, as ``RuleSet.save`` writes; decompressed in steps so that a
    small file of zeros cannot expand to gigabytes first.
    """
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = inflate.decompress(data, limit + 1)
    if len(out) > limit:
        raise ValueError(f"larger than {size_text(limit)} decompressed")
    if not inflate.eof:
        raise EOFError("compressed file ended before the end-of-stream marker")
    if inflate.unused_data:  # a second member, or bytes appended: not a file ``save`` wrote
        raise ValueError("data after the end of the compressed rules")
    return out


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
        packed = gzip.compress(data, mtime=0)
        target = Path(path).resolve()  # a link's file is written, not the link replaced
        if target.exists() and not target.is_file():  # a device or a pipe: written as it is
            with target.open("wb") as fh:
                fh.write(packed)
            return len(packed)
        # Whole or not at all: a full disk or a Ctrl-C mid-write left a truncated
        # file in place of the rules that were there before.
        write_atomic(target, packed)
        return len(packed)

    @classmethod
    def load(cls, path: str | Path, model: Tokenizer) -> RuleSet:
        """Read a rules file for ``model``'s tokenizer (see the module docstring).

        Raises ``RulesError`` with a one-line message when the file is missing,
        unreadable, not a rules file, or has no rule usable with this vocabulary.
        """
        path = Path(path)
        try:
            raw = read_bounded(path, MAX_RULES_BYTES)
        except FileLimitError as exc:
            raise RulesError(f"cannot read rules file: {exc}") from None
        except OSError as exc:
            raise RulesError(f"cannot read rules file {path}: {exc.strerror or exc}") from None
        try:
            if raw[:2] == b"\x1f\x8b":
                raw = _gunzip(raw, MAX_RULES_BYTES)
            data = json.loads(raw)
        except RecursionError:
            raise RulesError(f"{path} is not a rules file (nested too deeply)") from None
        except (OSError, EOFError, zlib.error, ValueError) as exc:
            raise RulesError(f"{path} is not a rules file (corrupt: {exc})") from None
        return cls.from_json(data, model, str(path))

    @classmethod
    def from_json(cls, data: Any, model: Tokenizer, origin: str = "rules") -> RuleSet:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RulesError(f"{origin} is not a structspec rules file")
        version = data.get("version")
        if type(version) is not int or version != VERSION:  # ``true`` equals 1 in Python
            raise RulesError(
                f"{origin} has rules format version {version!r:.40}; "
                f"this structspec reads version {VERSION} (mine it again)"
            )
        try:
            tokenizer = dict(data.get("tokenizer") or {})
            pieces = {int(k): bytes.fromhex(v) for k, v in dict(data["tokens"]).items()}
            min_ctx, max_ctx = int(data["min_context"]), int(data["max_context"])
            rows = list(data["rules"])
            languages = tuple(str(x) for x in data.get("languages") or ())
            meta = dict(data.get("meta") or {})
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
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
                share = float(p)
                if not 0.0 <= share <= 1.0:  # also NaN
                    raise ValueError(f"bad rule {row!r:.60}")
                rules[ctx] = Rule(ctx, cont, tier, int(seen), share)
            except KeyError:
                dropped += 1  # a token the vocabulary lacks
            except (TypeError, ValueError, OverflowError) as exc:
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


def default_rules_path() -> Path:
    """The packaged default rules file."""
    return Path(str(resources.files("structspec.drafts") / "data" / DEFAULT_RULES_FILE))

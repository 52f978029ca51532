"""The source policy of a buffer's domain: which sources draft, and how far.

The language table (``grammars/languages.toml``) gives every domain its draft
sources and per-pass caps: a JSON buffer gets no Python syntax rules, SQL's
keyword continuations are short. The engine asks once per generation
(``Engine(policy=domain_policy)``) and applies the answer to every pass, so no
source has to know the table. The buffer's language is the one the draft
context resolved (``DraftContext.language_spec``).
"""

from __future__ import annotations

import warnings

from structspec.drafts.base import DraftContext, SourcePolicy
from structspec.syntax.table import GrammarTableError, load_table


def domain_policy(ctx: DraftContext) -> SourcePolicy:
    """The sources and caps of the domain of ``ctx``'s buffer (every source without a table)."""
    try:
        table = load_table()
    except GrammarTableError as exc:
        warnings.warn(f"no language table, every source drafts: {exc}", stacklevel=2)
        return SourcePolicy()
    lang = ctx.language_spec()
    domain = table.domains[lang.domain if lang is not None else "generic"]
    return SourcePolicy(frozenset(domain.sources), dict(domain.caps))

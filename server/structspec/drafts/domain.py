"""The source policy of a buffer's domain: which sources draft, and how far.

The language table (``grammars/languages.toml``) gives every domain its draft
sources and per-pass caps: a JSON buffer gets no Python syntax rules, SQL's
keyword continuations are short. The engine asks once per generation
(``Engine(policy=domain_policy)``) and applies the answer to every pass, so no
source has to know the table. A languageId the table does not know (or none)
is resolved from the text, as the editor would have named it.
"""

from __future__ import annotations

import warnings

from structspec.drafts.base import DraftContext, SourcePolicy
from structspec.syntax.domains import detect_language, domain_for_language
from structspec.syntax.table import GrammarTableError, load_table

#: Tokens of text before the cursor that decide an unnamed buffer's language.
SNIFF_TOKENS = 2048


def domain_policy(ctx: DraftContext) -> SourcePolicy:
    """The sources and caps of the domain of ``ctx``'s buffer (every source without a table)."""
    try:
        table = load_table()
    except GrammarTableError as exc:
        warnings.warn(f"no language table, every source drafts: {exc}", stacklevel=2)
        return SourcePolicy()
    lang = table.for_language_id(ctx.language)
    if lang is None:
        lang, _ = detect_language(None, None, ctx.text_tail(SNIFF_TOKENS), table=table)
    domain = domain_for_language(lang)
    return SourcePolicy(frozenset(domain.sources), dict(domain.caps))

"""The syntax engine's language layer: the language table, domains, lexical and parse state.

- ``table``: ``grammars/languages.toml`` and the tree-sitter grammars of the
  installed ``tree_sitter_<lang>`` wheels;
- ``domains``: which language and domain a buffer is (``detect_domain``);
- ``lexer``: the incremental bracket/string/comment/indent state at the cursor;
- ``shadow``: the incrementally reparsed tree-sitter tree and its queries.

The draft sources built on it are ``structspec.drafts.ast_shadow`` and
``structspec.drafts.motif``.
"""

from __future__ import annotations

from structspec.syntax.domains import Domain, detect_domain, detect_language, domain_for_language
from structspec.syntax.table import (
    DomainSpec,
    GrammarTableError,
    LanguageSpec,
    LanguageTable,
    grammars_dir,
    load_table,
)

__all__ = [
    "Domain",
    "DomainSpec",
    "GrammarTableError",
    "LanguageSpec",
    "LanguageTable",
    "detect_domain",
    "detect_language",
    "domain_for_language",
    "grammars_dir",
    "load_table",
]

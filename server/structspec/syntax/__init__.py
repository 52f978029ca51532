"""The syntax engine's language layer: the language table, domains, lexical and parse state.

- ``table``: ``grammars/languages.toml`` and the tree-sitter grammars of the
  installed ``tree_sitter_<lang>`` wheels;
- ``domains``: which language a buffer is (``detect_language``, ``resolve_language``);
- ``lexer``: the incremental bracket/string/comment/indent state at the cursor;
- ``shadow``: the incrementally reparsed tree-sitter tree and its queries.

The draft sources built on it are ``structspec.drafts.ast_shadow`` and
``structspec.drafts.motif``.
"""

from __future__ import annotations

from structspec.syntax.domains import detect_language, resolve_language
from structspec.syntax.table import (
    DomainSpec,
    GrammarTableError,
    LanguageSpec,
    LanguageTable,
    grammars_dir,
    load_table,
)

__all__ = [
    "DomainSpec",
    "GrammarTableError",
    "LanguageSpec",
    "LanguageTable",
    "detect_language",
    "resolve_language",
    "grammars_dir",
    "load_table",
]

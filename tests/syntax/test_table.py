"""The language table, its query files, grammar loading and domain detection."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import tree_sitter

from structspec.config import SOURCE_NAMES
from structspec.syntax import GrammarTableError, detect_language, grammars_dir, load_table
from structspec.syntax.table import parse_table

REQUIRED = [
    "python",
    "javascript",
    "typescript",
    "go",
    "rust",
    "json",
    "html",
    "sql",
    "c",
    "cpp",
    "java",
    "bash",
]


def test_every_required_language_has_a_grammar_and_compiling_queries() -> None:
    table = load_table()
    for name in REQUIRED:
        lang = table.languages[name]
        grammar = lang.grammar()
        assert grammar is not None, name
        source = lang.query_source("shadow")
        assert source, f"grammars/{name}/shadow.scm missing"
        query = tree_sitter.Query(grammar, source)
        names = {query.capture_name(i) for i in range(query.capture_count)}
        assert names <= {"skip"}, (name, names)


def test_every_query_folder_belongs_to_a_language() -> None:
    root = grammars_dir()
    table = load_table()
    folders = {p.name for p in root.iterdir() if p.is_dir()}
    assert folders <= set(table.languages)


def test_domains_name_only_known_sources() -> None:
    table = load_table()
    assert {"python", "json", "html", "sql", "go", "generic"} <= set(table.domains)
    for domain in table.domains.values():
        assert set(domain.sources) <= set(SOURCE_NAMES)
        assert set(domain.caps) <= set(SOURCE_NAMES)


@pytest.mark.parametrize(
    ("language_id", "path", "text", "domain", "language", "how"),
    [
        ("python", None, "", "python", "python", "languageId"),
        ("PYTHON", None, "", "python", "python", "languageId"),
        ("typescriptreact", None, "", "clike", "tsx", "languageId"),
        ("go", "x.py", "", "go", "go", "languageId"),
        (None, "/a/b/package.json", "", "json", "json", "path"),
        (None, "page.HTML", "", "html", "html", "path"),
        (None, "schema.sql", "", "sql", "sql", "path"),
        ("plaintext", "notes.txt", "", "generic", None, "default"),
        (None, None, "#!/usr/bin/env python3\nprint(1)\n", "python", "python", "content"),
        (None, None, "#!/bin/bash\necho hi\n", "shell", "bash", "content"),
        (None, None, '{"a": [1, 2], "b": {"c": null}}', "json", "json", "content"),
        (None, None, '{\n  "name": "half typed', "json", "json", "content"),
        (None, None, "package main\n\nfunc main() {\n}\n", "go", "go", "content"),
        (None, None, "CREATE TABLE t (\n  id INTEGER\n);\n", "sql", "sql", "content"),
        (None, None, "<!DOCTYPE html>\n<html>\n<body>", "html", "html", "content"),
        (None, None, "import os\n\ndef main():\n    pass\n", "python", "python", "content"),
        (None, None, "just some words\n", "generic", None, "default"),
        (None, None, "", "generic", None, "default"),
    ],
)
def test_detect_language_and_its_domain(language_id, path, text, domain, language, how) -> None:
    lang, detected_by = detect_language(language_id, path, text)
    d = load_table().domains[lang.domain if lang else "generic"]
    assert d.name == domain
    assert (lang.name if lang else None) == language
    assert detected_by == how
    assert d.sources and all(s in SOURCE_NAMES for s in d.sources)


def test_generic_domain_has_no_syntax_source() -> None:
    d = load_table().domains["generic"]
    assert "ast" not in d.sources and "motif" in d.sources
    assert "lookup" in d.sources and d.caps.get("lookup", 1) > 0


def test_bad_entries_are_skipped_with_a_warning(tmp_path: Path) -> None:
    data = {
        "domains": {
            "x": {"sources": ["lookup", "nonsense"]},
            "ok": {"sources": ["ast"]},
            "generic": {"sources": ["lookup"]},
        },
        "languages": {
            "good": {"domain": "ok", "brackets": ["()"], "extensions": [".g"]},
            "badbrackets": {"domain": "ok", "brackets": ["(", "[]"]},
            "baddomain": {"domain": "x"},
            "badregex": {"domain": "ok", "content_patterns": ["("]},
            "badindent": {"domain": "ok", "indent": "x"},
            "badflag": {"domain": "ok", "object_notation": "yes"},
            "notatable": 3,
        },
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = parse_table(data, tmp_path)
    assert set(table.languages) == {"good"}
    assert set(table.domains) == {"ok", "generic"}
    assert len(caught) == 7
    assert table.for_path("a.G").name == "good"
    assert table.languages["good"].grammar() is None  # no grammar: lexical state only


def test_table_without_the_generic_domain_is_one_clear_error(tmp_path: Path) -> None:
    """No built-in stand-in: ``[domains.generic]`` has one home, ``languages.toml``."""
    with pytest.raises(GrammarTableError, match=r"\[domains\.generic\] is missing"):
        parse_table({"domains": {"ok": {"sources": ["lookup"]}}}, tmp_path)
    with warnings.catch_warnings():  # present but invalid: skipped, then missing
        warnings.simplefilter("ignore")
        with pytest.raises(GrammarTableError, match="generic"):
            parse_table({"domains": {"generic": {"sources": ["nonsense"]}}}, tmp_path)
    (tmp_path / "languages.toml").write_text("[languages.z]\ndomain = 'generic'\n")
    with pytest.raises(GrammarTableError, match="domains.generic"):
        load_table(str(tmp_path))


def test_missing_grammar_wheel_is_not_fatal(tmp_path: Path) -> None:
    data = {
        "domains": {"generic": {"sources": ["lookup"]}},
        "languages": {"z": {"domain": "generic", "grammar": {"package": "no_such_ts_pkg"}}},
    }
    table = parse_table(data, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert table.languages["z"].grammar() is None


def test_unreadable_table_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GrammarTableError, match="cannot read"):
        load_table(str(tmp_path))
    (tmp_path / "languages.toml").write_text("[languages\n")
    with pytest.raises(GrammarTableError, match="languages.toml"):
        load_table(str(tmp_path))


def test_grammars_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "languages.toml").write_text("")
    monkeypatch.setenv("STRUCTSPEC_GRAMMARS", str(tmp_path))
    assert grammars_dir() == tmp_path

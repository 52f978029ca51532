"""The draft sources: one table that names them (``sources``), the registry that builds them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from structspec.config import SOURCE_NAMES as CONFIG_NAMES
from structspec.drafts.registry import check_priors, source_class
from structspec.sources import SOURCE_NAMES, SOURCES, EditorInputs, editor_inputs

ROOT = Path(__file__).resolve().parents[2]


def test_config_names_are_the_registry() -> None:
    assert CONFIG_NAMES is SOURCE_NAMES
    assert tuple(entry.name for entry in SOURCES) == SOURCE_NAMES
    assert len(set(SOURCE_NAMES)) == len(SOURCE_NAMES) and "all" not in SOURCE_NAMES


def test_vscode_client_spells_out_no_source_name() -> None:
    """Adding a source needs no client edit: the server checks the names (config.apply)."""
    package = json.loads((ROOT / "vscode-client" / "package.json").read_text(encoding="utf-8"))
    setting = package["contributes"]["configuration"]["properties"]["structspec.sources"]
    assert setting["type"] == ["array", "null"] and setting["items"] == {"type": "string"}
    described = setting["markdownDescription"]
    assert "`all`" in described and "structspec run --help" in described
    assert not [name for name in SOURCE_NAMES if f"`{name}`" in described]
    for ts in sorted((ROOT / "vscode-client" / "src").glob("*.ts")):  # no list of them either
        text = ts.read_text(encoding="utf-8")
        quoted = [n for n in SOURCE_NAMES if f"'{n}'" in text or f'"{n}"' in text]
        assert len(quoted) <= 1, (ts.name, quoted)  # one may be a languageId (`python`)


@pytest.mark.parametrize("entry", SOURCES, ids=lambda e: e.name)
def test_every_source_declares_valid_priors(entry) -> None:
    cls = source_class(entry.name)
    assert cls.name == entry.name
    assert cls.priors, "a source declares the acceptance it starts from"
    assert callable(cls.build)


def test_priors_are_checked() -> None:
    check_priors("rules", {"rules": 0.5, "rules:strong": 1.0})
    with pytest.raises(ValueError, match="another source"):
        check_priors("rules", {"lookup:m2": 0.5})
    with pytest.raises(ValueError, match=r"not in \(0, 1\]"):
        check_priors("rules", {"rules:strong": 1.5})
    with pytest.raises(ValueError, match=r"not in \(0, 1\]"):
        check_priors("rules", {"rules": float("nan")})


@pytest.mark.parametrize("entry", SOURCES, ids=lambda e: e.name)
def test_a_source_declares_the_editor_inputs_it_reads(entry) -> None:
    """``reads_*`` matches the ``DraftContext`` fields the source's module reads."""
    text = (ROOT / "server" / (entry.module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    assert entry.reads_corpus == bool(re.search(r"\.corpus\b", text))
    assert entry.reads_suffix == ("suffix_tokens" in text)
    assert entry.reads_recent_suggestions == ("recent_suggestions" in text)


def test_editor_inputs_are_what_the_enabled_sources_read() -> None:
    assert editor_inputs(()) == EditorInputs()
    assert editor_inputs(["rules", "python"]) == EditorInputs()
    assert editor_inputs(["recycle"]) == EditorInputs(recent_suggestions=True)
    assert editor_inputs(["nearby", "lookup"]) == EditorInputs(corpus=True, suffix=True)
    assert editor_inputs(["all"]) == EditorInputs(True, True, True)

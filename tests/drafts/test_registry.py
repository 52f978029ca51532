"""The draft-source registry: one list that names, builds and validates every source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structspec.config import SOURCE_NAMES as CONFIG_NAMES
from structspec.drafts.registry import SOURCE_NAMES, SOURCES, check_priors, source_class

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

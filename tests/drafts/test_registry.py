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
    assert SOURCE_NAMES == (
        "lookup",
        "rules",
        "python",
        "ast",
        "motif",
        "recycle",
        "suffix",
        "nearby",
    )


def test_vscode_enum_matches_the_registry() -> None:
    package = json.loads((ROOT / "vscode-client" / "package.json").read_text(encoding="utf-8"))
    props = package["contributes"]["configuration"]["properties"]
    setting = props["structspec.sources"]
    assert setting["items"]["enum"] == ["all", *SOURCE_NAMES]
    for name in SOURCE_NAMES:
        assert f"`{name}`" in setting["markdownDescription"]


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

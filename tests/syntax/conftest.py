"""Fixtures of the syntax-engine tests (helpers live in ``syntax_helpers``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib: make syntax_helpers importable here.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from syntax_helpers import WordModel  # noqa: E402


@pytest.fixture
def words() -> WordModel:
    return WordModel()


@pytest.fixture(scope="session")
def gemma():
    """The real default model (tests using it are marked ``model``)."""
    from structspec.runtime import open_model

    return open_model("", context_size=2048, threads=2)

"""Fixtures of the syntax-engine tests (helpers live in ``tests.helpers.syntax``)."""

from __future__ import annotations

import pytest
from tests.helpers.syntax import WordModel


@pytest.fixture
def words() -> WordModel:
    return WordModel()


@pytest.fixture(scope="session")
def gemma():
    """The real default model (tests using it are marked ``model``)."""
    from structspec.runtime import open_model

    return open_model("", context_size=2048, threads=2)

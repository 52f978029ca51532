"""Fixtures of the draft-source tests (helpers live in ``tests.helpers``)."""

from __future__ import annotations

import pytest
from tests.helpers.drafts import PieceTokenizer
from tests.helpers.syntax import WordModel


@pytest.fixture
def pieces() -> PieceTokenizer:
    return PieceTokenizer()


@pytest.fixture
def words() -> WordModel:
    return WordModel()


@pytest.fixture(scope="session")
def gemma():
    """The real default model (tests using it are marked ``model``)."""
    pytest.importorskip("llama_cpp")
    from structspec.runtime import open_model

    return open_model("", context_size=2048, threads=2)

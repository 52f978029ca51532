"""Fixtures of the draft-source tests (helpers live in ``tests.helpers.drafts``)."""

from __future__ import annotations

import pytest
from tests.helpers.drafts import PieceTokenizer


@pytest.fixture
def pieces() -> PieceTokenizer:
    return PieceTokenizer()


@pytest.fixture(scope="session")
def gemma():
    """The real default model's tokenizer (tests using it are marked ``model``)."""
    pytest.importorskip("llama_cpp")
    from structspec.runtime import open_model

    return open_model("", context_size=512, threads=1)

"""Fixtures of the draft-source tests (helpers live in ``drafts_helpers``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# pytest runs with --import-mode=importlib: make drafts_helpers importable here.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drafts_helpers import PieceTokenizer  # noqa: E402


@pytest.fixture
def pieces() -> PieceTokenizer:
    return PieceTokenizer()


@pytest.fixture(scope="session")
def gemma():
    """The real default model's tokenizer (tests using it are marked ``model``)."""
    pytest.importorskip("llama_cpp")
    from structspec.runtime import open_model

    return open_model("", context_size=512, threads=1)

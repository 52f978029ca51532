"""Fixtures for the HTTP server tests (helpers live in ``http_helpers.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from http_helpers import ServerThread, standin_engine  # noqa: E402


@pytest.fixture(scope="module")
def standin_server() -> Iterator[ServerThread]:
    from structspec.http.app import create_app

    app = create_app(standin_engine(), model_id="standin")
    with ServerThread(app) as server:
        yield server

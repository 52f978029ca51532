"""``structspec-lsp --log-file``: a line per answer for as long as the editor runs, capped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from structspec.lsp import __main__ as lsp_main


def test_the_log_file_is_rotated_not_grown_for_the_sessions_life(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lsp_main, "LOG_MAX_BYTES", 10_000)
    root = logging.getLogger()
    kept = root.handlers[:], root.level
    root.handlers.clear()
    try:
        log = tmp_path / "lsp.log"
        assert lsp_main._setup_logging(str(log))
        for i in range(1_000):  # ~100 KB of answers' lines
            logging.getLogger("structspec.completion").info("answer %d: %s", i, "x" * 60)
        sizes = [p.stat().st_size for p in tmp_path.iterdir()]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["lsp.log", "lsp.log.1"]
        assert max(sizes) <= 10_000
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:], level = kept
        root.setLevel(level)

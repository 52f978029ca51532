"""``python -m structspec.bench.widen`` on tiny generated GGUFs: both files measured, or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.fim_gguf import write_tiny_fim_gguf

from structspec.bench import widen as bench
from structspec.model import widen

pytest.importorskip("gguf")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(widen, "kept_cache_folder", lambda _name: tmp_path / "widened")


def test_it_measures_both_files_and_finds_the_same_logits(tmp_path, capsys):
    path = tmp_path / "q5.gguf"
    write_tiny_fim_gguf(path, "qwen", layers="q5_0")
    assert bench.main(["--model", str(path), "--repeat", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "| prompt tokens/s |" in out
    assert all(f"| verify {rows} row(s), ms |" in out for rows in bench.ROWS)
    assert "argmax differs at 0" in out


def test_a_file_without_q5_0_is_not_measured(tmp_path, capsys):
    path = tmp_path / "f32.gguf"
    write_tiny_fim_gguf(path, "qwen")
    assert bench.main(["--model", str(path), "--repeat", "1", "--threads", "1"]) == 0
    assert "nothing to widen" in capsys.readouterr().out

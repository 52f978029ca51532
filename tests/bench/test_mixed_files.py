"""The mixed-language suite: real files of this machine, cut like an editor's cursor."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from structspec.bench.mixed import LANGUAGES, build_mixed_suite, collect, cut_prompt
from structspec.bench.suites import jsonl


def test_cut_prompt_ends_at_a_line_start_with_its_indentation() -> None:
    text = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(40))
    prompt = cut_prompt(text, max_chars=300)
    assert prompt is not None and prompt in text  # a slice of the file, nothing invented
    assert prompt.endswith(("\n", "    ")) and len(prompt) <= 300 + 8
    assert cut_prompt("too short\n") is None


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("mixed") / "mixed.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # languages without files on this machine
        return out, build_mixed_suite(out, limit_per_lang=2)


def test_suite_is_made_of_real_files(suite: tuple[Path, int]) -> None:
    path, n = suite
    items = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(items) == n >= 4
    assert {"python", "json"} <= {item["language"] for item in items}
    for item in items:
        assert item["language"] in LANGUAGES
        source = Path(item["source"]).read_text(encoding="utf-8")
        assert item["prompt"] in source  # cut from the real file
        assert item["id"].startswith(item["language"] + "/")
    assert len(jsonl(path)) == n  # the benchmark's jsonl reader takes it


def test_selection_is_deterministic() -> None:
    assert collect("python", 2) == collect("python", 2)


def test_zero_limit_writes_an_empty_suite(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "empty.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert build_mixed_suite(out, limit_per_lang=0) == 0
    assert out.read_text() == ""

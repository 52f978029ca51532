"""The mixed-language suite: prompts cut from real files, with unique ids."""

from __future__ import annotations

import json

import pytest

from structspec.bench import mixed
from structspec.bench.suites import SuiteError, jsonl


def _json_file(path, salt: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {f"key_{i}": {"value": i, "salt": salt, "list": [i, i + 1]} for i in range(40)}
    path.write_text(json.dumps(body, indent=2))


def test_same_file_name_gets_unique_ids_and_same_text_one_prompt(tmp_path, monkeypatch):
    _json_file(tmp_path / "a" / "paginators-1.json", "a")
    _json_file(tmp_path / "b" / "paginators-1.json", "b")
    _json_file(tmp_path / "c" / "paginators-1.json", "a")  # the same text as a/
    monkeypatch.setattr(mixed, "_roots", lambda: {"json": [tmp_path]})
    items = mixed.collect("json", 8)
    assert [i["id"] for i in items] == ["json/paginators-1.json", "json/b/paginators-1.json"]
    assert len({i["prompt"] for i in items}) == 2


def test_prompt_is_cut_at_a_line_start_in_the_middle():
    text = "".join(f"line {i} of the file with some words\n" for i in range(60))
    prompt = mixed.cut_prompt(text)
    assert prompt is not None and prompt.endswith("\n") and prompt in text
    assert 200 <= len(prompt) <= mixed.MAX_PROMPT_CHARS


def test_jsonl_refuses_duplicate_ids(tmp_path):
    f = tmp_path / "s.jsonl"
    f.write_text(
        '{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n{"id": "a", "prompt": "z"}\n'
    )
    with pytest.raises(SuiteError, match=r"s.jsonl:3: duplicate id 'a' \(first on line 1\)"):
        jsonl(f)

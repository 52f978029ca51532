"""Chunked prefill and KV slots on a real llama.cpp context (a tiny GGUF, random weights)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.helpers.fim_gguf import write_tiny_fim_gguf

from structspec.completion.prewarm import prefill_in_chunks, reusable_prefix

pytest.importorskip("llama_cpp")
from structspec.model.llama import LlamaModel  # noqa: E402


@pytest.fixture
def model(tmp_path: Path):
    vocab = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen")
    m = LlamaModel.load(vocab.path, n_ctx=512, threads=1, slots=3, n_batch=64)
    yield m
    m.close()


def test_chunks_of_another_document_leave_a_slot_alone(model: LlamaModel):
    """Two documents with the same long header: chunking the second keeps the first's cache."""
    header = model.tokenize("# licence\n" * 15, add_bos=False)  # 150 shared tokens
    x = header + model.tokenize("a" * 200, add_bos=False)
    y = header + model.tokenize("b" * 200, add_bos=False)
    model.prefill(x)
    assert prefill_in_chunks(model, y, lambda: False, chunk=64)
    assert reusable_prefix(model, x) == len(x)  # x's slot was not overwritten
    assert reusable_prefix(model, y) == len(y)


def test_a_prompt_above_a_prewarmed_window_continues_in_its_slot(model: LlamaModel):
    window = model.tokenize("line\n" * 80, add_bos=False)  # pre-warmed: 400 tokens
    model.prefill(window)
    above = window[:100] + model.tokenize("x = 1", add_bos=False)
    assert model.prefill(above) == 100  # reused, not re-evaluated in an empty slot

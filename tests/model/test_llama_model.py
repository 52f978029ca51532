"""The llama.cpp model layer on the real default GGUF (and on bad model files)."""

from __future__ import annotations

import pytest

from structspec.engine import Engine, GenerationOptions
from structspec.model.base import ModelError
from structspec.model.llama import LlamaModel, check_gguf_file, default_model_path


def test_missing_file(tmp_path):
    with pytest.raises(ModelError, match="not found: .*nope.gguf"):
        LlamaModel.load(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelError, match="not a GGUF model file: .*bad.gguf"):
        LlamaModel.load(bad)


def test_directory(tmp_path):
    with pytest.raises(ModelError, match="directory"):
        check_gguf_file(tmp_path)


def test_truncated_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 32)
    with pytest.raises(ModelError, match="truncated.gguf"):
        LlamaModel.load(bad)


@pytest.fixture(scope="module")
def model():
    m = LlamaModel.load(default_model_path(), n_ctx=1024, threads=2, slots=2, n_batch=128)
    yield m
    m.close()


@pytest.mark.model
def test_tokenizer_round_trip(model):
    text = 'def f(x):\n    return "é" + x\n'
    assert model.detokenize(model.tokenize(text, add_bos=False)) == text
    assert model.tokenize(text)[0] == model.bos_token()
    assert model.fim_tokens() is None  # Gemma 3 has no FIM tokens


@pytest.mark.model
def test_prefill_longer_than_n_batch_is_chunked(model):
    tokens = model.tokenize("x = 1\n" * 200)  # > 128 = n_batch
    assert len(tokens) > 3 * 128
    model.truncate(0)
    assert model.prefill(tokens) == 0
    assert list(model.cached_tokens) == tokens


@pytest.mark.model
def test_verify_rollback_and_prefix_reuse(model):
    tokens = model.tokenize("def add(a, b):\n    return")
    model.truncate(0)
    model.prefill(tokens[:-1])
    first = model.verify([tokens[-1]])
    assert first.margin[0] >= 0
    base = len(model.cached_tokens)
    once = model.verify([first.argmax[0]]).argmax
    model.truncate(base)
    model.verify([first.argmax[0], 5, 6, 7])  # rejected rows ...
    model.truncate(base)  # ... rolled back
    again = model.verify([first.argmax[0]]).argmax  # same context, same batch shape
    assert len(model.cached_tokens) == base + 1
    assert again == once
    with pytest.raises(RuntimeError):
        first.margin[0]  # its logits were overwritten by later passes
    assert model.prefill(tokens[:-1]) == len(tokens) - 1  # all reused


@pytest.mark.model
def test_slots_keep_two_documents(model):
    a = model.tokenize("import os\n" * 30)
    b = model.tokenize("fn main() {}\n" * 30)
    model.prefill(a)
    model.prefill(b)
    assert model.prefill(a) == len(a)  # a's slot survived b
    assert model.prefill(b) == len(b)


@pytest.mark.model
def test_verify_past_context_is_an_error_not_an_abort(model):
    model.truncate(0)
    tokens = model.tokenize("x = 1\n" * 300)[:1000]
    assert len(tokens) == 1000
    model.prefill(tokens)
    with pytest.raises(ModelError):
        model.verify([1] * 128)
    with pytest.raises(ModelError):
        model.verify([model.n_vocab + 5])


@pytest.mark.model
def test_prompt_longer_than_context_is_truncated(model):
    engine = Engine(model)
    tokens = model.tokenize("x = 1\n" * 600)
    res = engine.generate(tokens, GenerationOptions(max_tokens=8))
    assert res.warnings and "truncated" in res.warnings[0]
    assert len(res.tokens) == 8


@pytest.mark.model
def test_teacher_forced_greedy_output_is_argmax(model):
    tokens = model.tokenize("def fibonacci(n):\n")
    model.truncate(0)
    res = Engine(model).generate(tokens, GenerationOptions(max_tokens=32, speculative=False))
    model.truncate(0)
    checks = model.teacher_forced(tokens, res.tokens)
    assert len(checks) == len(res.tokens)
    assert all(c.gap <= 1.0 for c in checks)  # batch-shape noise only (docs/MEASUREMENTS.md)

"""``python -m structspec.bench.one_row``: the one-row pass of each head, on a tiny Q6_K model."""

from __future__ import annotations

import pytest
from tests.helpers.fim_gguf import write_tiny_fim_gguf

from structspec.bench import one_row
from structspec.model import head as native
from structspec.model.llama import LlamaModel

needs_kernel = pytest.mark.skipif(
    not native.kernel_available(),
    reason="the head kernel is not built or the CPU has none of its instruction sets",
)


@needs_kernel
def test_each_way_is_timed_in_every_round(tmp_path):
    path = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head="q6_k").path
    model = LlamaModel.load(path, n_ctx=256, threads=1, n_batch=64)
    try:
        times = one_row.one_row_ms(model, repeat=2, threads=1)
        assert list(model.cached_tokens) == []  # the cache is left empty
    finally:
        model.close()
    assert set(times) == {"kernel", "used", "llama.cpp"}
    assert all(len(v) == 2 and all(ms > 0 for ms in v) for v in times.values())


@needs_kernel
def test_the_command_prints_a_row_per_model_and_says_which_shapes_are_not_built(
    tmp_path, monkeypatch, capsys
):
    path = write_tiny_fim_gguf(tmp_path / "tiny.gguf", "qwen", head="q6_k").path
    assert one_row.main(["--model", str(path), "--repeat", "1", "--threads", "1"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.startswith("| tiny.gguf | Q6_K | ") and row.count("[") == 3
    monkeypatch.setattr(one_row, "default_cache_dir", lambda: tmp_path / "none")
    assert one_row.main(["--shape", "Qwen2.5-Coder-1.5B", "--repeat", "1"]) == 0
    assert "| Qwen2.5-Coder-1.5B | not built" in capsys.readouterr().out

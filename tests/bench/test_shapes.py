"""Model shapes: the builder on tiny shapes (no llama-quantize), the report on canned data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from structspec.bench import shape_models, shapes
from structspec.bench.shape_models import SHAPES, synthetic_vocab, write_gguf
from structspec.bench.shapes import (
    HEAD_ROWS,
    head_verdict,
    measure_head_ms,
    render_markdown,
    window_tokens,
)
from structspec.model.llama import LlamaModel

#: One shape per architecture and tokenizer family.
FAMILIES = ("Qwen2.5-Coder-1.5B", "StarCoder2-3B", "DeepSeek-Coder-1.3B")
#: The FIM tokens (prefix, suffix, middle) llama.cpp must find by name, per architecture.
FIM = {
    "qwen2": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    "starcoder2": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "llama": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
}


def test_the_real_shapes_are_consistent() -> None:
    for s in SHAPES.values():
        assert s.n_embd % s.n_head == 0 and s.n_head % s.n_head_kv == 0, s.name
        assert s.n_embd % 32 == 0 and s.n_ff % 32 == 0, s.name  # whole Q8_0 blocks
        assert all(i < s.real_tokens for i, _ in s.specials), s.name
        assert s.source, s.name


def test_the_synthetic_vocabulary_has_every_byte_and_the_specials_at_their_ids() -> None:
    shape = SHAPES["Qwen2.5-Coder-0.5B"]
    tokens, types, merges = synthetic_vocab(shape)
    assert len(tokens) == len(types) == shape.n_vocab == 151936
    assert len(set(tokens)) == len(tokens)
    assert tokens[151659] == "<|fim_prefix|>" and types[151659] == 3
    assert tokens[151935] == "[PAD151935]" and types[151935] == 5
    assert len(merges) == shape.real_tokens - len(shape.specials) - 256
    assert "Ġ Ġ" in merges  # two spaces merge: indentation is a few tokens, as in code


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tiny_shape_loads_with_its_architecture_and_fim_tokens(
    family: str, tmp_path: Path
) -> None:
    shape = SHAPES[family].tiny()
    path = tmp_path / f"{shape.name}.gguf"
    write_gguf(shape, path)
    model = LlamaModel.load(path, n_ctx=256, threads=1)
    try:
        assert model.metadata("general.architecture") == SHAPES[family].arch
        assert model.n_embd == shape.n_embd
        assert model.n_vocab == shape.n_vocab
        fim = model.fim_tokens()
        assert fim is not None
        ids = {text: i for i, text in shape.specials}
        assert (fim.prefix, fim.suffix, fim.middle) == tuple(ids[t] for t in FIM[shape.arch])
        text = "def f(x):\n    return x\n"
        tokens = model.tokenize(text, add_bos=False)
        assert model.detokenize(tokens) == text
        assert len(tokens) < len(text)  # the merges apply
        rows = model.verify(model.tokenize(text)[:4])
        assert len(rows.argmax) == 4 and all(0 <= t < shape.n_vocab for t in rows.argmax)
    finally:
        model.close()


def test_a_built_shape_is_not_built_again(tmp_path: Path) -> None:
    shape = SHAPES["StarCoder2-3B"].tiny()
    done = shape_models.shape_path(shape, tmp_path)
    done.write_bytes(b"GGUF")  # what a finished build left
    assert shape_models.build_shape(shape, tmp_path, quantize=None) == done


def test_without_llama_quantize_the_command_says_how_to_build_it(tmp_path: Path, capsys) -> None:
    rc = shapes.main(
        [
            "--shape",
            "Qwen2.5-Coder-0.5B",
            "--cache-dir",
            str(tmp_path),
            "--quantize",
            str(tmp_path / "nope"),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llama-quantize" in err[0] and "tools/build-llama-server.sh" in err[0]


def test_the_window_is_what_the_prompt_rate_evaluates_in_two_seconds() -> None:
    assert window_tokens(100.0, 10.0) == 200
    assert window_tokens(5000.0, 10.0) == 1536


def test_the_first_window_at_a_new_place_is_evaluated_within_two_seconds() -> None:
    # Qwen2.5-Coder-7B measured 42.9 prompt tokens/s: the window is the 128-token floor
    # (3 s), the first answer's window 85 tokens (2 s)
    assert window_tokens(42.9, 3.0) == 128
    assert shapes.first_window(42.9, 128) == 85
    assert shapes.first_window(800.6, 1536) == 512  # the default model: its quality floor


def _canned() -> dict:
    table = [10.0 + 2.0 * n for n in range(16)]
    return {
        "command": "python -m structspec.bench.shapes --shape Qwen2.5-Coder-0.5B",
        "machine": {
            "cpu": "Test CPU",
            "cores": 2,
            "load_average": [9.5, 8.0, 7.0],
            "load_average_after": [9.0, 8.0, 7.0],
        },
        "threads": 2,
        "prompt_tokens": 256,
        "decode_tokens": 32,
        "recordings": ["humaneval-40x128.replay.json"],
        "random_weights": True,
        "shapes": {
            "Qwen2.5-Coder-0.5B": {
                "file_mb": 380.0,
                "load_s": 0.4,
                "rss_mb": 520.0,
                "prompt_tps": 150.0,
                "decode_tps": 20.0,
                "head": "llama.cpp",
                "head_type": "Q4_K",
                "head_reason": "the kernel does not cover the head type Q4_K (it takes Q8_0, Q6_K)",
                "verify_ms": {"llama.cpp": table},
                "head_ms": {"llama.cpp": {"1": 9.0, "4": 20.0, "8": 31.0, "16": 60.0}},
                "no_head_ms": {"1": 40.0, "4": 80.0, "8": 120.0, "16": 200.0},
                "window_tokens": 300,
                "first_window_tokens": 300,
                "predicted_speedup": 1.8,
                "predicted_speedup_by_recording": {"humaneval-40x128.replay.json": 1.8},
            },
            "default": {
                "file_mb": 250.0,
                "load_s": 0.3,
                "rss_mb": 400.0,
                "prompt_tps": 900.0,
                "decode_tps": 40.0,
                "head": "structspec",
                "head_type": "Q8_0",
                "head_reason": "the kernel covers Q8_0 (avx2)",
                "verify_ms": {"structspec": table, "llama.cpp": [t * 2 for t in table]},
                "head_ms": {
                    "structspec": {"1": 5.0, "4": 6.0, "8": 8.0, "16": 14.0},
                    "llama.cpp": {"1": 6.0, "4": 18.0, "8": 32.0, "16": 64.0},
                },
                "no_head_ms": {"1": 10.0, "4": 12.0, "8": 16.0, "16": 25.0},
                "window_tokens": 1536,
                "first_window_tokens": 512,
                "predicted_speedup": 2.1,
                "predicted_speedup_by_recording": {"humaneval-40x128.replay.json": 2.1},
            },
            "StarCoder2-3B": {"error": "measuring StarCoder2-3B failed: killed"},
        },
    }


def test_the_report_says_the_weights_are_random_and_shows_both_heads() -> None:
    text = render_markdown(_canned())
    assert "weights are random" in text and "speed only" in text
    assert "Test CPU, 2 CPUs, 2 threads" in text and "9.50, 8.00, 7.00" in text
    assert "`python -m structspec.bench.shapes --shape Qwen2.5-Coder-0.5B`" in text
    assert (
        "| Qwen2.5-Coder-0.5B | 380 | 0.4 | 520 | 150.0 | 20.0 | llama.cpp | 300 | 300 (2.0 s) "
        "| 1.80x |" in text
    )
    assert "default (structspec) | default (llama.cpp)" in text
    assert "| 8 | 24.0 | 24.0 | 48.0 |" in text
    assert "| StarCoder2-3B | measuring StarCoder2-3B failed: killed |" in text


def test_the_json_carries_the_fields_per_shape(tmp_path: Path, monkeypatch) -> None:
    canned = _canned()["shapes"]
    measured = {
        k: {
            key: v
            for key, v in r.items()
            if not key.startswith(("window", "first_window", "predicted", "head_verdict"))
        }
        for k, r in canned.items()
        if "error" not in r
    }
    probes: list[str] = []

    def child(path: str, args: object, probe: str = "") -> dict:
        probes.append(probe)
        return dict(measured["default" if not path else "Qwen2.5-Coder-0.5B"])

    monkeypatch.setattr(shapes, "_measure_in_child", child)
    monkeypatch.setattr(
        shapes, "predicted_speedups", lambda tables, recs: {n: {"r.json": 1.5} for n in tables}
    )
    shape = SHAPES["Qwen2.5-Coder-0.5B"]
    shape_models.shape_path(shape, tmp_path).write_bytes(b"GGUF")
    probe = shape_models.shape_path(shape.head_probe(), tmp_path)
    probe.write_bytes(b"GGUF")
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    rc = shapes.main(
        [
            "--shape",
            shape.name,
            "--shape",
            "default",
            "--cache-dir",
            str(tmp_path),
            "--json-out",
            str(out),
            "--markdown-out",
            str(md),
        ]
    )
    assert rc == 0
    assert probes == [str(probe), ""]  # a shape's head costs come from its probe; not the default's
    data = json.loads(out.read_text())
    for name in (shape.name, "default"):
        r = data["shapes"][name]
        for key in (
            "prompt_tps",
            "decode_tps",
            "verify_ms",
            "head",
            "predicted_speedup",
            "window_tokens",
            "rss_mb",
            "head_ms",
            "head_type",
            "head_reason",
            "head_verdict",
        ):
            assert key in r, (name, key)
    assert data["shapes"]["default"]["head_verdict"]["ratio"] == 0.25
    assert data["shapes"]["default"]["head_verdict"]["met"] is True
    kept = data["shapes"][shape.name]["head_verdict"]
    assert kept["ratio"] is None and "Q4_K" in kept["text"]
    assert data["shapes"][shape.name]["window_tokens"] == 300
    assert data["shapes"][shape.name]["first_window_tokens"] == 300  # 2 s at 150 tokens/s
    assert data["shapes"]["default"]["predicted_speedup"] == 1.5
    assert md.read_text() == render_markdown(data)


def test_the_report_shows_each_heads_own_cost_and_the_verdict() -> None:
    text = render_markdown(_canned())
    section = text[text.index("## The output head") :]
    assert "### default" in section and "### Qwen2.5-Coder-0.5B" in section
    assert "Head type Q8_0; head used: structspec; why: the kernel covers Q8_0 (avx2)." in section
    assert "| rows | structspec head ms | llama.cpp head ms | no-head pass ms |" in section
    assert "| 8 | 8.0 | 32.0 | 16.0 | 0.25x |" in section
    assert "8 rows: structspec's head costs 0.25x llama.cpp's (target <= 0.8x: met)" in section
    # only llama.cpp's head: its cost per row count, and why it is kept
    assert "Head type Q4_K; head used: llama.cpp" in section
    assert "| 8 | 31.0 | 120.0 |" in section
    assert "llama.cpp's head is kept: the kernel does not cover the head type Q4_K" in section
    # the whole-pass tables are still there, before the section
    assert text.index("| 8 | 24.0 | 24.0 | 48.0 |") < text.index("## The output head")


def test_a_report_without_head_costs_has_no_head_section() -> None:
    report = _canned()
    for r in report["shapes"].values():
        r.pop("head_ms", None)
    assert "## The output head" not in render_markdown(report)


def test_the_head_verdict() -> None:
    both = {"head": "structspec", "head_ms": {"structspec": {"8": 30.0}, "llama.cpp": {"8": 40.0}}}
    verdict = head_verdict(both)
    assert (verdict["ratio"], verdict["met"], verdict["rows"]) == (0.75, True, 8)
    both["head_ms"]["structspec"]["8"] = 36.0
    assert head_verdict(both)["met"] is False and "NOT met" in head_verdict(both)["text"]
    both["head_ms"]["llama.cpp"]["8"] = 0.0  # measured at noise level
    assert head_verdict(both)["ratio"] is None
    kept = {"head": "llama.cpp", "head_reason": "turned off", "head_ms": {"llama.cpp": {"8": 9.0}}}
    assert head_verdict(kept) == {
        "rows": 8,
        "target": 0.8,
        "ratio": None,
        "met": None,
        "text": "llama.cpp's head is kept: turned off",
    }


def test_each_heads_own_cost_is_measured_on_a_tiny_shape(tmp_path: Path) -> None:
    shape = SHAPES["Qwen2.5-Coder-1.5B"].tiny()
    path = tmp_path / f"{shape.name}.gguf"
    write_gguf(shape, path)
    model = LlamaModel.load(path, n_ctx=1024, threads=1)
    try:
        head_ms, no_head_ms = measure_head_ms(model, reps=1)
        heads = {model.head, "llama.cpp"}
        assert set(head_ms) == heads
        for by_rows in head_ms.values():
            assert list(by_rows) == [str(n) for n in HEAD_ROWS]
            assert all(ms >= 0.0 for ms in by_rows.values())
        assert list(no_head_ms) == [str(n) for n in HEAD_ROWS]
        assert all(ms > 0.0 for ms in no_head_ms.values())
        assert list(model.cached_tokens) == []  # the measurement leaves the slot empty
        assert model.head_type == "Q8_0" and model.head_reason
    finally:
        model.close()


def test_a_head_probe_is_the_shape_with_one_layer() -> None:
    for shape in SHAPES.values():
        probe = shape.head_probe()
        assert probe.n_layer == 1 and probe.name == f"{shape.name}-head"
        same = ("arch", "n_embd", "n_vocab", "n_tokens", "tied", "specials", "pre")
        assert all(getattr(probe, f) == getattr(shape, f) for f in same), shape.name


def test_a_shapes_head_costs_come_from_its_probe(tmp_path: Path) -> None:
    shape = SHAPES["Qwen2.5-Coder-1.5B"].tiny()
    path, probe = tmp_path / "tiny.gguf", tmp_path / "tiny-head.gguf"
    write_gguf(shape, path)
    write_gguf(shape.head_probe(), probe)
    r = shapes.measure_model(
        str(path), threads=1, prompt_tokens=32, decode_tokens=2, head_probe=str(probe)
    )
    assert r["head_measured_on"] == "one layer"
    assert list(r["no_head_ms"]) == [str(n) for n in HEAD_ROWS]
    assert set(r["head_ms"]) == {r["head"], "llama.cpp"} and r["prompt_tps"] > 0

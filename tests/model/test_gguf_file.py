"""The one GGUF header reader: what it reads, checked against the ``gguf`` package's own
reader, and what it refuses (damaged, oversized, not a regular file) with a clear error."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

from structspec.model.gguf_file import GGUFError, is_gguf, read_header, read_magic

gguf = pytest.importorskip("gguf")


def _write(path: Path, endian: object = None) -> Path:
    kwargs = {"endianess": endian} if endian is not None else {}
    w = gguf.GGUFWriter(str(path), "llama", **kwargs)
    w.add_name("Tiny")
    w.add_context_length(4096)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_token_list(["a", "b", "<|fim_prefix|>", "é"])
    w.add_token_scores([0.0, -1.0, -2.0, -3.0])
    w.add_array("general.tags", [["nested"], ["arrays"]])
    w.add_chat_template("{{ messages }}")
    w.add_tensor("token_embd.weight", np.arange(64, dtype=np.float32).reshape(8, 8))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_reads_metadata_tensors_and_the_data_start_as_the_gguf_package_does(tmp_path):
    path = _write(tmp_path / "tiny.gguf")
    header = read_header(path, arrays=("tokenizer.ggml.tokens",))
    assert header.version == 3
    assert header.strings["general.architecture"] == "llama"
    assert header.strings["general.name"] == "Tiny"
    assert header.strings["tokenizer.chat_template"] == "{{ messages }}"
    assert header.numbers["llama.context_length"] == 4096
    assert isinstance(header.numbers["llama.context_length"], int)  # not a float
    assert header.numbers["llama.rope.freq_base"] == 10000.0
    assert header.numbers["tokenizer.ggml.add_bos_token"] is True
    tokens = header.arrays["tokenizer.ggml.tokens"]
    assert (tokens.count, tokens.items) == (4, ["a", "b", "<|fim_prefix|>", "é"])
    scores = header.arrays["tokenizer.ggml.scores"]
    assert (scores.count, scores.items) == (4, None)  # not asked for: skipped
    assert header.arrays["general.tags"].count == 2
    theirs = gguf.GGUFReader(str(path), "r")
    assert header.data_start == theirs.data_offset
    for t in theirs.tensors:
        mine = header.tensors[t.name]
        assert mine.type == int(t.tensor_type)
        assert mine.shape == tuple(int(d) for d in t.shape)
        assert header.data_start + mine.offset == t.data_offset


def test_a_big_endian_file_reads_the_same(tmp_path):
    little = read_header(_write(tmp_path / "le.gguf"))
    big = read_header(_write(tmp_path / "be.gguf", gguf.GGUFEndian.BIG))
    assert (big.strings, big.numbers, big.tensors) == (
        little.strings,
        little.numbers,
        little.tensors,
    )


def test_every_truncation_of_the_header_is_a_clear_error(tmp_path):
    whole = _write(tmp_path / "tiny.gguf").read_bytes()
    end = read_header(tmp_path / "tiny.gguf").data_start
    cut = tmp_path / "cut.gguf"
    for n in range(4, end - 32):  # the padding before the data is not needed
        cut.write_bytes(whole[:n])
        with pytest.raises(GGUFError, match="cut.gguf"):
            read_header(cut)


def _header(*fields: bytes, version: int = 3, n_tensors: int = 0, n_kv: int = 1) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(fields)


def _string(text: bytes, claimed: int | None = None) -> bytes:
    return struct.pack("<Q", len(text) if claimed is None else claimed) + text


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"PK\x03\x04 a zip", "not a GGUF file"),
        (_header(version=1), "version 1 is not supported"),
        (_header(_string(b"k", claimed=1 << 40)), "a string of 1099511627776 bytes"),
        (_header(_string(b"k"), struct.pack("<I", 8), _string(b"\xff\xfe")), "not UTF-8"),
        (_header(_string(b"k"), struct.pack("<I", 99)), "unknown value type 99"),
        (_header(n_kv=1 << 60), "more than the file holds"),
        (_header(n_kv=0, n_tensors=1 << 40), "more than the file holds"),
        (_header(_string(b"k"), struct.pack("<IIQ", 9, 8, 1 << 50)), "more than the file holds"),
        (
            _header(_string(b"t"), struct.pack("<I", 1 << 31), n_kv=0, n_tensors=1),
            "a tensor of 2147483648 dimensions",
        ),
        (  # arrays of arrays, deeper than Python's recursion would go
            _header(_string(b"k"), struct.pack("<I", 9), struct.pack("<IQ", 9, 1) * 5000),
            "nested more than 16 deep",
        ),
        (
            _header(*[_string(b"t") + struct.pack("<IQIQ", 1, 32, 0, 0)] * 2, n_kv=0, n_tensors=2),
            "two tensors named 't'",
        ),
    ],
)
def test_damaged_headers_are_refused_without_reading_what_they_claim(tmp_path, data, reason):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data + b"\0" * 64)
    with pytest.raises(GGUFError, match=reason):
        read_header(path)


def test_only_regular_files_are_read_and_a_fifo_never_blocks(tmp_path):
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_header(fifo)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a blocking open would wait for a writer forever
    assert done and isinstance(done[0], GGUFError) and "not a regular file" in str(done[0])
    assert not is_gguf(fifo) and not is_gguf(tmp_path / "missing.gguf")
    with pytest.raises(FileNotFoundError):
        read_magic(tmp_path / "missing.gguf")
    assert is_gguf(_write(tmp_path / "tiny.gguf"))


@pytest.mark.parametrize("block", [8, 9, 23, 1 << 20])
def test_a_skipped_string_array_ends_where_a_read_one_does(tmp_path, monkeypatch, block):
    """Skipping reads the file a block at a time (a read and a seek per string cost 0.4 s
    per model load): strings across blocks' ends, longer than a block, and empty ones."""
    import random

    from structspec.model import gguf_file

    monkeypatch.setattr(gguf_file, "SKIP_BLOCK", block)
    rng = random.Random(block)
    tokens = [
        "".join(rng.choice("ab€😀") for _ in range(rng.choice([0, 1, 3, 40]))) for _ in range(500)
    ]
    w = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    w.add_token_list(tokens)
    w.add_array("general.tags", ["x" * 100, "", "y"])
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    skipped = read_header(tmp_path / "t.gguf")
    read = read_header(tmp_path / "t.gguf", arrays=("tokenizer.ggml.tokens", "general.tags"))
    assert read.arrays["tokenizer.ggml.tokens"].items == tokens
    assert skipped.arrays["tokenizer.ggml.tokens"].count == len(tokens)
    assert (skipped.table_start, skipped.data_start) == (read.table_start, read.data_start)
    assert skipped.tensors == read.tensors


def test_a_skipped_string_past_the_files_end_is_damage(tmp_path):
    data = bytearray(_write(tmp_path / "tiny.gguf").read_bytes())
    at = data.index(b"<|fim_prefix|>") - 8  # that token's length
    for length in (len(data), 2**63 + 5):
        data[at : at + 8] = struct.pack("<Q", length)
        (tmp_path / "bad.gguf").write_bytes(bytes(data))
        with pytest.raises(GGUFError, match="ends early"):
            read_header(tmp_path / "bad.gguf")

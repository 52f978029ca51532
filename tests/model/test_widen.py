"""Q5_0 weights widened to Q8_0 (``model/widen.py``): the same weights, the copy kept safely.

The conversion is checked against the ``gguf`` package's own dequantization of
both types; a tiny generated GGUF with Q5_0 layers gives the same logits from
its widened copy; and every way the copy can fail (a full disk, a write error,
a damaged or unloadable copy, a file without Q5_0) loads the file as it is.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.fim_gguf import write_tiny_fim_gguf

from structspec.model import widen
from structspec.model.gguf_file import read_header
from structspec.model.widen import Q5_0, Q8_0, forget, widen_blocks, widened_weights

gguf = pytest.importorskip("gguf")
T = gguf.GGMLQuantizationType


def _tiny(path: Path, layers: str = "q5_0", seed: int = 0) -> Path:
    write_tiny_fim_gguf(path, "qwen", layers=layers, seed=seed)
    return path


def _random_q5_0(rng: np.random.Generator, blocks: int) -> np.ndarray:
    """Any bytes with a finite fp16 scale are a valid Q5_0 block."""
    raw = rng.integers(0, 256, size=(blocks, widen.Q5_0_BYTES), dtype=np.uint8)
    d = (rng.standard_normal(blocks) * 0.01).astype(np.float16)
    raw[:, :2] = d.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1)


@pytest.mark.parametrize("blocks", [1, 3, 1000])
def test_widened_blocks_hold_the_same_weights(blocks):
    raw = _random_q5_0(np.random.default_rng(blocks), blocks)
    wide = widen_blocks(raw)
    assert wide.size == blocks * widen.Q8_0_BYTES
    before = gguf.quants.dequantize(raw.reshape(1, -1), T.Q5_0)
    after = gguf.quants.dequantize(wide.reshape(1, -1), T.Q8_0)
    np.testing.assert_array_equal(before, after)  # exact: the same numbers


def test_the_copy_widens_q5_0_keeps_everything_else_and_is_written_once(tmp_path):
    source = _tiny(tmp_path / "tiny.gguf")
    said: list[str] = []
    copy = widened_weights(source, folder=tmp_path / "w", announce=said.append)
    assert copy != source and copy.parent == tmp_path / "w"
    assert len(said) == 1 and "Q5_0" in said[0]
    old, new = gguf.GGUFReader(str(source)), gguf.GGUFReader(str(copy))
    assert [f for f in old.fields if not f.startswith("GGUF.")] == [
        f for f in new.fields if not f.startswith("GGUF.")
    ]
    assert bytes(old.fields["tokenizer.ggml.tokens"].parts[-1]) == bytes(
        new.fields["tokenizer.ggml.tokens"].parts[-1]
    )
    widened = 0
    for a, b in zip(old.tensors, new.tensors, strict=True):
        assert a.name == b.name and list(a.shape) == list(b.shape)
        if a.tensor_type == T.Q5_0:
            widened += 1
            assert b.tensor_type == T.Q8_0
            np.testing.assert_array_equal(
                gguf.quants.dequantize(a.data, T.Q5_0), gguf.quants.dequantize(b.data, T.Q8_0)
            )
        else:
            assert b.tensor_type == a.tensor_type
            np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))
    assert widened == 7  # q, k, v, output, gate, up, down of the one layer
    assert Q5_0 not in {t.type for t in read_header(copy).tensors.values()}
    assert Q8_0 in {t.type for t in read_header(copy).tensors.values()}
    # again: the same copy, not written again (a new copy would be a new file)
    inode = copy.stat().st_ino
    assert widened_weights(source, folder=tmp_path / "w", announce=said.append) == copy
    assert len(said) == 1 and copy.stat().st_ino == inode


def test_the_widened_copy_gives_the_same_logits(tmp_path, monkeypatch):
    from structspec.model.llama import LlamaModel

    source = _tiny(tmp_path / "tiny.gguf")
    monkeypatch.setattr(widen, "kept_cache_folder", lambda _name: tmp_path / "w")
    plain = LlamaModel.load(source, n_ctx=256, threads=2, n_batch=64)
    wide = LlamaModel.load(source, n_ctx=256, threads=2, n_batch=64, widen=True)
    try:
        assert plain.weights == source and wide.weights != source
        assert wide.path == source and wide.name == "tiny.gguf"
        assert plain.identity() != wide.identity()  # a saved state names its weights
        tokens = plain.tokenize("def add(a, b):\n    return a + b\n")[:10]
        plain.prefill(tokens[:4])
        wide.prefill(tokens[:4])
        expected = np.array(plain.verify(tokens[4:]).logits[:])
        got = np.array(wide.verify(tokens[4:]).logits[:])
        assert float(np.abs(expected).max()) > 0.1  # logits that a wrong weight would move
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * scale)
        # the same choice wherever the top two are farther apart than the kernels' noise
        top2 = np.sort(expected, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 2e-4 * scale
        assert clear.any()
        np.testing.assert_array_equal(got.argmax(axis=1)[clear], expected.argmax(axis=1)[clear])
    finally:
        plain.close()
        wide.close()


def test_a_file_without_q5_0_loads_as_it_is_and_is_not_read_again(tmp_path, monkeypatch):
    source = _tiny(tmp_path / "f32.gguf", layers="f32")
    folder = tmp_path / "w"
    assert widened_weights(source, folder=folder) == source
    assert not list(folder.glob("*.gguf"))

    def no_read(*_a, **_k):
        raise AssertionError("the header was read again")

    monkeypatch.setattr(widen, "read_header", no_read)
    assert widened_weights(source, folder=folder) == source


def test_a_nearly_full_disk_or_a_failed_write_loads_the_file_as_it_is(tmp_path, monkeypatch):
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"

    class Usage:
        free = 10 << 20

    monkeypatch.setattr(widen.shutil, "disk_usage", lambda _p: Usage())
    assert widened_weights(source, folder=folder) == source
    monkeypatch.undo()

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(widen, "_write_copy", full)
    assert widened_weights(source, folder=folder) == source
    assert not list(folder.iterdir())  # no partial copy, no record: tried again next time
    monkeypatch.undo()
    assert widened_weights(source, folder=folder) != source


def test_a_damaged_copy_is_written_again(tmp_path):
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    copy = widened_weights(source, folder=folder)
    good = copy.read_bytes()
    copy.write_bytes(good[: len(good) // 2])  # truncated
    assert widened_weights(source, folder=folder) == copy
    assert copy.read_bytes() == good
    (folder / f"{copy.stem}.json").write_text("{not json")
    assert widened_weights(source, folder=folder) == copy
    assert copy.read_bytes() == good


def test_a_copy_llama_cpp_cannot_load_is_forgotten_and_the_file_loaded(tmp_path, monkeypatch):
    from structspec.model.llama import LlamaModel

    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    monkeypatch.setattr(widen, "kept_cache_folder", lambda _name: folder)
    copy = widened_weights(source)
    copy.write_bytes(b"\0" * copy.stat().st_size)  # the recorded size, but not a GGUF
    model = LlamaModel.load(source, n_ctx=256, threads=1, n_batch=64, widen=True)
    try:
        assert model.weights == source
        assert model.tokenize("def")  # loaded and working
    finally:
        model.close()
    assert not copy.exists()
    assert json.loads(copy.with_suffix(".json").read_text())["copy"] is None
    assert widened_weights(source) == source  # not written again for this file
    forget(copy)  # forgetting twice is harmless


def test_copies_of_files_gone_and_beyond_the_kept_ones_are_removed(tmp_path):
    folder = tmp_path / "w"
    sources = [_tiny(tmp_path / f"m{i}.gguf", seed=i) for i in range(widen.KEPT + 1)]
    copies = []
    for source in sources:
        copies.append(widened_weights(source, folder=folder))
        os.utime(copies[-1], (1e9 + len(copies), 1e9 + len(copies)))  # loaded in this order
    assert not copies[0].exists()  # the least recently loaded beyond KEPT
    assert all(c.exists() for c in copies[1:])
    sources[1].unlink()
    stale = folder / "x.gguf.123.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (1e9, 1e9))
    widened_weights(_tiny(tmp_path / "m9.gguf", seed=9), folder=folder)
    assert not copies[1].exists() and not stale.exists()


def test_a_stale_temporary_copy_goes_when_a_copy_is_reused(tmp_path):
    """A writer killed before its rename leaves a model-sized file: removed at the next
    load even when no new copy is written (only a new copy pruned the folder)."""
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    copy = widened_weights(source, folder=folder)
    stale = folder / f"{copy.name}.999.tmp"
    stale.write_bytes(b"half a model")
    os.utime(stale, (1e9, 1e9))
    young = folder / f"{copy.name}.998.tmp"  # another process writing now: left alone
    young.write_bytes(b"in progress")
    assert widened_weights(source, folder=folder) == copy
    assert not stale.exists() and young.exists()


def test_another_versions_copy_is_kept_not_taken_for_a_stale_one(tmp_path, monkeypatch):
    """Two installations of structspec share the cache folder: each keys its copy by its
    own VERSION, and neither removes the other's copy of a file that has not changed."""
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    monkeypatch.setattr(widen, "VERSION", 7)
    theirs = widened_weights(source, folder=folder)
    monkeypatch.setattr(widen, "VERSION", 1)
    said: list[str] = []
    ours = widened_weights(source, folder=folder, announce=said.append)
    assert ours != theirs and said  # not the other version's copy: written
    assert theirs.exists() and theirs.with_suffix(".json").exists()
    said.clear()
    monkeypatch.setattr(widen, "VERSION", 7)
    assert widened_weights(source, folder=folder, announce=said.append) == theirs
    assert not said  # reused, not written again
    record = json.loads(theirs.with_suffix(".json").read_text())
    record["version"] = True  # damaged: taken for no version
    theirs.with_suffix(".json").write_text(json.dumps(record))
    widened_weights(_tiny(tmp_path / "other.gguf", seed=3), folder=folder)  # prunes
    assert not theirs.exists() and ours.exists()


def test_a_copy_written_again_by_another_process_during_a_failed_load_is_not_forgotten(
    tmp_path, monkeypatch
):
    """The copy was pruned by one process before llama.cpp opened it (the load fails) and
    written again by another before the failure was seen: that new copy is good."""
    import llama_cpp

    from structspec.model import llama

    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    monkeypatch.setattr(widen, "kept_cache_folder", lambda _name: folder)
    real_load = llama_cpp.llama_model_load_from_file

    def pruned_then_written_again(path: bytes, params: object) -> object:
        if path.decode().startswith(str(folder)):
            Path(path.decode()).unlink()  # another process's pruning
            model = real_load(path, params)  # fails: the file is gone
            widened_weights(source)  # another process writes it again
            return model
        return real_load(path, params)

    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", pruned_then_written_again)
    model = llama.LlamaModel.load(source, n_ctx=256, threads=1, n_batch=64, widen=True)
    model.close()
    monkeypatch.setattr(llama_cpp, "llama_model_load_from_file", real_load)
    copy = widened_weights(source)
    assert copy != source and copy.exists()
    assert json.loads(copy.with_suffix(".json").read_text())["copy"] == copy.name


def test_the_setting_is_on_by_default_and_reloads_the_model():
    from structspec.completion.host import model_key
    from structspec.config import Settings

    assert Settings().widen_weights
    assert model_key(Settings()) != model_key(Settings(widen_weights=False))


def test_a_record_cannot_name_another_file(tmp_path):
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    copy = widened_weights(source, folder=folder)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    record = copy.with_suffix(".json")
    entry = json.loads(record.read_text())
    record.write_text(json.dumps({**entry, "copy": "../victim.txt", "bytes": 7}))
    assert widened_weights(source, folder=folder) == copy  # its own copy, written again
    (folder / "0123456789abcdef.json").write_text(json.dumps({"source": str(victim)}))
    copy.unlink()
    widened_weights(source, folder=folder)  # writes the copy again, then prunes
    assert victim.read_text() == "keep me"
    assert not (folder / "0123456789abcdef.json").exists()  # damaged: removed


Entry = tuple[str, tuple[int, ...], int, int]  # name, shape, type, offset


def _with_table(source: Path, dest: Path, edit: Callable[[list[Entry]], list[Entry]]) -> Path:
    """``source`` with its tensor table edited (the metadata and the data as they are)."""
    head = read_header(source)
    entries = [(n, tuple(t.shape), t.type, t.offset) for n, t in head.tensors.items()]
    table = bytearray()
    for name, shape, kind, offset in edit(entries):
        table += struct.pack("<Q", len(name)) + name.encode()
        table += struct.pack(f"<I{len(shape)}Q", len(shape), *shape) + struct.pack(
            "<IQ", kind, offset
        )
    raw = source.read_bytes()
    out = raw[: head.table_start] + bytes(table)
    out += b"\0" * (-len(out) % head.alignment)
    dest.write_bytes(out + raw[head.data_start :])
    return dest


def _edit_first_q5_0(**change: object) -> Callable[[list[Entry]], list[Entry]]:
    def edit(entries: list[Entry]) -> list[Entry]:
        i = next(i for i, e in enumerate(entries) if e[2] == Q5_0)
        name, shape, kind, offset = entries[i]
        entries[i] = (name, change.get("shape", shape), kind, change.get("offset", offset))  # type: ignore[assignment]
        return entries

    return edit


def _swap_offsets(entries: list[Entry]) -> list[Entry]:
    (*first, a), (*second, b) = entries[1], entries[2]
    entries[1], entries[2] = (*first, b), (*second, a)  # type: ignore[assignment]
    return entries


@pytest.mark.parametrize(
    "edit",
    [
        _edit_first_q5_0(shape=()),  # no dimensions
        _edit_first_q5_0(shape=(32, 1 << 58)),  # a size past any 64-bit count
        _edit_first_q5_0(shape=(1 << 32, 1 << 32)),  # a 64-bit product that wraps to 0
        _edit_first_q5_0(shape=(16, 2)),  # rows that are not whole blocks
        _edit_first_q5_0(offset=3),  # not aligned: inside the tensor before
        _swap_offsets,  # the data not in the table's order
        lambda entries: [entries[0], *entries],  # two tensors of one name
    ],
)
def test_a_layout_llama_cpp_would_refuse_is_not_widened(tmp_path, edit):
    # A copy moves each tensor's bytes into a layout llama.cpp loads: of a damaged
    # table that would be weights that are not the file's. It loads as it is.
    source = _with_table(_tiny(tmp_path / "tiny.gguf"), tmp_path / "bad.gguf", edit)
    assert widened_weights(source, folder=tmp_path / "w") == source
    assert not list((tmp_path / "w").glob("*.gguf"))


def test_the_table_rewritten_as_it_was_is_widened(tmp_path):
    source = _with_table(_tiny(tmp_path / "tiny.gguf"), tmp_path / "same.gguf", lambda e: e)
    assert widened_weights(source, folder=tmp_path / "w") != source  # the helper is faithful


def test_a_file_rewritten_while_it_is_copied_loads_as_it_is(tmp_path, monkeypatch):
    source = _tiny(tmp_path / "tiny.gguf")
    header = widen.read_header

    def read_then_rewrite(path: Path) -> object:
        read = header(path)
        os.utime(path, ns=(1, 1))  # another process replaced it meanwhile
        return read

    monkeypatch.setattr(widen, "read_header", read_then_rewrite)
    folder = tmp_path / "w"
    assert widened_weights(source, folder=folder) == source
    assert not list(folder.glob("*.gguf"))


def test_a_record_nested_too_deep_to_parse_is_written_again(tmp_path):
    source = _tiny(tmp_path / "tiny.gguf")
    folder = tmp_path / "w"
    copy = widened_weights(source, folder=folder)
    copy.with_suffix(".json").write_text("[" * 60_000 + "]" * 60_000)
    assert widened_weights(source, folder=folder) == copy
    assert json.loads(copy.with_suffix(".json").read_text())["copy"] == copy.name

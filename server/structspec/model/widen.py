"""Q5_0 weights widened to Q8_0: the same numbers, a faster prompt evaluation.

A GGUF quantized "Q4_K_M" stores a matrix whose rows are not a multiple of 256
values (Gemma 3 270M's 640, Qwen2.5-Coder-0.5B's 896) in Q5_0: K-quants need
256-value super-blocks. llama.cpp's CPU matrix multiply is slower on Q5_0
than on Q8_0 (it unpacks the fifth bit of every value in every pass), and
prompt evaluation is where a first suggestion waits.

The widening is exact. A Q5_0 block holds 32 weights as an fp16 scale ``d``
and 5-bit codes ``q`` in 0..31, each weight ``d * (q - 16)``; a Q8_0 block
holds an fp16 scale and 32 int8 codes, each weight ``scale * code``. With
``scale = d`` and ``code = q - 16`` (in -16..15) every weight is the same
number, and llama.cpp multiplies both types by the activations quantized to
Q8_0 with the same integer dot product per block, scaled by the same two fp16
scales: on the default model the logits of the widened file were bit for bit
the original's at every position of a 600-token prompt
(``docs/MEASUREMENTS.md`` §16, where the speed is measured too).

``widened_weights(source)`` returns the file to load: a widened copy of
``source`` in structspec's cache folder (``widened/``), written once per
model file (keyed by its path, size and modification time) and kept beside a
small record of it, or ``source`` itself when it holds no Q5_0 matrix, when
the copy cannot be written (a read-only or nearly full disk: a copy must
leave ``MIN_FREE_AFTER`` free) or when llama.cpp could not load it before
(``forget``). A copy is written under a temporary name and renamed, so a
crash never leaves a partial copy under the final name; one whose size is not
the recorded one is removed and written again. Copies of model files that
are gone are removed, and at most ``KEPT`` copies stay (the least recently
loaded go first).

The copy keeps the original's metadata bytes as they are; only the tensor
table (types, offsets) and the Q5_0 data change.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from structspec.files import (
    file_stamp,
    kept_cache_folder,
    read_json,
    remove_stale_temporaries,
    write_atomic,
)
from structspec.model.gguf_file import BLOCKS, GGUFError, GGUFHeader, read_header

log = logging.getLogger(__name__)

Announce = Callable[[str], None]

#: ggml type ids.
Q5_0, Q8_0 = 6, 8
#: Weights per block (both types), and bytes per block of each (fp16 scale first).
BLOCK, Q5_0_BYTES = BLOCKS[Q5_0]
Q8_0_BYTES = BLOCKS[Q8_0][1]
#: The cache folder's subfolder of the widened copies.
FOLDER = "widened"
#: Copies kept at most (the least recently loaded are removed first).
KEPT = 2
#: Free bytes a copy must leave on its disk.
MIN_FREE_AFTER = 1 << 30
#: Blocks converted at a time (bounded memory: 2.2 MB in, 3.4 MB out).
CHUNK_BLOCKS = 1 << 16
#: Bytes copied at a time for the tensors kept as they are.
COPY_BYTES = 1 << 24
#: Changes when the copy's layout does: a copy is keyed by its version, so one of
#: another version is never loaded (records name theirs; those without one are 1).
VERSION = 1


def widen_blocks(raw: np.ndarray) -> np.ndarray:
    """Q8_0 bytes holding the same weights as the Q5_0 bytes ``raw`` (whole blocks).

    Q5_0 block (22 bytes): ``d`` (fp16), ``qh`` (32 high bits, bit ``j`` for
    weight ``j``), ``qs`` (16 bytes: weight ``j`` in the low nibble of byte
    ``j``, weight ``j + 16`` in the high nibble). Weight ``j`` is
    ``d * ((nibble | bit << 4) - 16)``. Q8_0 block (34 bytes): the same ``d``,
    then the 32 codes ``q - 16`` as int8.
    """
    blocks = raw.reshape(-1, Q5_0_BYTES)
    qh = blocks[:, 2:6].copy().view("<u4").reshape(-1, 1)
    qs = blocks[:, 6:]
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int16)
    high = ((qh >> np.arange(BLOCK, dtype=np.uint32)) & 1).astype(np.int16)
    out = np.empty((len(blocks), Q8_0_BYTES), dtype=np.uint8)
    out[:, :2] = blocks[:, :2]
    out[:, 2:] = ((low | high << 4) - 16).astype(np.int8).view(np.uint8)
    return out.reshape(-1)


def widened_weights(
    source: Path, *, folder: Path | None = None, announce: Announce | None = None
) -> Path:
    """The file to load for the GGUF ``source``: its widened copy, else ``source``.

    Writes the copy on first use (seconds: the whole file is read and written
    once) and says so through ``announce``. Never raises for the copy's sake:
    whatever goes wrong, ``source`` is loaded as it is.
    """
    folder = kept_cache_folder(FOLDER) if folder is None else folder
    try:
        key = _key(source)
    except OSError:
        return source  # llama.cpp reports the file's own problem
    record = _read_record(folder / f"{key}.json", key)
    if record is not None:
        if record.get("copy") is None:
            return source  # nothing to widen, or llama.cpp refused the copy
        path = folder / f"{key}.gguf"  # the record names no other file
        with contextlib.suppress(OSError):
            if path.stat().st_size == record.get("bytes"):
                os.utime(path)  # recently loaded: kept longest
                remove_stale_temporaries(folder, "*.tmp")  # else only a new copy prunes
                return path
        log.info("widened copy %s is missing or damaged; writing it again", path.name)
    return _widen(source, folder, key, announce)


def forget(copy: Path) -> None:
    """llama.cpp could not load ``copy``: remove it, and record that its model loads as it is."""
    record = copy.with_suffix(".json")
    entry = _read_record(record)
    kept = False
    if entry is not None:
        entry.update(copy=None, reason="llama.cpp could not load the widened copy")
        with contextlib.suppress(OSError):
            _write_json(record, entry)
            kept = True
    if not kept:  # a record that cannot say so would name a copy that is gone
        with contextlib.suppress(OSError):
            record.unlink()
    with contextlib.suppress(OSError):
        copy.unlink()


# -- the copy ---------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    """One tensor of the copy: where its data is read and written, and whether it widens."""

    name: str
    read_at: int  # absolute, in the source
    read_bytes: int  # what is read: the Q5_0 blocks, or the whole span as it is
    write_bytes: int
    widen: bool


def _key(source: Path, version: int | None = None) -> str:
    """The copy's name for ``source`` as it is now, by ``version`` (default: this one's)."""
    text = json.dumps([*file_stamp(source), VERSION if version is None else version])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _current(source: Path, key: str, version: int | None = None) -> bool:
    """Whether ``source`` is still the file whose copy ``key`` names (not gone, not changed).

    ``version``: the ``VERSION`` that wrote the copy's record. Another version of
    structspec may share the folder (two installations): its copy of a file that
    has not changed is current too, not a stale one to remove.
    """
    try:
        return _key(source, version) == key
    except OSError:
        return False


def _read_record(path: Path, key: str | None = None) -> dict[str, object] | None:
    """The record at ``path`` (of ``key``, when given); ``None`` when damaged or another's.

    Read as untrusted (at most 64 KiB, a regular file): it only ever says
    whether the copy ``<key>.gguf`` beside it exists, never names a file.
    """
    try:
        record = read_json(path, 1 << 16)
    except (OSError, ValueError):  # FileLimitError and JSONError are ValueErrors
        return None
    if not isinstance(record, dict) or record.get("key") != (key or path.stem):
        return None
    return record


def _write_json(path: Path, entry: dict[str, object]) -> None:
    write_atomic(path, json.dumps(entry).encode())


def _plan(source: Path, header: GGUFHeader, size: int) -> list[_Piece] | None:
    """The tensors in data order and what each becomes; ``None``: nothing to widen.

    A tensor's span runs to the next tensor's offset (or the file's end), so
    a tensor kept as it is is copied with its padding, whatever its type.
    Raises ``GGUFError`` for a layout llama.cpp would refuse (the tensors'
    data not one after the other from the data's start, in the table's order,
    each at an aligned offset; a Q5_0 tensor not whole blocks, or not filling
    its span but for padding): a copy of such a file would move its bytes
    into a layout llama.cpp loads, weights that are not the file's.
    """
    if not header.little_endian or not any(t.type == Q5_0 for t in header.tensors.values()):
        return None
    table = list(header.tensors.items())
    ordered = sorted(table, key=lambda item: item[1].offset)
    if ordered != table or (table and table[0][1].offset != 0):
        raise GGUFError(f"the tensors' data is not in the table's order: {source}")
    ends = [info.offset for _, info in ordered[1:]] + [size - header.data_start]
    pieces = []
    for i, ((name, info), end) in enumerate(zip(ordered, ends, strict=True)):
        span = end - info.offset
        if span < 0 or info.offset % header.alignment:
            raise GGUFError(f"tensor {name} is not where the layout puts it: {source}")
        widen = info.type == Q5_0
        if widen:
            values = math.prod(info.shape)  # Python's integers: a damaged shape cannot wrap
            read = values // BLOCK * Q5_0_BYTES
            last = i == len(ordered) - 1  # what follows it is the file's end, not padding
            whole = bool(info.shape) and info.shape[0] % BLOCK == 0 and values > 0
            if not whole or read > span or (not last and span - read >= header.alignment):
                raise GGUFError(
                    f"tensor {name} is not whole Q5_0 blocks filling its span: {source}"
                )
            write = values // BLOCK * Q8_0_BYTES
        else:
            read = write = span
        at = header.data_start + info.offset
        pieces.append(_Piece(name, at, read, write, widen))
    return pieces


def _aligned(n: int, align: int) -> int:
    return -(-n // align) * align


def _table(header: GGUFHeader, offsets: dict[str, int]) -> bytes:
    """The copy's tensor table: the original's entries with Q8_0 for Q5_0 and new offsets."""
    out = bytearray()
    for name, info in header.tensors.items():  # the original's order
        raw = name.encode()
        out += struct.pack("<Q", len(raw)) + raw
        out += struct.pack(f"<I{len(info.shape)}Q", len(info.shape), *info.shape)
        out += struct.pack("<IQ", Q8_0 if info.type == Q5_0 else info.type, offsets[name])
    return bytes(out)


def _write_copy(src: BinaryIO, dst: BinaryIO, header: GGUFHeader, pieces: list[_Piece]) -> int:
    """Write the widened GGUF to ``dst``; its size in bytes."""
    align = header.alignment
    offsets, at = {}, 0
    for piece in pieces:
        offsets[piece.name] = at
        at = _aligned(at + piece.write_bytes, align)
    src.seek(0)
    dst.write(src.read(header.table_start))  # magic, version, counts, metadata: as they are
    dst.write(_table(header, offsets))
    data_start = _aligned(dst.tell(), align)
    dst.write(b"\0" * (data_start - dst.tell()))
    for piece in pieces:
        dst.write(b"\0" * (data_start + offsets[piece.name] - dst.tell()))
        src.seek(piece.read_at)
        left = piece.read_bytes
        while left:
            step = min(left, CHUNK_BLOCKS * Q5_0_BYTES if piece.widen else COPY_BYTES)
            data = src.read(step)
            if len(data) < step:
                raise GGUFError("the model file ends early")
            if piece.widen:
                dst.write(widen_blocks(np.frombuffer(data, dtype=np.uint8)).tobytes())
            else:
                dst.write(data)
            left -= step
    return dst.tell()


def _widen(source: Path, folder: Path, key: str, announce: Announce | None) -> Path:
    """Write the widened copy of ``source`` (or its record: nothing to widen); what to load."""
    record: dict[str, object] = {
        "key": key,
        "source": str(source.resolve()),
        "copy": None,
        "version": VERSION,
    }
    try:
        header = read_header(source)
        size = source.stat().st_size
        pieces = _plan(source, header, size)
    except (OSError, GGUFError) as exc:
        log.info("not widening %s: %s", source.name, exc)
        return source
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if pieces is None:
            _write_json(folder / f"{key}.json", {**record, "reason": "no Q5_0 tensors"})
            return source
        grows = sum(p.write_bytes - p.read_bytes for p in pieces)
        need = size + grows + len(pieces) * header.alignment
        free = shutil.disk_usage(folder).free
        if free - need < MIN_FREE_AFTER:
            log.info("not widening %s: %d bytes free, the copy needs %d", source.name, free, need)
            return source
        copy = folder / f"{key}.gguf"
        tmp = folder / f"{key}.gguf.{os.getpid()}.tmp"
        started = time.perf_counter()
        try:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                written = _write_copy(src, dst, header, pieces)
                dst.flush()
                os.fsync(dst.fileno())
            if not _current(source, key):  # rewritten while it was read: a mix of two files
                raise GGUFError("the model file changed while it was copied")
            os.replace(tmp, copy)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        widened = sum(p.widen for p in pieces)
        _write_json(folder / f"{key}.json", {**record, "copy": copy.name, "bytes": written})
    except (OSError, GGUFError) as exc:  # a full or read-only disk, a file changed meanwhile
        log.warning("could not widen %s (%s): loading it as it is", source.name, exc)
        return source
    if announce is not None:
        announce(
            f"structspec: {widened} Q5_0 tensors of {source.name} widened to Q8_0 (the same "
            f"weights, a faster prompt evaluation) in {time.perf_counter() - started:.1f} s: "
            f"{copy} ({written >> 20} MiB; setting widen_weights)"
        )
    _prune(folder, keep=copy)
    return copy


def _prune(folder: Path, keep: Path) -> None:
    """Remove copies of model files that are gone or changed, crashed writers' files, and
    all but the ``KEPT`` copies loaded last."""
    copies: list[tuple[float, Path]] = []
    for record_path in folder.glob("*.json"):
        with contextlib.suppress(OSError, ValueError, TypeError):
            path = record_path.with_suffix(".gguf")
            record = _read_record(record_path)
            source = record.get("source") if record is not None else None
            version = record.get("version", 1) if record is not None else None
            current = (
                isinstance(source, str)
                and type(version) is int  # not a bool, not damaged
                and _current(Path(source), record_path.stem, version)
            )
            if not current:  # damaged, or its model file is gone or changed
                path.unlink(missing_ok=True)
                record_path.unlink()
            elif path.exists():
                copies.append((path.stat().st_mtime, path))
    copies.sort(reverse=True)
    for _, path in copies[KEPT:]:
        if path != keep:
            with contextlib.suppress(OSError):
                path.unlink()
                path.with_suffix(".json").unlink()
    remove_stale_temporaries(folder, "*.tmp")  # a killed writer's: a model's size each

"""GGUF files as structspec reads them itself: the magic, the metadata, the tensor table.

The one GGUF reader of the package. ``check_gguf_file`` (``model/paths.py``)
reads the magic of every model path before llama.cpp sees it (``run``, the
servers, ``mine``); ``read_header`` gives structspec's output head
(``model/head.py``) the storage of the output matrix, the widened copy
(``model/widen.py``) the tensor table and where it starts, and ``structspec
detect`` the metadata it reports.

A GGUF can come from anywhere (a setting, a file found on disk), so every read
is bounded: only a regular file is opened, non-blocking (a FIFO would hang the
open or the read, ``/dev/zero`` never ends); every count and length is checked
against what the file still holds before anything is read, allocated or
skipped; a string over 16 MiB or a tensor of more than 4 dimensions is refused;
and any damage raises ``GGUFError`` (a ``ValueError``) naming the file.

Read directly rather than through the ``gguf`` package's ``GGUFReader``, which
maps the whole file and builds an object per element of every array (a
262,144-token vocabulary): seconds per file.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from structspec import files

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 had 32-bit counts; llama.cpp reads 2 and 3 too

#: Metadata value types with a fixed size, by type id; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip
_STRING, _ARRAY = 8, 9
MAX_STRING = 1 << 24  # a longer key or value is a damaged file, not one to allocate for
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
#: Bytes read at a time while skipping an array of strings.
SKIP_BLOCK = 1 << 20
MAX_ARRAY_DEPTH = 16  # arrays of arrays: real files nest one deep, Python recursion is finite


class GGUFError(ValueError):
    """A file that is not a GGUF structspec can read, with the reason and the path."""


#: ggml's storage of the common tensor types: type id -> (elements per block, bytes
#: per block) (``ggml/src/ggml.c``, ``type_traits``). The one table of them: the
#: head kernel's matrices, the widened copies' blocks, a file's expected size.
BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    30: (1, 2),  # BF16
}


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: ggml type id, shape (fastest dimension first), offset."""

    type: int
    shape: tuple[int, ...]
    offset: int  # from the start of the data section

    def nbytes(self) -> int | None:
        """Bytes of the tensor's data; ``None`` for a type not in ``BLOCKS``."""
        block = BLOCKS.get(self.type)
        if block is None:
            return None
        elements = 1
        for n in self.shape:
            elements *= n
        return -(-elements // block[0]) * block[1]


@dataclass(frozen=True)
class GGUFArray:
    """An array of metadata: its element type, its length and, where asked for, its items."""

    item_type: int
    count: int
    items: list[object] | None = None  # ``None``: skipped, not read


@dataclass
class GGUFHeader:
    """A GGUF's metadata (scalars and strings by key, arrays apart) and tensor table."""

    version: int = 0
    strings: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, int | float] = field(default_factory=dict)  # a bool is stored as one too
    arrays: dict[str, GGUFArray] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    table_start: int = 0  # where the tensor table starts (the metadata ends)
    data_start: int = 0  # where the data section starts, aligned as the file says
    alignment: int = 32  # of the data section and of every tensor's offset
    little_endian: bool = True


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading, which must be a regular file (``files.open_regular``).

    Raises ``OSError`` when it cannot be opened, ``GGUFError`` for anything
    but a regular file (a FIFO, socket or device would block or never end).
    """
    try:
        return files.open_regular(path)
    except files.FileLimitError as exc:
        raise GGUFError(str(exc)) from None


def read_magic(path: str | os.PathLike[str]) -> bytes:
    """The first 4 bytes of the regular file ``path`` (``OSError``, ``GGUFError`` as above)."""
    with open_regular(path) as fh:
        return fh.read(len(MAGIC))


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a readable regular file that starts with the GGUF magic."""
    try:
        return read_magic(path) == MAGIC
    except (OSError, GGUFError):
        return False


def read_header(path: str | os.PathLike[str], arrays: Collection[str] = ()) -> GGUFHeader:
    """The GGUF header of ``path``: metadata, tensor table and where the data starts.

    Arrays are skipped except those whose keys are in ``arrays`` (their items
    are read; an array of arrays is always skipped). Raises ``OSError`` when
    the file cannot be opened and ``GGUFError`` when it is not a GGUF this can
    read: another format, a version other than 2 or 3, or a damaged header.
    """
    with open_regular(path) as fh:
        reader = _Reader(fh, os.fstat(fh.fileno()).st_size, path)
        return reader.header(frozenset(arrays))


class _Reader:
    """The header walk over one open file, each read checked against the file's size."""

    def __init__(self, fh: BinaryIO, size: int, path: str | os.PathLike[str]) -> None:
        self.fh = fh
        self.size = size
        self.path = path
        self.order = "<"

    def fail(self, why: str) -> GGUFError:
        return GGUFError(f"damaged GGUF header ({why}): {self.path}")

    def left(self) -> int:
        return self.size - self.fh.tell()

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        fmt = self.order + fmt
        n = struct.calcsize(fmt)
        data = self.fh.read(n)
        if len(data) < n:
            raise self.fail("it ends early")
        return struct.unpack(fmt, data)

    def count(self, what: str, n: int, least_bytes: int) -> int:
        """``n`` items of at least ``least_bytes`` each, refused when the file cannot hold them."""
        if n * least_bytes > self.left():
            raise self.fail(f"{n} {what}, more than the file holds")
        return n

    def skip(self, n: int) -> None:
        if n > self.left():
            raise self.fail("it ends early")
        self.fh.seek(n, os.SEEK_CUR)

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` length-prefixed strings, reading the file a block at a time.

        A read and a seek per string (a vocabulary holds 150,000-260,000) took
        0.4 s of every model load; here each string costs one ``unpack_from``.
        """
        length = struct.Struct(self.order + "Q")
        base = self.fh.tell()  # the file offset of ``block[0]``
        block, at = b"", 0  # ``at``: the next string's length, in ``block``
        for _ in range(count):
            if at + 8 > len(block):
                base += at
                if base > self.size:
                    raise self.fail("it ends early")
                if at > len(block):  # a string longer than what was read: past it
                    self.fh.seek(base)
                    block = b""
                else:
                    block = block[at:]
                block += self.fh.read(SKIP_BLOCK)
                at = 0
                if len(block) < 8:
                    raise self.fail("it ends early")
            (n,) = length.unpack_from(block, at)
            at += 8 + n
        end = base + at
        if end > self.size:
            raise self.fail("it ends early")
        self.fh.seek(end)

    def string(self) -> str:
        (n,) = self.unpack("Q")
        if n > MAX_STRING:
            raise self.fail(f"a string of {n} bytes")
        data = self.fh.read(n)
        if len(data) < n:
            raise self.fail("it ends early")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a string that is not UTF-8") from None

    def header(self, keep: frozenset[str]) -> GGUFHeader:
        magic = self.fh.read(4)
        if magic != MAGIC:
            raise GGUFError(f"not a GGUF file: {self.path}")
        (version,) = self.unpack("I")
        if version & 0xFFFF == 0:  # written on a big-endian machine
            self.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
        if version not in VERSIONS:
            raise GGUFError(f"GGUF version {version} is not supported (2 or 3): {self.path}")
        n_tensors, n_kv = self.unpack("QQ")
        head = GGUFHeader(version=version, little_endian=self.order == "<")
        for _ in range(self.count("metadata entries", n_kv, 8 + 4)):
            key = self.string()
            (kind,) = self.unpack("I")
            if kind == _ARRAY:
                head.arrays[key] = self.array(read=key in keep)
                continue
            value = self.value(kind)
            if isinstance(value, str):
                head.strings[key] = value
            else:
                head.numbers[key] = value
        head.table_start = self.fh.tell()
        for _ in range(self.count("tensors", n_tensors, 8 + 4 + 4 + 8)):
            name = self.string()
            (n_dims,) = self.unpack("I")
            if n_dims > MAX_DIMS:
                raise self.fail(f"a tensor of {n_dims} dimensions")
            shape = self.unpack(f"{n_dims}Q")
            kind, offset = self.unpack("IQ")
            if name in head.tensors:
                raise self.fail(f"two tensors named {name[:80]!r}")
            head.tensors[name] = TensorInfo(kind, shape, offset)
        align = head.numbers.get("general.alignment", 32)
        head.alignment = align if isinstance(align, int) and align > 0 else 32
        head.data_start = -(-self.fh.tell() // head.alignment) * head.alignment
        return head

    def value(self, kind: int) -> str | int | float:
        """One scalar or string value of type ``kind``."""
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])[0]
        if kind == _STRING:
            return self.string()
        raise self.fail(f"unknown value type {kind}")

    def array(self, read: bool, depth: int = 1) -> GGUFArray:
        """An array's type and length, and its items when ``read`` (else skipped)."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"arrays nested more than {MAX_ARRAY_DEPTH} deep")
        item, count = self.unpack("IQ")
        if item in _SCALARS:
            width = struct.calcsize(_SCALARS[item])
            self.count("array items", count, width)
            if not read:
                self.skip(count * width)
                return GGUFArray(item, count)
            return GGUFArray(item, count, list(self.unpack(f"{count}{_SCALARS[item]}")))
        if item == _STRING:
            self.count("array items", count, 8)
            if read:
                return GGUFArray(item, count, [self.string() for _ in range(count)])
            self.skip_strings(count)
            return GGUFArray(item, count)
        if item == _ARRAY:
            for _ in range(self.count("array items", count, 4 + 8)):
                self.array(read=False, depth=depth + 1)
            return GGUFArray(item, count)
        raise self.fail(f"unknown array item type {item}")

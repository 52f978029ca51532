"""Evaluated prompt prefixes kept on disk, so a restart or a reopened file skips their prefill.

A prompt's evaluation is what the user waits for at a new place: seconds for a
window of a thousand tokens on two cores, and the editor's restart throws all
of it away. The KV state of an evaluated prefix is a few megabytes (about
18 KB a token on the default model) that read back in milliseconds, so the
model saves the state of a long prefill here and, at a later prefill whose
tokens start with a saved prefix, restores it instead of evaluating it.

A save writes megabytes (tens of milliseconds, more under load), so it never
happens inside a prefill a request waits on: the model saves what its KV
cache holds when its owner says the time is idle (``save_prefixes``, called
by the completion layer's worker after a request is answered and at
shutdown), its tokens and its state read together.

An entry is one file, ``<key>.kv``, named by the SHA-256 of the model's
identity and the prefix's tokens::

    magic  b"SSPREFX1"
    u32    length of the JSON header
    JSON   {"model": identity, "tokens": n, "size": payload bytes, "sha256": payload digest}
    u32[n] the tokens
    bytes  the payload (the model's own serialization of its KV state)

Rules, because the folder is outside structspec's control:

- Writes are atomic (a temporary file in the same folder, then a rename), so
  a crash or a full disk leaves no half entry; a failed write is skipped.
- Every read is bounded (an entry is at most ``max_bytes``; a regular file,
  never a link or a FIFO) and checked: a damaged entry (bad magic, header,
  tokens or digest) is removed and the prefix is evaluated instead. An entry
  named by this model's key whose header names another model is removed too;
  other models' entries are left alone (the size cap evicts them in turn).
- The folder is capped at ``max_bytes`` (least recently used entries go first:
  a hit renews the entry's modification time).
- Several processes share it (two editor windows, ``structspec serve``): each
  reads the folder's list again whenever it changed, so one's saves serve
  the other and one's evictions are not looked for.

A model with sliding-window attention layers (Gemma 3: 512 positions) saves
less than it holds once it holds more than ``window`` tokens: llama.cpp writes
those layers' cells of the last ``window`` positions only, the others being
masked for the sequence's next token. Read back, such a state is not the one
saved: cut back far, it leaves the next token's window without cells (on the
default model a document's state cut back to a cursor near its top wrote a
run of spaces instead of the line), and even continued at its end its next
token's logits were off by one or two (``docs/MEASUREMENTS.md`` §22).
So a cache of such a model (``window``) saves and serves only states of at
most ``window`` tokens (``serves``); the model cuts its longer ones back to
that many when it closes (``LlamaModel.save_prefixes``).

The cache is model-agnostic: a model hands it the tokens and the bytes of its
state (``LlamaModel``: llama.cpp's per-sequence state; the stand-in: nothing
beyond the tokens), and decides itself when to restore.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from structspec.files import FileLimitError, cache_home, open_regular, remove_stale_temporaries
from structspec.model.base import common_prefix_len

log = logging.getLogger(__name__)

MAGIC = b"SSPREFX1"
#: Default size cap of the prefix folder.
DEFAULT_MAX_BYTES = 1 << 30
#: A header longer than this is damage, not an entry.
_MAX_HEADER = 4096
#: A restore must spare the evaluation of at least this many tokens (a few
#: tokens evaluate about as fast as a state reads back).
RESTORE_MIN = 64
#: A model's cache is saved once it holds this many tokens beyond the longest
#: prefix it shares with a saved entry: each save writes the whole state, so
#: saves come only after evaluations long enough to be worth sparing. A cache
#: that no entry would serve (a new document: it shares fewer than
#: ``RESTORE_MIN`` tokens with each) is saved from ``RESTORE_MIN`` new tokens
#: on, so a short document, reopened after a restart, is read back too.
SAVE_GAP = 256


class SavesState(Protocol):
    """A model whose current KV cache can be written out and read back."""

    def state_bytes(self) -> bytes | None:
        """The state of the cache that holds ``cached_tokens``; ``None`` if unavailable."""
        ...

    def load_state(self, tokens: Sequence[int], data: bytes) -> bool:
        """Replace the current cache by ``data``, the state after ``tokens``.

        ``False`` when the model refuses it; the cache is then consistent
        (possibly empty) and ``cached_tokens`` says what it holds.
        """
        ...


@dataclass(frozen=True)
class Entry:
    """A saved state: its file and the tokens it holds."""

    path: Path
    tokens: tuple[int, ...]


class PrefixCache:
    """Saved KV states of prompt prefixes for one model (see the module docstring)."""

    def __init__(
        self, folder: Path, model: str, *, max_bytes: int = DEFAULT_MAX_BYTES, window: int = 0
    ) -> None:
        self.folder = folder
        self.model = model
        self.max_bytes = max_bytes
        #: The model's attention window, when its saved states hold only the
        #: last ``window`` positions of some layers (0: they hold everything).
        self.window = window
        #: This model's entries by file name, read from the folder (headers and
        #: tokens only) on the first lookup, and again where the folder changed.
        self._index: dict[str, Entry] | None = None
        #: The folder's identity and modification time when ``_index`` was read.
        self._seen: tuple[int, int] | None = None
        #: Names in the folder that are not this model's entries (read once).
        self._others: set[str] = set()
        self.hits = 0
        self.saves = 0
        self._warned = False

    @classmethod
    def in_cache_home(cls, model: str, **kwargs: int) -> PrefixCache | None:
        """The cache in ``cache_home()/prefix``; ``None`` where the disk cache is off."""
        home = cache_home()
        return None if home is None else cls(home / "prefix", model, **kwargs)

    # -- lookup ------------------------------------------------------------
    def best(self, tokens: Sequence[int]) -> tuple[Entry | None, int]:
        """The entry sharing the longest prefix with ``tokens``, and that prefix's length.

        An entry need not be a prefix of ``tokens``: a state restored and cut back
        to the common part (a pre-warmed window, asked for above its end) serves
        too. Only entries whose state ``serves`` count (one saved before this
        rule, by an older structspec, is left to the size cap).
        """
        best, best_len = None, 0
        for entry in self._entries_index().values():
            n = common_prefix_len(entry.tokens, tokens)
            if n > best_len and self.serves(len(entry.tokens)):
                best, best_len = entry, n
        return best, best_len

    def load(self, entry: Entry) -> bytes | None:
        """The payload of ``entry``; ``None`` (and the file removed) if it is damaged."""
        try:
            payload = self._read(entry)
        except _Damaged as exc:
            log.info("prefix cache: removing %s (%s)", entry.path.name, exc)
            self._forget(entry.path)
            return None
        except OSError:
            self._forget(entry.path)  # gone (another process evicted it)
            return None
        with contextlib.suppress(OSError):
            os.utime(entry.path)  # least recently used goes first
        self.hits += 1
        return payload

    def restorable(self, tokens: Sequence[int], reused: int = 0) -> tuple[Entry | None, int]:
        """The entry ``restore`` would read back for ``tokens``, and the tokens it would give.

        ``(None, 0)`` unless it spares ``RESTORE_MIN`` tokens or more beyond ``reused``.
        """
        entry, common = self.best(tokens)
        if entry is None or common < reused + RESTORE_MIN:
            return None, 0
        return entry, common

    def serves(self, n_tokens: int) -> bool:
        """Whether a state of ``n_tokens`` read back is the state saved.

        Not where it holds more than ``window`` tokens of a model whose saved
        states then lack some (the module docstring).
        """
        return not self.window or n_tokens <= self.window

    def restore(self, model: SavesState, tokens: Sequence[int], reused: int) -> int:
        """Read back the saved state sharing most with ``tokens`` into ``model``.

        Only where it spares at least ``RESTORE_MIN`` tokens beyond the ``reused``
        ones the model already holds. Returns how many tokens of ``tokens`` the
        model's cache now holds of the common prefix (the caller cuts the cache
        back to it): ``reused`` where nothing was restored, 0 where a refused
        state left the cache empty.
        """
        entry, common = self.restorable(tokens, reused)
        if entry is None:
            return reused
        data = self.load(entry)
        if data is None:
            return reused
        if not model.load_state(entry.tokens, data):
            log.info("prefix cache: the model refused %s; removing it", entry.path.name)
            self._forget(entry.path)
            return 0
        return common

    def save_held(self, held: Sequence[int], state: Callable[[], bytes | None]) -> bool:
        """Save ``state()``, a cache's state holding ``held``, if far enough past what is saved.

        ``state`` is asked only when the save is due (reading a state is not free).
        """
        if len(held) < RESTORE_MIN or not self.serves(len(held)):
            return False
        _, common = self.best(held)
        if len(held) - common < (SAVE_GAP if common >= RESTORE_MIN else RESTORE_MIN):
            return False
        data = state()
        return data is not None and self.save(held, data)

    # -- save --------------------------------------------------------------
    def save(self, tokens: Sequence[int], payload: bytes) -> bool:
        """Save ``payload`` as the state after ``tokens``; ``False`` where it could not be."""
        header = json.dumps(
            {
                "model": self.model,
                "tokens": len(tokens),
                "size": len(payload),
                "sha256": hashlib.sha256(payload).hexdigest(),
            }
        ).encode()
        packed = _pack_tokens(tokens)
        total = len(MAGIC) + 4 + len(header) + len(packed) + len(payload)
        if total > self.max_bytes // 2:
            return False  # one entry may not push out most of the cache
        path = self.folder / self._name(tokens)
        tmp: str | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._evict(room=total)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".kv")
            with os.fdopen(fd, "wb") as fh:
                fh.write(MAGIC + struct.pack("<I", len(header)) + header + packed)
                fh.write(payload)
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:  # a full disk, a read-only folder: evaluate next time
            if not self._warned:
                log.warning("prefix cache: cannot write to %s (%s)", self.folder, exc)
                self._warned = True
            return False
        finally:
            if tmp is not None:
                _remove(Path(tmp))
        self._entries_index()[path.name] = Entry(path, tuple(tokens))
        self.saves += 1
        return True

    # -- internals ---------------------------------------------------------
    def _name(self, tokens: Sequence[int]) -> str:
        h = hashlib.sha256(self.model.encode())
        h.update(_pack_tokens(tokens))
        return h.hexdigest()[:40] + ".kv"

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.folder.iterdir() if p.suffix == ".kv" and p.name[0] != "."]
        except OSError:
            return []

    def _entries_index(self) -> dict[str, Entry]:
        """This model's entries, as the folder holds them now.

        Another process (a second editor window, ``structspec serve``) saves and
        evicts in the same folder. A folder's modification time changes with
        every file created, renamed or removed in it, so it is read again only
        then, and only new names' headers are read: a name is the digest of
        its model and tokens, so a known name is a known entry (or another
        model's).
        """
        try:
            st = os.stat(self.folder)
            seen: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except OSError:
            seen = None
        if self._index is not None and seen == self._seen:
            return self._index
        known = self._index or {}
        index: dict[str, Entry] = {}
        others: set[str] = set()
        for path in self._files():
            entry = known.get(path.name)
            if entry is None and path.name not in self._others:
                tokens = self._read_tokens(path)
                entry = Entry(path, tokens) if tokens else None
            if entry is not None:
                index[path.name] = entry
            else:
                others.add(path.name)
        self._index, self._seen, self._others = index, seen, others
        return index

    def _read_tokens(self, path: Path) -> tuple[int, ...] | None:
        """The tokens of ``path`` if it is this model's entry (the header and tokens only)."""
        try:
            with _open_regular(path) as fh:
                header = _read_header(fh)
                n = header.get("tokens")
                if header.get("model") != self.model or not isinstance(n, int) or n <= 0:
                    return None
                raw = fh.read(4 * n)
        except (OSError, _Damaged):
            return None
        if len(raw) != 4 * n:
            return None
        return struct.unpack(f"<{n}I", raw)

    def _read(self, entry: Entry) -> bytes:
        with _open_regular(entry.path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > self.max_bytes:
                raise _Damaged(f"{size} bytes, over the cache's cap")
            header = _read_header(fh)
            if header.get("model") != self.model:
                raise _Damaged("another model's entry under this model's name")
            n, length, digest = header.get("tokens"), header.get("size"), header.get("sha256")
            if n != len(entry.tokens) or not isinstance(length, int) or not isinstance(digest, str):
                raise _Damaged("header does not describe the entry")
            if fh.read(4 * n) != _pack_tokens(entry.tokens):
                raise _Damaged("tokens differ")
            payload = fh.read(length + 1)
        if len(payload) != length or hashlib.sha256(payload).hexdigest() != digest:
            raise _Damaged("payload damaged")
        return payload

    def _evict(self, room: int) -> None:
        """Remove the least recently used entries until ``room`` more bytes fit the cap
        (and the temporary files of saves that were killed, which nothing counts)."""
        remove_stale_temporaries(self.folder, ".tmp-*.kv")
        sized = []
        for path in self._files():
            with contextlib.suppress(OSError):
                st = path.lstat()
                sized.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in sized)
        for _, size, path in sorted(sized, key=lambda e: e[0]):
            if total + room <= self.max_bytes:
                break
            self._forget(path)
            total -= size

    def _forget(self, path: Path) -> None:
        _remove(path)
        if self._index is not None:
            self._index.pop(path.name, None)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


class _Damaged(Exception):
    """An entry whose bytes are not what its header promises."""


def _pack_tokens(tokens: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}I", *tokens)


def _open_regular(path: Path) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file (no FIFO, device or link)."""
    try:
        return open_regular(path, follow_links=False)
    except FileLimitError as exc:
        raise _Damaged(str(exc)) from None


def _read_header(fh: BinaryIO) -> dict[str, object]:
    start = fh.read(len(MAGIC) + 4)
    if len(start) != len(MAGIC) + 4 or start[: len(MAGIC)] != MAGIC:
        raise _Damaged("not a prefix-cache entry")
    (length,) = struct.unpack("<I", start[len(MAGIC) :])
    if length > _MAX_HEADER:
        raise _Damaged("header too long")
    try:
        header = json.loads(fh.read(length))
    except (ValueError, RecursionError):
        raise _Damaged("header is not JSON") from None
    if not isinstance(header, dict):
        raise _Damaged("header is not an object")
    return header

"""Files named from outside (a setting, a flag, the environment), and structspec's cache folder.

A path from outside may name anything: a FIFO with no writer (the read blocks
forever), ``/dev/zero`` (it never ends), a socket, or a regular file far larger
than any input structspec reads. ``read_bounded`` reads only regular files,
at most ``limit`` bytes, and never blocks; whatever else it meets is a
``FileLimitError`` whose message is one line for the user.

JSON from outside (a request, a backend's answer, a cache file another process
may have written) is decoded by ``load_json`` (``read_json`` for a file):
whatever is wrong with it is a ``JSONError``, a ``ValueError``, never a
``RecursionError``.

A cache file is written by ``write_atomic``: several structspec processes (two
editor windows, a ``serve``) share the cache folder, and each reads what the
others write, so a reader must see the old file or the new one, never a
half-written or interleaved one.

structspec's own cache folder (cost tables, saved prompt prefixes, built model
shapes, widened weights) is ``$STRUCTSPEC_CACHE_DIR``, else the platform's user cache folder
(``cache_home``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

MIB = 1 << 20
#: Environment variable naming structspec's cache folder; set but empty turns
#: the prompt-prefix cache off.
CACHE_DIR_ENV = "STRUCTSPEC_CACHE_DIR"


class FileLimitError(ValueError):
    """A file that is not read: not a regular file, or larger than the limit."""


class FileTooLarge(FileLimitError):
    """A regular file larger than the limit (a caller may skip it quietly)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def size_text(n: int) -> str:
    """``n`` bytes for a message: ``64 MiB``, ``300 KiB`` or ``12 bytes``."""
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB"
    if n >= 1024:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True) -> BinaryIO:
    """``path`` opened for reading, which must be a regular file.

    Opened non-blocking and checked with ``fstat`` on the open descriptor, so
    neither the open (a FIFO with no writer) nor a read can block, and swapping
    the file for a FIFO after a check by name cannot either. Raises
    ``FileLimitError`` for anything but a regular file (also behind a symlink
    such as ``x -> /dev/zero``), ``OSError`` when it cannot be opened (with
    ``follow_links=False``, also when ``path`` is a symlink).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileLimitError(f"{path} is {_kind(mode)}, not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (``open_regular``), at most ``limit`` of them.

    Raises ``FileLimitError`` for anything but a regular file and
    ``FileTooLarge`` for a file larger than ``limit``; ``OSError`` when it
    cannot be opened.
    """
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(f"{path} is larger than {size_text(limit)}")
    return data


def read_bounded_text(path: str | os.PathLike[str], limit: int, *, errors: str = "strict") -> str:
    """``read_bounded`` decoded as UTF-8 (``UnicodeDecodeError`` with ``errors="strict"``)."""
    return read_bounded(path, limit).decode("utf-8", errors)


def read_json(path: str | os.PathLike[str], limit: int) -> Any:
    """The JSON document in the file at ``path`` (``read_bounded``, ``load_json``).

    Raises ``OSError`` when it cannot be read and ``ValueError`` (``FileLimitError``,
    ``JSONError``) for anything that is not a regular file of at most ``limit``
    bytes of JSON.
    """
    return load_json(read_bounded(path, limit))


def write_atomic(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` whole: written under a temporary name of this
    writer's own in the same folder, then renamed over ``path``.

    A process reading ``path`` meanwhile sees the old file or the new one; two
    writers at once leave one's file, not a mix of both; a write that fails (a
    full disk) leaves the old file and no temporary one, and raises ``OSError``.
    The file is readable by all (0644), as ``open`` would create it. Only a
    regular file (or none) is replaced: a device or a pipe at ``path``
    (``/dev/full``, ``/dev/stdout``) is refused with ``OSError``, never
    renamed over (as root that would replace the device itself).
    """
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise OSError(errno.EINVAL, f"not a regular file: {path}")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):  # not on Windows before Python 3.13
                os.fchmod(fh.fileno(), 0o644)  # mkstemp's own file is 0600
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


#: A temporary file older than this is a killed writer's (a write takes seconds at most).
STALE_TEMPORARY_S = 3600.0


def remove_stale_temporaries(folder: Path, pattern: str) -> None:
    """Remove the files in ``folder`` matching ``pattern`` older than ``STALE_TEMPORARY_S``.

    A writer killed between writing its temporary file and renaming it leaves
    the file for ever, and nothing counts it; a younger one may be another
    process's write in progress, and is left alone.
    """
    now = time.time()
    with contextlib.suppress(OSError):
        for tmp in folder.glob(pattern):
            with contextlib.suppress(OSError):
                if now - tmp.lstat().st_mtime > STALE_TEMPORARY_S:
                    tmp.unlink()


def touch_writable(path: str | os.PathLike[str]) -> None:
    """Open ``path`` for appending and close it: ``OSError`` where a write would fail.

    Without blocking: a FIFO nobody reads fails here (``ENXIO``) instead of
    hanging whoever writes it. A missing file is created (empty); an existing
    one is not truncated.
    """
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644))


def cache_home() -> Path | None:
    """structspec's cache folder: ``$STRUCTSPEC_CACHE_DIR``, else the platform's user cache.

    ``None`` when the variable is set but empty (the caller caches nothing on disk).
    """
    value = os.environ.get(CACHE_DIR_ENV)
    if value is not None:
        return Path(value).expanduser() if value.strip() else None
    return default_cache_home()


def default_cache_home() -> Path:
    """The platform's user cache folder for structspec (``~/.cache/structspec`` on Linux)."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "structspec"
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "structspec" / "Cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "structspec"


def file_stamp(path: Path) -> list[object]:
    """One version of the file at ``path``, for a cache key: where it is, its inode, size
    and modification and change times.

    A file replaced, rewritten or moved gets another stamp, so what was cached
    for it is never taken for the new one: its inode tells a replacement that
    kept size and modification time (``rsync -a``, ``tar x``), its change time
    one rewritten in place with the times set back (``cp -p``). Raises
    ``OSError`` when it is gone.
    """
    st = path.stat()
    return [str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def kept_cache_folder(name: str) -> Path:
    """``name`` in structspec's cache folder, for caches kept even where
    ``STRUCTSPEC_CACHE_DIR`` is set empty (cost tables, built model shapes): the
    platform's folder then."""
    return (cache_home() or default_cache_home()) / name


#: Deepest nesting of arrays and objects accepted in JSON from outside (request
#: bodies, a backend's answers and stream events). API documents nest a few levels
#: (a tool's JSON schema perhaps twenty); a fixed limit far below Python's recursion
#: limit means the same document parses, and can be walked or encoded again, at any
#: depth of the call stack.
MAX_JSON_DEPTH = 100


class JSONError(ValueError):
    """JSON from outside that cannot be used. The message completes a sentence that
    names the document: ``f"the request body {exc}"``."""


def load_json(data: bytes) -> Any:
    """Decode JSON from outside, or raise ``JSONError`` (never anything else).

    The one parser of untrusted JSON (request bodies, backends' answers, cache
    files): malformed JSON, bytes that are not UTF-8, nesting deeper than
    ``MAX_JSON_DEPTH`` and integers past Python's
    digit limit (``sys.get_int_max_str_digits``, 4300: ``json`` raises a plain
    ``ValueError`` for them) all end here as one ``JSONError``.
    """
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise JSONError(
            f"is malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except UnicodeDecodeError:
        raise JSONError("is not UTF-8 JSON") from None
    except RecursionError:
        raise JSONError(_too_deep()) from None
    except ValueError:
        raise JSONError(
            f"has a number with more than {sys.get_int_max_str_digits()} digits"
        ) from None
    if data.count(b"[") + data.count(b"{") > MAX_JSON_DEPTH and _depth(doc) > MAX_JSON_DEPTH:
        raise JSONError(_too_deep())
    return doc


def _too_deep() -> str:
    return f"is nested too deeply (more than {MAX_JSON_DEPTH} levels of arrays and objects)"


def _depth(doc: Any) -> int:
    """Levels of arrays and objects in ``doc``, counted without recursion; stops past
    ``MAX_JSON_DEPTH``."""
    depth = 0
    level = [doc] if isinstance(doc, dict | list) else []
    while level and depth <= MAX_JSON_DEPTH:
        depth += 1
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below.extend(c for c in children if isinstance(c, dict | list))
        level = below
    return depth

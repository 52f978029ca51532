"""Shared file helpers (``files.py``): whole replacement of cache files, stale temporaries."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from structspec import files
from structspec.files import read_json, remove_stale_temporaries, write_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch):
    path = tmp_path / "rates.json"
    write_atomic(path, b'{"old": 1}')

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError):
        write_atomic(path, b'{"new": 2}')
    assert read_json(path, 100) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["rates.json"]


def test_a_written_file_is_readable_by_all_as_open_makes_it(tmp_path: Path):
    path = tmp_path / "x.json"
    write_atomic(path, b"{}")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_only_old_temporaries_are_removed(tmp_path: Path):
    old, young, other = tmp_path / "a.tmp", tmp_path / "b.tmp", tmp_path / "c.json"
    for p in (old, young, other):
        p.write_bytes(b"x")
    os.utime(old, (1e9, 1e9))
    os.utime(other, (1e9, 1e9))
    remove_stale_temporaries(tmp_path, "*.tmp")
    assert not old.exists() and young.exists() and other.exists()
    remove_stale_temporaries(tmp_path / "missing", "*.tmp")  # no folder: nothing to do


def test_a_file_replaced_with_its_size_and_times_kept_gets_another_stamp(tmp_path):
    """``cp -p`` over the file, or ``rsync -a`` (a new file renamed over it), keep the size
    and the modification time: a widened copy or a measurement of the old file was taken
    for the new one."""
    import time

    file_stamp = files.file_stamp
    path = tmp_path / "m.gguf"
    path.write_bytes(b"a" * 100)
    before = file_stamp(path)
    st = path.stat()
    time.sleep(0.05)  # past the kernel's clock tick (1-10 ms), which stamps the change time
    path.write_bytes(b"b" * 100)  # in place
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    in_place = file_stamp(path)
    (tmp_path / "new").write_bytes(b"c" * 100)
    os.utime(tmp_path / "new", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "new", path)  # renamed over it
    assert len({repr(before), repr(in_place), repr(file_stamp(path))}) == 3


def test_write_atomic_never_renames_over_a_device_or_a_pipe(tmp_path):
    """Renamed over, ``/dev/full`` (``mine -o /dev/full`` as root) became a regular file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_atomic(fifo, b"data")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary left

"""``structspec mine``: mine token n-gram rules from real code for the ``rules`` source.

Every file is tokenized whole by the model's own tokenizer (no BOS), exactly
as the model sees code in a prompt, so the mined contexts and continuations
are the token ids the model reads and writes. See ``structspec.drafts.rules``
for what a rule is and how the file is made safe across tokenizers.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from structspec import __version__
from structspec.cli import UserError
from structspec.commands.common import check_writable
from structspec.drafts.rules import (
    LANGUAGE_OF_SUFFIX,
    MineOptions,
    RuleSet,
    Tokenizer,
    mine_rules,
    vocab_fingerprint,
)
from structspec.files import FileLimitError, FileTooLarge, read_bounded

#: Files larger than this are skipped (generated tables, not code people write).
MAX_FILE_BYTES = 1_000_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "mine",
        help="mine n-gram draft rules from code files",
        description="Mine token n-gram rules from code files and directories for the "
        "'rules' draft source. Files are tokenized whole with the model's tokenizer.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="code files or directories")
    p.add_argument("-o", "--output", required=True, metavar="RULES", help="rules file to write")
    p.add_argument("--model", help="GGUF whose tokenizer to mine for (default: embedded Gemma 3)")
    p.add_argument(
        "--min-count", type=int, default=8, help="occurrences a context needs (default 8)"
    )
    p.add_argument(
        "--min-context", type=int, default=2, help="shortest context in tokens (default 2)"
    )
    p.add_argument(
        "--max-context", type=int, default=8, help="longest context in tokens (default 8)"
    )
    p.add_argument(
        "--max-continuation",
        type=int,
        default=12,
        help="longest continuation a rule stores (default 12)",
    )
    p.add_argument(
        "--ext",
        action="append",
        default=[],
        metavar="EXT",
        help="file extensions to read in directories, e.g. py (repeatable; default: all known "
        "code extensions)",
    )
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="skip files and directories whose name or relative path matches (repeatable)",
    )
    p.set_defaults(func=run)


def iter_files(paths: Sequence[str], exts: Sequence[str], exclude: Sequence[str]) -> Iterator[Path]:
    """Files named on the command line, and code files under directories, sorted, once each.

    A file is known by its device and inode, so one reached twice (named twice,
    through a symlink or a hard link) is read once. A symlink that loops or
    leads nowhere names no file: it is skipped with a warning. Directories are
    walked without following symlinks, so a symlinked directory cannot loop.
    """
    suffixes = {("." + e.lstrip(".")).lower() for e in exts} or set(LANGUAGE_OF_SUFFIX)

    def excluded(rel: str, name: str) -> bool:
        return any(fnmatch.fnmatch(name, g) or fnmatch.fnmatch(rel, g) for g in exclude)

    seen: set[tuple[int, int]] = set()

    def first_time(path: Path) -> bool:
        try:
            st = os.stat(path)
        except OSError as exc:  # a symlink loop (ELOOP), a dangling link, a file just removed
            _skip(path, exc.strerror or str(exc))
            return False
        identity = (st.st_dev, st.st_ino)
        if identity in seen:
            return False
        seen.add(identity)
        return True

    for raw in paths:
        root = Path(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(root).st_mode)
        except FileNotFoundError:
            raise UserError(f"no such file or directory: {root}") from None
        except OSError as exc:
            raise UserError(f"cannot read {root}: {exc.strerror or exc}") from None
        if not is_dir:  # a file, or a FIFO/device that read_code will skip with a word
            if first_time(root):
                yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(
                d
                for d in dirnames
                if not d.startswith(".")
                and d != "__pycache__"
                and not excluded(os.path.normpath(os.path.join(rel_dir, d)), d)
            )
            for name in sorted(filenames):
                path = Path(dirpath) / name
                rel = os.path.normpath(os.path.join(rel_dir, name))
                if path.suffix.lower() in suffixes and not excluded(rel, name) and first_time(path):
                    yield path


def _skip(path: Path, why: object) -> None:
    print(f"structspec: warning: skipping {path}: {why}", file=sys.stderr)


def read_code(path: Path) -> str | None:
    """The text of a code file, or ``None`` for files that are not UTF-8 text or too large.

    Anything but a regular file is skipped with a warning on stderr.
    """
    try:
        data = read_bounded(path, MAX_FILE_BYTES)
    except FileTooLarge:
        return None
    except FileLimitError as exc:  # a FIFO, a device: reading it could block or never end
        _skip(path, exc)
        return None
    except OSError:
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def tokenize_files(
    files: Sequence[Path], tok: Tokenizer, progress: Callable[[int, int], None] | None = None
) -> tuple[list[list[int]], list[str], int]:
    """Token ids of each readable file (whole file, no BOS), their languages, and skipped count."""
    streams: list[list[int]] = []
    languages: set[str] = set()
    skipped = 0
    for i, path in enumerate(files):
        text = read_code(path)
        if text is None or not text.strip():
            skipped += 1
        else:
            streams.append(tok.tokenize(text, add_bos=False))
            lang = LANGUAGE_OF_SUFFIX.get(path.suffix.lower())
            if lang:
                languages.add(lang)
        if progress is not None:
            progress(i + 1, len(files))
    return streams, sorted(languages), skipped


def mine_paths(
    paths: Sequence[str],
    tok: Tokenizer,
    opts: MineOptions,
    *,
    exts: Sequence[str] = (),
    exclude: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> RuleSet:
    """Mine a rule set from the code under ``paths`` with ``tok``'s tokenizer."""
    files = list(iter_files(paths, exts, exclude))
    if not files:
        raise UserError("no code files found under " + ", ".join(paths))
    streams, languages, skipped = tokenize_files(files, tok, progress)
    if not streams:  # every file binary, too large or unreadable: no rules to write
        raise UserError(
            f"no code files could be read under {', '.join(paths)} ({skipped} skipped: "
            "binary, too large or unreadable)"
        )
    n_tokens = sum(len(s) for s in streams)
    tokenizer = {"name": tok.name, "n_vocab": tok.n_vocab, "fingerprint": vocab_fingerprint(tok)}
    meta = {
        "structspec": __version__,
        "sources": [str(p) for p in paths],
        "files": len(streams),
        "skipped_files": skipped,
        "tokens": n_tokens,
        "min_context": opts.min_context,
        "max_context": opts.max_context,
    }
    return mine_rules(streams, opts, tokenizer=tokenizer, languages=languages, meta=meta)


def _progress_printer() -> Callable[[int, int], None]:
    last = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] > 0.5:
            last[0] = now
            end = "\n" if done == total else "\r"
            print(f"tokenizing files: {done}/{total}", end=end, file=sys.stderr, flush=True)

    return show if sys.stderr.isatty() else (lambda done, total: None)


def run(args: argparse.Namespace) -> int:
    for flag in ("min_count", "min_context", "max_context", "max_continuation"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.min_context > args.max_context:
        raise UserError("--min-context must not exceed --max-context")
    if args.max_context > 64:
        raise UserError("--max-context must be at most 64")
    out = Path(args.output)
    check_writable(args.output)  # before the mining: a folder, a FIFO, a name too long
    opts = MineOptions(
        min_count=args.min_count,
        min_context=args.min_context,
        max_context=args.max_context,
        max_continuation=args.max_continuation,
    )
    from structspec.runtime import open_model

    tok = open_model(args.model or "", context_size=512, threads=1, widen=False)
    t0 = time.perf_counter()
    ruleset = mine_paths(
        args.paths, tok, opts, exts=args.ext, exclude=args.exclude, progress=_progress_printer()
    )
    try:
        size = ruleset.save(out, tok)
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    tiers = ruleset.tier_counts()
    meta = ruleset.meta
    print(
        f"mined {len(ruleset)} rules ("
        + ", ".join(f"{k} {v}" for k, v in tiers.items())
        + f") from {meta['files']} files, {meta['tokens']} tokens "
        f"({meta['skipped_files']} skipped) in {time.perf_counter() - t0:.1f} s; "
        f"wrote {out} ({size / 1e6:.2f} MB)"
    )
    return 0

"""The mixed-language benchmark suite, built from real files on this machine.

Nothing here is written for the test: prompts are cut from files that ship
with Python, its installed packages and the system (JSON schemas and data of
installed packages, HTML pages of bundled documentation, SQL scripts of
installed databases, Go sources of bundled tools, JavaScript of installed Node
packages, Python's standard library). Each prompt is the text before a cut
point in the middle of a file, ending at the indentation of a line, the way an
editor's cursor sits at the start of a line being written.

The selection is deterministic for a given machine: candidate files are sorted
and sampled evenly, so two runs build the same suite. Languages with no file
on the machine are left out (``build_mixed_suite`` returns how many prompts it
wrote and warns about the missing languages).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Iterator
from pathlib import Path

from structspec.syntax.table import load_table

#: The suite's languages (languageIds), in the order it lists them. Their file
#: extensions are the language table's (``grammars/languages.toml``: ``extensions``).
LANGUAGES = ("json", "html", "sql", "go", "javascript", "python")


def extensions(language: str) -> tuple[str, ...]:
    """The file suffixes of ``language`` in the language table (exact file names left out)."""
    spec = load_table().for_language_id(language)
    return tuple(e for e in spec.extensions if e.startswith(".")) if spec is not None else ()


#: Most characters of prompt text before the cut point.
MAX_PROMPT_CHARS = 1800
#: Files outside these sizes are skipped (tiny files have nothing to continue,
#: huge ones are data dumps).
MIN_FILE_CHARS, MAX_FILE_BYTES = 600, 400_000
#: Files scanned per root at most (keeps building fast on large trees).
MAX_FILES_PER_ROOT = 5000


def _roots() -> dict[str, list[Path]]:
    """Where each language's files are looked for, most portable first."""
    paths = sysconfig.get_paths()
    stdlib = Path(paths["stdlib"])
    site = [Path(p) for p in {paths["purelib"], paths["platlib"]}]
    usr = Path("/usr")
    share, doc = usr / "share", usr / "share" / "doc"
    node = [usr / "lib" / "node_modules", usr / "local" / "lib" / "node_modules"]
    return {
        "json": [*site, doc, *node],
        "html": [stdlib, *site, doc, *node],
        "sql": [*site, share / "postgresql", share / "sqlite3", doc],
        "go": [*site, usr / "lib" / "go" / "src", doc, usr / "local" / "go" / "src"],
        "javascript": [*site, *node, share / "javascript", doc],
        "python": [stdlib],
    }


def _files(root: Path, exts: tuple[str, ...]) -> Iterator[Path]:
    if not root.is_dir():
        return
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for name in sorted(filenames):
            if name.lower().endswith(exts) and not name.endswith((".min.js", ".min.json")):
                seen += 1
                yield Path(dirpath) / name
                if seen >= MAX_FILES_PER_ROOT:
                    return


def _usable(text: str) -> bool:
    """Real, human-written-looking text: long enough, short lines (not minified)."""
    if len(text) < MIN_FILE_CHARS or "\x00" in text:
        return False
    lines = text.splitlines()
    if len(lines) < 15:
        return False
    return max(len(line) for line in lines) <= 400


def cut_prompt(text: str, max_chars: int = MAX_PROMPT_CHARS) -> str | None:
    """The text before a cut at the start of a non-blank line in the middle of ``text``.

    The prompt ends with that line's indentation (what an editor shows when the
    cursor waits on a new line) and starts at a line boundary at most
    ``max_chars`` earlier.
    """
    lines = text.splitlines(keepends=True)
    n = len(lines)
    for offset in range(n // 2):
        for k in (n // 2 + offset, n // 2 - offset):
            if not 3 <= k < n or not lines[k].strip():
                continue
            head = "".join(lines[:k])
            body = lines[k].lstrip(" \t")
            indent = lines[k][: len(lines[k]) - len(body)]
            start = max(0, len(head) - max_chars)
            if start:
                start = head.find("\n", start) + 1
            prompt = head[start:] + indent
            if len(prompt.strip()) >= 200:
                return prompt
    return None


def _unique_id(base: str, items: list[dict[str, str]], path: Path) -> str:
    """``base``, or with the file's folder (then a counter) when another prompt has it."""
    taken = {item["id"] for item in items}
    if base not in taken:
        return base
    language, _, name = base.partition("/")
    candidate = f"{language}/{path.parent.name}/{name}"
    n = 2
    while candidate in taken:
        candidate = f"{language}/{path.parent.name}/{name}#{n}"
        n += 1
    return candidate


def collect(language: str, limit: int) -> list[dict[str, str]]:
    """Up to ``limit`` prompts of ``language`` from the files found on the machine."""
    if limit <= 0:
        return []
    exts = extensions(language)
    candidates: list[Path] = []
    seen: set[Path] = set()
    for root in _roots()[language]:
        for path in _files(root, exts):
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                candidates.append(path)
    items: list[dict[str, str]] = []
    if not candidates:
        return items
    texts: set[str] = set()  # a file shipped twice is one prompt
    # Sample evenly across the sorted candidates, then walk on until enough are usable.
    step = max(1, len(candidates) // (limit * 3))
    order = candidates[::step] + [p for i, p in enumerate(candidates) if i % step]
    for path in order:
        if len(items) >= limit:
            break
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not _usable(text):
            continue
        prompt = cut_prompt(text)
        if prompt is None or prompt in texts:
            continue
        texts.add(prompt)
        items.append(
            {
                "id": _unique_id(f"{language}/{path.name}", items, path),
                "prompt": prompt,
                "language": language,
                "source": str(path),
            }
        )
    return items


def build_mixed_suite(out_path: str | Path, limit_per_lang: int = 8) -> int:
    """Write the suite as JSON lines ``{"id", "prompt", "language", "source"}``.

    Returns the number of prompts written (``limit_per_lang`` per language at most).
    """
    out = Path(out_path)
    lines: list[str] = []
    missing: list[str] = []
    for language in LANGUAGES:
        items = collect(language, limit_per_lang)
        if not items:
            missing.append(language)
        lines += [json.dumps(item, ensure_ascii=False) for item in items]
    if missing:
        warnings.warn(
            "mixed suite: no usable files on this machine for " + ", ".join(missing), stacklevel=2
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return len(lines)


if __name__ == "__main__":  # python -m structspec.bench.mixed OUT [LIMIT]
    if len(sys.argv) < 2:
        sys.exit("usage: python -m structspec.bench.mixed OUT.jsonl [LIMIT_PER_LANGUAGE]")
    count = build_mixed_suite(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 8)
    print(f"{count} prompts written to {sys.argv[1]}")

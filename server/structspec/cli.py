"""The ``structspec`` command line.

Each command lives in ``structspec.commands.<name>`` and exposes
``register(subparsers)``, which adds its parser and sets ``func(args) -> int``.
Commands are imported only when the CLI starts, and errors a user can cause
(a missing model, a bad file) end in one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from structspec import __version__
from structspec.errors import UserError as UserError  # re-exported: commands raise it

COMMANDS = (
    "run",
    "benchmark",
    "mine",
    "serve",
    "detect",
    "status",
    "config",
    "vllm_command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="structspec",
        description="Local code completion with model-free speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"structspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"structspec.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # closed by the caller (``>&-``): write nowhere
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115
    try:  # the commands' modules load here: a second or so a Ctrl-C may land in
        parser = build_parser()
        args = parser.parse_args(argv)
        from structspec.drafts.base import SourceError
        from structspec.engine.decode import EngineError
        from structspec.model.base import ModelError
    except KeyboardInterrupt:
        print("structspec: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2

    try:
        return int(args.func(args) or 0)
    except (UserError, ModelError, SourceError, EngineError) as exc:
        print(f"structspec: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("structspec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # the machine's, not a bug: a full disk, an output gone
        where = f": {exc.filename}" if exc.filename else ""
        print(f"structspec: error: {exc.strerror or exc}{where}", file=sys.stderr)
        _drop_unwritable_output()
        return 1


def _drop_unwritable_output() -> None:
    """Standard output failed (``>/dev/full``): what it still buffers goes nowhere at exit."""
    try:
        sys.stdout.flush()
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115


if __name__ == "__main__":
    raise SystemExit(main())

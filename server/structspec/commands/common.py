"""Arguments and helpers shared by the commands that run the model."""

from __future__ import annotations

import argparse
from typing import Any

from structspec.cli import UserError
from structspec.config import SOURCE_NAMES, LoadedSettings, load_settings


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--threads``, ``--context-size``, ``--sources``, ``--rules-file``.

    The names are those of ``structspec.config.Settings``.
    """
    parser.add_argument("--model", help="GGUF file (default: the embedded Gemma 3 270M)")
    parser.add_argument("--threads", type=int, help="CPU threads for the model")
    parser.add_argument("--context-size", type=int, help="context window in tokens")
    parser.add_argument(
        "--sources",
        help=f"draft sources, comma-separated: all (default) or {','.join(SOURCE_NAMES)}",
    )
    parser.add_argument(
        "--rules-file", help="rules mined with `structspec mine` (default: the packaged rules)"
    )


def settings_from_args(args: argparse.Namespace, **extra: Any) -> LoadedSettings:
    """Settings from config file, environment and the flags in ``args``; bad flags are errors."""
    flags = {
        "model": getattr(args, "model", None),
        "threads": getattr(args, "threads", None),
        "context_size": getattr(args, "context_size", None),
        "sources": getattr(args, "sources", None),
        "rules_file": getattr(args, "rules_file", None),
        **extra,
    }
    loaded = load_settings(flags)
    bad_flags = [e for e in loaded.errors if e.startswith("flag:")]
    if bad_flags:
        raise UserError(bad_flags[0].removeprefix("flag: "))
    return loaded

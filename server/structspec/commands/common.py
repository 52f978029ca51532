"""Arguments and helpers shared by the commands that run the model."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from structspec.cli import UserError
from structspec.config import SOURCE_NAMES, LoadedSettings, load_settings
from structspec.engine.sampling import Sampling
from structspec.files import touch_writable


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


def add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """``--temperature``, ``--top-k``, ``--top-p``, ``--min-p``, ``--seed``.

    The names are those of ``structspec.engine.sampling.Sampling`` (and of the
    HTTP API's fields); ``sampling_from_args`` validates them.
    """
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="0 (default): greedy; above 0: sample"
    )
    parser.add_argument(
        "--top-k", type=int, default=0, help="sample from the k most likely (0: off)"
    )
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    parser.add_argument(
        "--min-p", type=float, default=0.0, help="drop tokens below min-p x the best (0: off)"
    )
    parser.add_argument(
        "--seed", type=int, help="sampling seed (the same seed gives the same text)"
    )


def sampling_from_args(args: argparse.Namespace) -> Sampling:
    """The ``Sampling`` of ``add_sampling_arguments``' flags; ``UserError`` names a bad one."""
    try:
        return Sampling(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
    except ValueError as exc:  # before any model loads
        raise UserError(str(exc)) from None


def settings_from_args(args: argparse.Namespace, **extra: Any) -> LoadedSettings:
    """Settings from config file, environment and the flags in ``args``.

    Any problem in any layer (a config file that is not valid TOML, an unknown
    or bad key in it, a bad ``STRUCTSPEC_*`` value, a bad flag) is a
    ``UserError``: a command that runs the model must not start on settings
    other than the ones the user wrote. ``threads`` above the machine's CPU
    count is accepted with a warning (oversubscribed threads only slow llama.cpp
    down, they break nothing).
    """
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
        raise UserError(bad_flags[0].removeprefix("flag: ").split("; keeping ")[0])
    if loaded.errors:
        problems = "; ".join(_plain_error(e, loaded) for e in loaded.errors)
        raise UserError(
            f"refusing to start with bad settings: {problems} (see `structspec config`)"
        )
    cpus = os.cpu_count() or 1
    if loaded.settings.threads > cpus:
        print(
            f"structspec: warning: threads = {loaded.settings.threads} "
            f"({loaded.origins['threads']}) is more than the {cpus} CPUs of this machine; "
            "generation will be slower than with at most one thread per CPU",
            file=sys.stderr,
        )
    return loaded


def _plain_error(error: str, loaded: LoadedSettings) -> str:
    """A ``load_settings`` error without its note on the fallback (there is none here)."""
    origin, _, message = error.partition(": ")
    message = message.split("; keeping ")[0].split("; using defaults")[0]
    if origin == "file" or message.startswith(str(loaded.path)):
        where = f"config file {loaded.path}"
        message = message.removeprefix(f"{loaded.path}: ")
    else:
        where = {"env": "environment (STRUCTSPEC_*)"}.get(origin, origin)
    return f"{where}: {message}"


def check_writable(*paths: str | None) -> None:
    """``UserError`` unless every given output path can be written, before any work.

    Checked by opening each for appending (so an existing file is not
    truncated) and removing what this check created: what is tested is what
    the final write will do, on any file system and as any user.
    """
    for raw in paths:
        if not raw:
            continue
        path = Path(raw)
        try:
            if path.is_dir():
                raise UserError(f"cannot write {path}: it is a directory")
            existed = path.exists()
            touch_writable(path)  # a FIFO with no reader fails here instead of hanging
        except OSError as exc:  # a name too long, a folder missing, no permission, ...
            raise UserError(f"cannot write {str(path)[:300]}: {exc.strerror or exc}") from None
        if not existed:
            path.unlink(missing_ok=True)

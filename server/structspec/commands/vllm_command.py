"""``structspec vllm-command``: a vLLM launch command with model-free speculative decoding.

For users moving from a laptop to a GPU server: vLLM has its own model-free
speculation, configured with ``--speculative-config`` (a JSON object):

- ``ngram``: prompt lookup. Drafts up to ``num_speculative_tokens`` tokens
  that followed the last ``prompt_lookup_min``..``prompt_lookup_max`` tokens
  earlier in the prompt or output. Closest to structspec's ``lookup`` source.
- ``suffix``: Suffix Decoding (arXiv 2411.04975): suffix trees over the
  request and earlier responses, with an adaptive draft length
  (``num_speculative_tokens`` is then the maximum). On vLLM's V1 model runner
  it needs ``pip install arctic-inference``.

Neither needs a second model, like structspec. The command is printed, never
run: ``--json`` gives ``{"argv": [...], "speculative_config": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
from typing import Any

from structspec.cli import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "vllm-command",
        help="print a vLLM launch command with model-free speculative decoding",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="model for vLLM (Hugging Face id or local path)")
    p.add_argument(
        "--method",
        choices=("ngram", "suffix"),
        default="ngram",
        help="speculation method (default ngram)",
    )
    p.add_argument(
        "--num-speculative-tokens",
        type=int,
        help="draft tokens per step (default: 5 for ngram, 32 for suffix, a maximum)",
    )
    p.add_argument(
        "--prompt-lookup-min",
        type=int,
        default=2,
        help="ngram: shortest match to draft from (default 2)",
    )
    p.add_argument(
        "--prompt-lookup-max",
        type=int,
        default=4,
        help="ngram: longest match tried first (default 4)",
    )
    p.add_argument(
        "--suffix-max-tree-depth",
        type=int,
        default=24,
        help="suffix: longest pattern kept in the trees (default 24)",
    )
    p.add_argument(
        "--suffix-max-spec-factor",
        type=float,
        default=1.0,
        help="suffix: draft length = factor x matched length (default 1.0)",
    )
    p.add_argument(
        "--suffix-min-token-prob",
        type=float,
        default=0.1,
        help="suffix: drop draft tokens rarer than this (default 0.1)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address vLLM binds (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="vLLM port (default 8000)")
    p.add_argument("--max-model-len", type=int, help="context length for vLLM")
    p.add_argument("--json", action="store_true", help="print JSON instead of a shell command")
    p.set_defaults(func=run)


def speculative_config(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--speculative-config`` object for ``args`` (validated)."""
    if args.method == "ngram":
        n = 5 if args.num_speculative_tokens is None else args.num_speculative_tokens
        if not 1 <= args.prompt_lookup_min <= args.prompt_lookup_max:
            raise UserError("need 1 <= --prompt-lookup-min <= --prompt-lookup-max")
        config: dict[str, Any] = {
            "method": "ngram",
            "num_speculative_tokens": n,
            "prompt_lookup_max": args.prompt_lookup_max,
            "prompt_lookup_min": args.prompt_lookup_min,
        }
    else:
        n = 32 if args.num_speculative_tokens is None else args.num_speculative_tokens
        if args.suffix_max_tree_depth < 1:
            raise UserError("--suffix-max-tree-depth must be at least 1")
        # NaN passes any comparison and inf prints as ``Infinity``, which is not JSON.
        if not (math.isfinite(args.suffix_max_spec_factor) and args.suffix_max_spec_factor > 0):
            raise UserError("--suffix-max-spec-factor must be a finite positive number")
        if not 0.0 <= args.suffix_min_token_prob <= 1.0:  # also refuses NaN
            raise UserError("--suffix-min-token-prob must be between 0 and 1")
        config = {
            "method": "suffix",
            "num_speculative_tokens": n,
            "suffix_decoding_max_tree_depth": args.suffix_max_tree_depth,
            "suffix_decoding_max_spec_factor": args.suffix_max_spec_factor,
            "suffix_decoding_min_token_prob": args.suffix_min_token_prob,
        }
    if not 1 <= n <= 64:
        raise UserError("--num-speculative-tokens must be between 1 and 64")
    return config


def _host(value: str) -> tuple[str, str]:
    """``--host`` as vLLM takes it (an IPv6 address bare) and as a URL holds it."""
    from structspec.detect import url_host

    try:
        in_url = url_host(value)
    except ValueError:
        raise UserError(f"--host {value[:80]!r} is not a host name or address") from None
    return in_url.removeprefix("[").removesuffix("]"), in_url


def build_argv(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    if not args.model.strip() or args.model.startswith("-"):
        raise UserError(f"--model must name a model, not {args.model[:80]!r}")
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {args.port}")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise UserError(
            f"--max-model-len must be a positive number of tokens, not {args.max_model_len}"
        )
    config = speculative_config(args)
    host, _ = _host(args.host)
    argv = ["vllm", "serve", args.model, "--host", host, "--port", str(args.port)]
    if args.max_model_len is not None:
        argv += ["--max-model-len", str(args.max_model_len)]
    argv += ["--speculative-config", json.dumps(config)]
    return argv, config


def run(args: argparse.Namespace) -> int:
    argv, config = build_argv(args)
    if args.json:
        _, in_url = _host(args.host)
        proxy = ["structspec", "serve", "--backend", f"http://{in_url}:{args.port}"]
        print(
            json.dumps({"argv": argv, "speculative_config": config, "proxy_argv": proxy}, indent=2)
        )
        return 0
    print(" ".join(shlex.quote(a) for a in argv))
    return 0

"""``structspec serve``: an OpenAI-compatible server on the engine, or a metrics proxy.

``--model`` (or the config file / environment, or the embedded default) serves
the in-process speculative engine; ``--backend URL`` relays to another
OpenAI-compatible server and adds metrics; ``--backend auto`` picks the first
server ``structspec detect`` finds. Binds 127.0.0.1 unless ``--host`` says
otherwise: the server has no authentication.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
import sys
from pathlib import Path

from structspec.cli import UserError
from structspec.commands.common import add_model_arguments, settings_from_args
from structspec.http.common import DEFAULT_MAX_BODY_BYTES

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="OpenAI-compatible server (in-process engine) or metrics proxy (--backend)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(p)
    p.add_argument(
        "--backend",
        metavar="URL|auto",
        help="relay to this OpenAI-compatible server instead of running a model; "
        "'auto' probes vLLM :8000, llama.cpp :8080, LM Studio :1234, Ollama :11434",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument(
        "--max-tokens", type=int, help="tokens per request when it does not say (default 128)"
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=32,
        help="requests that may wait for the model; more get 503 + Retry-After (default 32)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES})",
    )
    p.add_argument("--greedy", action="store_true", help="plain greedy decoding, no drafts")
    p.set_defaults(func=run)


def _check_port(host: str, port: int) -> None:
    """Fail with one line if the address cannot be bound (before loading any model)."""
    if not 0 < port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"{host}:{port} is already in use (pick another --port)") from None
            raise UserError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _model_id(spec: str, name: str) -> str:
    if spec == "standin" or spec.startswith("standin:"):
        return spec
    return Path(name).stem if name.endswith(".gguf") else name


def run(args: argparse.Namespace) -> int:
    import uvicorn

    if not 1 <= args.max_queue <= 100_000:
        raise UserError("--max-queue must be between 1 and 100000")
    if args.max_body_bytes < 1024:
        raise UserError("--max-body-bytes must be at least 1024")
    if args.backend and args.model:
        raise UserError("--model and --backend exclude each other (a proxy runs no model)")
    _check_port(args.host, args.port)
    if args.backend:
        from structspec.http.proxy import create_proxy_app

        backend = args.backend
        if backend == "auto":
            from structspec.detect import pick_backend, probe_backends

            found = pick_backend(probe_backends(exclude_ports=[args.port]))
            if found is None:
                raise UserError(
                    "no backend answers on the usual ports (vLLM 8000, llama.cpp 8080, "
                    "LM Studio 1234, Ollama 11434); start one or pass --backend URL"
                )
            backend = found.url
            print(f"structspec: backend {found.server} at {backend}", file=sys.stderr)
        elif not backend.startswith(("http://", "https://")):
            raise UserError(f"--backend must be an http(s) URL or 'auto', not {backend!r}")
        app = create_proxy_app(backend, max_body_bytes=args.max_body_bytes)
        what = f"proxy to {backend}"
    else:
        from structspec.http.app import create_app
        from structspec.runtime import load_engine

        settings = settings_from_args(args, max_tokens=args.max_tokens).settings
        engine = load_engine(settings)
        model_id = _model_id(settings.model, engine.model.name)
        app = create_app(
            engine,
            model_id=model_id,
            max_queue=args.max_queue,
            max_body_bytes=args.max_body_bytes,
            default_max_tokens=settings.max_tokens,
            speculative=settings.speculative and not args.greedy,
            token_healing=settings.token_healing,
        )
        what = f"model {model_id!r}"
    if not _is_loopback(args.host):
        print(
            f"structspec: warning: listening on {args.host}, reachable from other machines; "
            "the server has no authentication",
            file=sys.stderr,
        )
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"structspec: serving {what} on http://{host}:{args.port}/v1 "
        f"(metrics: http://{host}:{args.port}/metrics)",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run()
    return 0

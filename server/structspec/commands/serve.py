"""``structspec serve``: an OpenAI-compatible server on the engine, or a metrics proxy.

``--model`` (or the config file / environment, or the embedded default) serves
the in-process speculative engine; ``--backend URL`` relays to another
OpenAI-compatible server and adds metrics; ``--backend auto`` picks the first
server ``structspec detect`` finds. Without ``--backend`` or ``--model``, the
``backend`` setting (config file, ``$STRUCTSPEC_BACKEND``), the language
server's remote engine, is relayed to, with ``backend_api_key``.

Security: binds 127.0.0.1 unless ``--host`` says otherwise, and there only
answers requests whose Host header names the loopback (DNS rebinding).
``--api-key KEY`` (or $STRUCTSPEC_API_KEY, which keeps the key out of the
process list) requires ``Authorization: Bearer KEY`` on every route but
/health. A non-loopback --host without a key refuses to start unless
--allow-unauthenticated says so. POSTs must be ``Content-Type:
application/json``, so no web page can start a generation. Slow and idle
connections are closed (--header-timeout, --body-timeout, --max-connections).
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from structspec.backends.address import AUTO, check_api_key, check_backend
from structspec.cli import UserError
from structspec.commands.common import add_model_arguments, settings_from_args
from structspec.config import Settings
from structspec.http.common import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES
from structspec.http.serving import DEFAULT_HEADER_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
API_KEY_ENV = "STRUCTSPEC_API_KEY"
BACKEND_API_KEY_ENV = "STRUCTSPEC_BACKEND_API_KEY"


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
    p.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"require 'Authorization: Bearer KEY' (default ${API_KEY_ENV}; /health stays open)",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="allow a non-loopback --host without an API key (anyone who reaches the port "
        "can use the server)",
    )
    p.add_argument(
        "--backend-api-key",
        metavar="KEY",
        help=f"with --backend: send 'Authorization: Bearer KEY' to the backend "
        f"(default ${BACKEND_API_KEY_ENV}); without it, a client's own Authorization header "
        "is relayed when serve has no --api-key",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_S,
        metavar="S",
        help="seconds a client has to send its request line and headers "
        f"(default {DEFAULT_HEADER_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=DEFAULT_BODY_TIMEOUT_S,
        metavar="S",
        help=f"seconds a client has to send its request body (default {DEFAULT_BODY_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="connections open at once; past it the longest-idle one is closed "
        f"(default {DEFAULT_MAX_CONNECTIONS})",
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
        except (TypeError, UnicodeError):
            # The resolver refused to encode the name (a label over 63 characters, say):
            # the socket module raises TypeError for that, not OSError.
            raise UserError(f"--host {host[:80]!r} is not an address or host name") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"{host}:{port} is already in use (pick another --port)") from None
            raise UserError(f"cannot bind {host}:{port}: {exc.strerror or exc}") from None


def _key(flag: str | None, env: str, name: str) -> str | None:
    """A key from its flag, else its environment variable; one that no client could
    send (empty, spaces, not ASCII) is an error."""
    value = flag if flag is not None else os.environ.get(env)
    if value is None:
        return None
    if not value.strip():
        raise UserError(f"{name} is empty; give a key or leave it out")
    why = check_api_key(value)
    if why is not None:
        raise UserError(f"{name} {why}")
    return value


def _check_limits(args: argparse.Namespace) -> None:
    if not 1 <= args.max_queue <= 100_000:
        raise UserError("--max-queue must be between 1 and 100000")
    if args.max_body_bytes < 1024:
        raise UserError("--max-body-bytes must be at least 1024")
    for flag in ("header_timeout", "body_timeout"):
        value = getattr(args, flag)
        if not 0.1 <= value <= 3600:
            raise UserError(f"--{flag.replace('_', '-')} must be between 0.1 and 3600 seconds")
    if not 1 <= args.max_connections <= 1_000_000:
        raise UserError("--max-connections must be between 1 and 1000000")


def _model_id(spec: str, name: str) -> str:
    if spec == "standin" or spec.startswith("standin:"):
        return spec
    return Path(name).stem if name.endswith(".gguf") else name


def _model_file_name(spec: str) -> str:
    """The name of the file ``spec`` opens (the embedded default's when empty), known
    before the model is loaded; the stand-in's spec is its own name."""
    if spec == "standin" or spec.startswith("standin:"):
        return spec
    if spec:
        return Path(spec).expanduser().name
    from structspec.model.paths import default_model_path

    return default_model_path(lambda line: print(line, file=sys.stderr)).name


def _proxy_app(
    args: argparse.Namespace, api_key: str | None, backend_key: str | None
) -> tuple[Any, str]:
    """The metrics proxy to ``--backend`` (``auto``: the first server ``detect`` finds)."""
    from structspec.http.proxy import create_proxy_app

    backend = args.backend  # checked by ``run`` (``check_backend``)
    if backend == AUTO:
        from structspec.detect import pick_backend, probe_backends

        found = pick_backend(probe_backends(exclude_ports=[args.port]))
        if found is None:
            raise UserError(
                "no backend answers on the usual ports (vLLM 8000, llama.cpp 8080, "
                "LM Studio 1234, Ollama 11434); start one or pass --backend URL"
            )
        backend = found.url
        print(f"structspec: backend {found.server} at {backend}", file=sys.stderr)
    app = create_proxy_app(
        backend,
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.body_timeout,
        relay_authorization=api_key is None,
        backend_api_key=backend_key,
    )
    return app, f"proxy to {backend}"


def _setting_backend(backend: str) -> str:
    """The proxy's URL for the ``backend`` setting: its server's base (the proxy relays
    ``/v1/...`` under it), without a path that pins a protocol for the language server."""
    from structspec.backends.address import split_url

    return backend if backend == AUTO else split_url(backend)[0]


def _model_app(
    args: argparse.Namespace, settings: Settings, explicit: Collection[str] = ()
) -> tuple[Any, str, Callable[[], None]]:
    """The OpenAI-compatible app over the model's engine, and its shutdown hook.

    Its ``/metrics`` say what the model costs here (``structspec_model_cost``,
    shown by ``structspec status``): the measured rates, and the window and
    first-suggestion time an editor gets from them (``explicit``: the
    settings a layer set, which the adaptive defaults leave).
    """
    from structspec.completion.status import model_cost
    from structspec.engine.decode import Engine
    from structspec.http.app import create_app
    from structspec.rates import Rates, adapt
    from structspec.runtime import load_engine, model_rates

    measured: list[Rates | None] = []

    def load() -> Engine:
        # On the engine's worker thread: the model's load, self-check, cost
        # table and rates run on the thread that decodes (one OpenMP team;
        # ``http/worker.py``).
        engine = load_engine(settings)
        measured.append(model_rates(engine.model))
        return engine

    model_id = _model_id(settings.model, _model_file_name(settings.model))
    app = create_app(
        load,
        model_id=model_id,
        max_queue=args.max_queue,
        max_body_bytes=args.max_body_bytes,
        body_timeout=args.body_timeout,
        default_max_tokens=settings.max_tokens,
        speculative=settings.speculative and not args.greedy,
        token_healing=settings.token_healing,
    )
    rates = measured[0]
    if rates is not None:
        cost = model_cost(rates, adapt(settings, rates, explicit))
        app.state.server.metrics.set_model_cost(cost.measures())
    return app, f"model {model_id!r}", app.state.server.begin_shutdown


def run(args: argparse.Namespace) -> int:
    from structspec.http.security import Guard, is_loopback_host
    from structspec.http.serving import Server, config, fit_fd_limit

    _check_limits(args)
    if args.backend and args.model:
        raise UserError("--model and --backend exclude each other (a proxy runs no model)")
    if args.backend is not None:
        # The same rule as the ``backend`` setting's, before anything binds or loads.
        try:
            check_backend(args.backend)
        except ValueError as exc:
            raise UserError(f"--{exc}") from None
    # Settings are checked in both modes: a broken config file is refused, not ignored.
    loaded = settings_from_args(args, max_tokens=args.max_tokens)
    settings = loaded.settings
    if args.backend is None and args.model is None and settings.backend:
        args.backend = _setting_backend(settings.backend)
    api_key = _key(args.api_key, API_KEY_ENV, f"--api-key / ${API_KEY_ENV}")
    if args.backend_api_key is not None and not args.backend:
        raise UserError("--backend-api-key needs --backend")
    backend_key = (
        _key(
            args.backend_api_key, BACKEND_API_KEY_ENV, f"--backend-api-key / ${BACKEND_API_KEY_ENV}"
        )
        or settings.backend_api_key
        or None
        if args.backend
        else None
    )
    loopback = is_loopback_host(args.host)
    if not loopback and api_key is None and not args.allow_unauthenticated:
        raise UserError(
            f"--host {args.host} is reachable from other machines and there is no API key: "
            f"set --api-key or ${API_KEY_ENV}, or pass --allow-unauthenticated to serve "
            "without one"
        )
    _check_port(args.host, args.port)
    max_connections = fit_fd_limit(args.max_connections)
    if max_connections < args.max_connections:
        print(
            f"structspec: warning: the open-files limit allows {max_connections} connections, "
            f"not {args.max_connections}",
            file=sys.stderr,
        )
    on_exit = None
    if args.backend:
        app, what = _proxy_app(args, api_key, backend_key)
    else:
        app, what, on_exit = _model_app(args, settings, loaded.explicit)
    if not loopback and api_key is None:
        print(
            f"structspec: warning: listening on {args.host}, reachable from other machines, "
            "with no API key (--allow-unauthenticated)",
            file=sys.stderr,
        )
    guarded = Guard(app, api_key=api_key, loopback_only=loopback)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(
        f"structspec: serving {what} on http://{host}:{args.port}/v1 "
        f"(metrics: http://{host}:{args.port}/metrics)",
        file=sys.stderr,
        flush=True,
    )
    auth = "API key required" if api_key else "no API key"
    print(f"structspec: {auth}; at most {max_connections} connections", file=sys.stderr)
    server_config = config(
        guarded,
        host=args.host,
        port=args.port,
        header_timeout=args.header_timeout,
        max_connections=max_connections,
    )
    Server(server_config, on_exit=on_exit).run()
    return 0

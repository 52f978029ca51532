"""``structspec-lsp``: run the language server over stdio (default) or TCP.

Settings come from the config file and ``STRUCTSPEC_*`` environment variables
(see ``structspec.config``), then from the client; ``--model``,
``--threads`` and ``--backend`` given here win over the client.

``--tcp HOST:PORT`` serves one client at a time (see ``structspec.lsp.transport``)
and refuses a HOST that is not a loopback address unless ``--allow-remote`` is
given: LSP has no authentication. Exit code: 0 after ``shutdown`` + ``exit``,
1 for ``exit`` without ``shutdown`` or a client that vanished, 128+N after
signal N, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import signal
import sys
from collections.abc import Sequence

from structspec import __version__
from structspec.files import touch_writable

log = logging.getLogger("structspec.lsp")
#: ``--log-file`` is rotated at this size (one old file kept).
LOG_MAX_BYTES = 10 * 1024 * 1024


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):  # [::1]:2087
        host = host[1:-1]
    return host or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="structspec-lsp",
        description="Language server for inline code completion from a local GGUF model.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)"
    )
    mode.add_argument(
        "--tcp",
        type=_host_port,
        metavar="HOST:PORT",
        help="listen on HOST:PORT (a loopback address unless --allow-remote) for one client "
        "at a time",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --tcp listen on an address other machines can reach; the protocol has no "
        "authentication, so anyone who can connect reads and completes your code",
    )
    parser.add_argument(
        "--model",
        metavar="SPEC",
        help="GGUF file (default: the embedded default model; 'standin' for tests)",
    )
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for the model")
    parser.add_argument(
        "--backend",
        metavar="URL",
        help="complete through a remote engine instead of a local model: a llama-server, "
        "OpenAI-compatible (vLLM, LM Studio, structspec serve) or Ollama URL, or auto "
        "(the first server `structspec detect` finds here)",
    )
    parser.add_argument("--log-file", metavar="PATH", help="write the server log here")
    parser.add_argument("--version", action="version", version=f"structspec-lsp {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:  # SIGINT while starting, before the transport handles it
        return 128 + signal.SIGINT


def _refuse_remote(host: str, port: int) -> bool:
    """Print why a non-loopback ``--tcp`` needs ``--allow-remote``; ``True`` if it does."""
    from structspec.lsp.transport import is_loopback

    if is_loopback(host):
        return False
    print(
        f"structspec-lsp: refusing to listen on {host}:{port}: it is not a loopback "
        "address, and the language server has no authentication (whoever connects "
        "reads the code you edit). Listen on 127.0.0.1 and tunnel (ssh -L), or pass "
        "--allow-remote on a network you trust.",
        file=sys.stderr,
    )
    return True


def _setup_logging(log_file: str | None) -> bool:
    """Log to ``log_file`` (INFO) or stderr (WARNING); ``False`` if the file cannot be opened."""
    handler: logging.Handler
    if log_file:
        try:
            touch_writable(log_file)  # a FIFO nobody reads: an error, not a hang
            # One INFO line per answer (~100 bytes): capped, not grown for the session's life.
            handler = logging.handlers.RotatingFileHandler(
                log_file, maxBytes=LOG_MAX_BYTES, backupCount=1, encoding="utf-8"
            )
        except OSError as exc:
            print(f"structspec-lsp: cannot open log file: {exc}", file=sys.stderr)
            return False
        level = logging.INFO
    else:
        handler = logging.StreamHandler(sys.stderr)  # stdout carries the protocol
        level = logging.WARNING
    logging.basicConfig(
        level=level, handlers=[handler], format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # pygls logs every message body at INFO and warns about routine races (a
    # cancel for a request already answered); keep the log about structspec.
    logging.getLogger("pygls").setLevel(logging.ERROR)
    return True


def _run(args: argparse.Namespace) -> int:
    if args.tcp and not args.allow_remote and _refuse_remote(*args.tcp):
        return 2
    if not _setup_logging(args.log_file):
        return 2

    from structspec.config import load_settings
    from structspec.lsp.server import build_server
    from structspec.lsp.transport import serve_stdio, serve_tcp

    flags = {"model": args.model, "threads": args.threads, "backend": args.backend}
    loaded = load_settings(flags)
    for error in loaded.errors:
        log.warning("%s", error)
    pinned = {k: v for k, v in flags.items() if v is not None}
    server = build_server(loaded.settings, pinned, loaded.explicit)
    for error in loaded.errors:
        server.startup_messages.append(("warning", f"structspec: {error}"))
    try:
        if args.tcp is None:
            code = serve_stdio(server)
        else:
            try:
                code = serve_tcp(server, *args.tcp)
            except OSError as exc:  # the address is in use or cannot be bound
                host, port = args.tcp
                print(f"structspec-lsp: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
                code = 2
    finally:
        server.service.close()
    if not server.service.join(timeout=5.0):
        # The worker is stuck in something that cannot be cancelled (a model file
        # that never finishes reading): exit anyway, the client asked us to.
        log.warning("the model worker did not stop: exiting")
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

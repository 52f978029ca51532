"""``structspec-lsp``: run the language server over stdio (default) or TCP.

Settings come from the config file and ``STRUCTSPEC_*`` environment variables
(see ``structspec.config``), then from the client; ``--model`` and
``--threads`` given here win over the client.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from structspec import __version__


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
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
        "--tcp", type=_host_port, metavar="HOST:PORT", help="listen for one client on HOST:PORT"
    )
    parser.add_argument(
        "--model",
        metavar="SPEC",
        help="GGUF file (default: the embedded default model; 'standin' for tests)",
    )
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for the model")
    parser.add_argument("--log-file", metavar="PATH", help="write the server log here")
    parser.add_argument("--version", action="version", version=f"structspec-lsp {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers: list[logging.Handler] = []
    level = logging.WARNING
    if args.log_file:
        try:
            handlers.append(logging.FileHandler(args.log_file, encoding="utf-8"))
            level = logging.INFO
        except OSError as exc:
            print(f"structspec-lsp: cannot open log file: {exc}", file=sys.stderr)
            return 2
    else:
        handlers.append(logging.StreamHandler(sys.stderr))  # stdout carries the protocol
    logging.basicConfig(
        level=level, handlers=handlers, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # pygls logs every message body at INFO and warns about routine races (a
    # cancel for a request already answered); keep the log about structspec.
    logging.getLogger("pygls").setLevel(logging.ERROR)

    from structspec.config import load_settings
    from structspec.lsp.server import build_server

    flags = {"model": args.model, "threads": args.threads}
    loaded = load_settings(flags)
    for error in loaded.errors:
        logging.getLogger("structspec.lsp").warning("%s", error)
    pinned = {k: v for k, v in flags.items() if v is not None}
    server = build_server(loaded.settings, pinned)
    for error in loaded.errors:
        server.startup_messages.append(("warning", f"structspec: {error}"))
    try:
        if args.tcp:
            host, port = args.tcp
            server.start_tcp(host, port)
        else:
            server.start_io()
    finally:
        server.service.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

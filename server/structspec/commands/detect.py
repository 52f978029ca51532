"""``structspec detect``: local LLM servers that answer, and GGUF files on disk."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from structspec.cli import UserError
from structspec.commands.terminal import shown


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "detect",
        help="find local LLM servers (vLLM, llama.cpp, LM Studio, Ollama) and GGUF files",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--host", default="127.0.0.1", help="host to probe (default 127.0.0.1)")
    p.add_argument("--timeout", type=float, default=0.5, help="seconds per probe (default 0.5)")
    p.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="DIR",
        help="also search this folder for GGUF files (repeatable)",
    )
    p.add_argument("--no-files", action="store_true", help="probe servers only")
    p.set_defaults(func=run)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _folder(value: str) -> Path:
    """``--path``'s folder; ``UserError`` unless it is one (``~nosuchuser`` included: the
    user's home is unknown, so there is no such folder)."""
    path = Path(value)
    try:
        path = path.expanduser()
    except RuntimeError:
        raise UserError(f"--path {value}: no such folder (no home folder for that user)") from None
    try:
        if path.is_dir():
            return path
    except OSError as exc:  # a name too long for the file system, say
        raise UserError(f"--path {value}: {exc.strerror or exc}") from None
    raise UserError(f"--path {path} is not a folder")


def run(args: argparse.Namespace) -> int:
    from structspec.detect import pick_backend, probe_backends, report, scan_gguf

    if not 0 < args.timeout <= 30:
        raise UserError("--timeout must be between 0 and 30 seconds")
    extra = [_folder(p) for p in args.path]
    try:
        backends = probe_backends(args.host, args.timeout)
    except ValueError as exc:  # a --host that is no host name or address
        raise UserError(str(exc)) from None
    if not args.json and not args.no_files:
        print("reading GGUF metadata (cached after the first run)...", file=sys.stderr, flush=True)
    files = [] if args.no_files else scan_gguf(extra)
    if args.json:
        print(json.dumps(report(backends, files), indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    servers = Table(title="Local servers", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("port", "expected", "status", "server", "models"):
        servers.add_column(col)
    for b in backends:
        if not b.running:
            status = "[dim]not running[/dim]"
        elif b.error:
            status = f"[yellow]{shown(b.error)}[/yellow]"
        else:
            status = "[green]answering[/green]"
        models = ", ".join(b.models[:4]) + (f" (+{len(b.models) - 4})" if len(b.models) > 4 else "")
        server = b.server if b.running else ""
        servers.add_row(str(b.port), b.name, status, shown(server), shown(models))
    console.print(servers)
    chosen = pick_backend(backends)
    console.print(
        f"serve --backend auto would use: {chosen.url} ({shown(chosen.server)})"
        if chosen
        else "serve --backend auto: nothing to use; 'structspec serve' runs the model in-process",
        highlight=False,
    )
    if args.no_files:
        return 0
    console.print()
    table = Table(title="GGUF files", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("where", "model", "size", "arch", "params", "quant", "context", "FIM", "chat"):
        table.add_column(col)
    for f in files:
        if f.error:
            table.add_row(
                f.location,
                shown(f.name),
                _size(f.size_bytes),
                f"[red]{shown(f.error)}[/red]",
                *[""] * 5,
            )
            continue
        table.add_row(
            f.location,
            shown(f.name),
            _size(f.size_bytes),
            shown(f.architecture),
            shown(f.parameters),
            shown(f.quantization),
            str(f.context_length or "?"),
            "yes" if f.fim else "no",
            "yes" if f.chat_template else "no",
        )
    console.print(table)
    if not files:
        console.print("no GGUF files found (see 'structspec detect --help' for where it looks)")
    else:
        for f in files:
            console.print(f"  {shown(f.path)}", highlight=False, soft_wrap=True)
    return 0

"""``structspec status``: a live dashboard of a running server's ``/metrics``.

Scrapes ``URL/metrics`` every ``--interval`` seconds and shows requests,
tokens, tokens/s, tokens per verification pass, draft acceptance per source,
queue depth, what the model costs on that machine (its prompt and decode
tokens/s, measured at its first loads on that machine, the prompt window they choose
and the expected first-suggestion time at a new place) and latency quantiles
(estimated from the histogram buckets, as Prometheus' ``histogram_quantile``
does). ``--once`` prints one snapshot
(``--json`` as JSON) and exits; a server that does not answer is exit status 2.
A server started with an API key is scraped with ``$STRUCTSPEC_API_KEY``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

import httpx

from structspec.backends.address import check_api_key, without_userinfo
from structspec.cli import UserError
from structspec.commands.terminal import shown
from structspec.metrics import Snapshot, snapshot


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="live dashboard of a running structspec server's metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the server (default http://127.0.0.1:8080)"
    )
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="with --once: print JSON")
    p.add_argument(
        "--interval", type=float, default=1.0, help="seconds between scrapes (default 1)"
    )
    p.set_defaults(func=run)


def fetch(url: str, timeout: float = 3.0) -> Snapshot:
    """One scrape of ``url``/metrics; ``UserError`` with one line if it fails."""
    target = url.rstrip("/").removesuffix("/v1") + "/metrics"
    where = without_userinfo(target)  # for messages
    key = os.environ.get("STRUCTSPEC_API_KEY")
    if key and (why := check_api_key(key)) is not None:
        # Refused here: the client could not put it in a header (UnicodeEncodeError).
        raise UserError(f"$STRUCTSPEC_API_KEY {why}")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(target, timeout=timeout, headers=headers)
    except httpx.InvalidURL as exc:  # ``:abc`` as the port: not an HTTPError
        raise UserError(f"--url {url[:80]!r} is not a usable URL: {exc}") from None
    except UnicodeError:  # a host name the resolver refuses (a label over 63 characters)
        raise UserError(f"--url {url[:80]!r} has no valid host name") from None
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {where}: {exc or type(exc).__name__}") from None
    if r.status_code == 401:
        raise UserError(f"{where} needs the server's API key: set STRUCTSPEC_API_KEY")
    if r.status_code != 200:
        raise UserError(f"{where} answered HTTP {r.status_code}")
    try:
        return snapshot(r.text)
    except ValueError as exc:
        raise UserError(f"{where}: {exc}") from None


def _s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def model_cost_line(cost: dict[str, float]) -> str:
    """What the model costs on the server's machine ('' until known, and for a proxy)."""
    try:
        return (
            f"prompt {cost['prompt_tokens_per_second']:.0f} tok/s, "
            f"decode {cost['decode_tokens_per_second']:.1f} tok/s; "
            f"window {cost['window_tokens']:.0f} tokens, "
            f"first suggestion at a new place in about {_s(cost['first_suggestion_seconds'])}"
        )
    except KeyError:
        return ""


def render(snap: Snapshot, url: str) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    ok = sum(v for k, v in snap.requests.items() if k.startswith("2"))
    failed = sum(v for k, v in snap.requests.items() if not k.startswith("2"))
    rows: list[tuple[str, str]] = [
        ("server", shown(f"{without_userinfo(url)}  ({snap.mode}: {snap.model})")),
        ("requests", f"{ok:.0f} ok, {failed:.0f} refused or failed"),
        ("tokens", f"{snap.tokens:.0f} generated, {snap.prompt_tokens:.0f} prompt"),
        ("tokens/s", f"{snap.tokens_per_second:.1f} (last 30 s)"),
        ("queue", f"{snap.queue_depth:.0f} waiting, {snap.active:.0f} running"),
        (
            "latency",
            f"p50 {_s(snap.latency_p50_s)}, p95 {_s(snap.latency_p95_s)}, "
            f"first text p50 {_s(snap.first_token_p50_s)}",
        ),
    ]
    if snap.mode == "engine":
        rows.append(
            (
                "passes",
                f"{snap.passes:.0f} ({snap.tokens_per_pass:.2f} tokens per pass, "
                f"p50 {_s(snap.pass_p50_s)})",
            )
        )
    else:
        rows.append(("relay", f"{snap.chunks:.0f} chunks, p50 {_s(snap.relay_p50_s)} added"))
    cost = model_cost_line(snap.model_cost)
    if cost:
        rows.append(("model here", cost))
    for k, v in rows:
        head.add_row(k, v)
    parts: list[Any] = [head]
    if snap.drafted:
        table = Table(title="drafts by source", title_justify="left")
        for col in ("source", "drafted", "accepted", "acceptance"):
            table.add_column(col, justify="right" if col != "source" else "left")
        for name, acc in sorted(snap.acceptance().items()):
            table.add_row(
                shown(name),
                f"{snap.drafted[name]:.0f}",
                f"{snap.accepted.get(name, 0):.0f}",
                f"{acc:.0%}",
            )
        parts.append(table)
    if snap.rejected:
        parts.append(
            "refused: " + ", ".join(f"{shown(k)} {v:.0f}" for k, v in sorted(snap.rejected.items()))
        )
    return Panel(Group(*parts), title="structspec status", title_align="left")


def run(args: argparse.Namespace) -> int:
    # NaN passes ``<= 0`` and inf or 1e300 overflow time.sleep: a finite, bounded number.
    if not (math.isfinite(args.interval) and 0 < args.interval <= 86400):
        raise UserError("--interval must be a number of seconds above 0 and at most 86400")
    if args.once:
        snap = fetch(args.url)
        if args.json:
            print(json.dumps(snap.to_dict(), indent=2))
        else:
            from rich.console import Console

            Console().print(render(snap, args.url))
        return 0
    from rich.console import Console
    from rich.live import Live

    console = Console()
    snap = fetch(args.url)  # fail fast with one line if nothing answers
    with Live(render(snap, args.url), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(args.interval)
            try:
                live.update(render(fetch(args.url), args.url))
            except UserError as exc:
                live.update(f"[red]{shown(str(exc))}[/red] (retrying; Ctrl-C to quit)")

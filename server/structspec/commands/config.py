"""``structspec config``: the effective settings and where each value came from.

Layers, lowest first: ``default``, ``file`` (the config file), ``env``
(``STRUCTSPEC_<NAME>``), ``flag``. The config file is TOML at
``$STRUCTSPEC_CONFIG`` if set, else ``$XDG_CONFIG_HOME/structspec/config.toml``
(``~/.config/structspec/config.toml``); keys are the setting names
(``max_tokens = 64``, ``sources = ["lookup", "rules"]``). Bad values are
reported and the layer below is kept.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from typing import Any

from structspec.commands.terminal import shown
from structspec.config import Settings, camel, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "config",
        help="show the effective configuration and the origin of each value",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--path", action="store_true", help="print only the config file location")
    p.set_defaults(func=run)


#: Settings whose value is a secret: shown only as set or not.
SECRETS = frozenset({"backend_api_key"})


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _shown(name: str, value: Any) -> Any:
    if name in SECRETS:
        return "(set)" if value else ""
    return _plain(value)


def run(args: argparse.Namespace) -> int:
    loaded = load_settings()
    if args.path:
        print(loaded.path)
        return 0
    rows = [
        {
            "name": f.name,
            "value": _shown(f.name, getattr(loaded.settings, f.name)),
            "origin": loaded.origins[f.name],
            "env": f"STRUCTSPEC_{f.name.upper()}",
            "flag": "--" + f.name.replace("_", "-"),
            "lsp": camel(f.name),
        }
        for f in fields(Settings)
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "config_file": str(loaded.path),
                    "config_file_exists": loaded.present,
                    "settings": {
                        r["name"]: {"value": r["value"], "origin": r["origin"]} for r in rows
                    },
                    "errors": loaded.errors,
                },
                indent=2,
            )
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    exists = "" if loaded.present else " (not present: defaults apply)"
    console.print(f"config file: {shown(str(loaded.path))}{exists}", highlight=False)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("setting", "value", "origin", "environment", "LSP / VS Code"):
        table.add_column(col)
    for r in rows:
        value = r["value"]
        if r["name"] == "model" and not value:
            text = '"" (the embedded default model)'
        else:
            text = json.dumps(value) if not isinstance(value, str) else value
        table.add_row(r["name"], shown(text), r["origin"], r["env"], r["lsp"])
    console.print(table)
    for err in loaded.errors:
        console.print(f"[yellow]warning:[/yellow] {shown(str(err))}", highlight=False)
    return 0

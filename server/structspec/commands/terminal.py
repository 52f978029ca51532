"""What the commands print with rich: text from outside shown as text."""

from __future__ import annotations


def shown(text: str) -> str:
    """``text`` from outside (a file, a server, a setting) as rich prints it: its control
    characters (a terminal's escape sequences) replaced, its rich markup (``[/bold]``,
    which fails the print) escaped."""
    from rich.markup import escape

    return escape("".join(ch if ch.isprintable() else "?" for ch in text))

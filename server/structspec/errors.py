"""Errors every layer may raise for the user to read (a leaf: imports nothing of structspec)."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit status 2."""

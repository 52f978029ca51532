"""CLI commands, one module each; see ``structspec.cli``."""

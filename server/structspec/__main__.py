"""``python -m structspec`` runs the CLI."""

from structspec.cli import main

raise SystemExit(main())

"""Draft sources: cheap guesses of the next tokens, verified by the model.

Each source is its own module; ``registry`` builds them by name.
"""

from structspec.drafts.base import Draft, DraftContext, DraftSource

__all__ = ["Draft", "DraftContext", "DraftSource"]

"""Editor-independent inline completion on top of the engine.

``CompletionService`` keeps the open documents (``documents``), builds prompts
that stay stable while typing (``prompt``), decides between a single line and
a block and cleans the model's text (``suggest``), serves typed-through
suggestions from a cache (``cache``), feeds the other open buffers to the
lookup source (``corpus``) and counts what the user accepts (``stats``). The
language server (``structspec.lsp``) is a thin protocol layer over it.
"""

from structspec.completion.documents import Document, DocumentStore, Range, TextChange
from structspec.completion.service import (
    CompletionRequest,
    CompletionService,
    Status,
    Suggestion,
)

__all__ = [
    "CompletionRequest",
    "CompletionService",
    "Document",
    "DocumentStore",
    "Range",
    "Status",
    "Suggestion",
    "TextChange",
]

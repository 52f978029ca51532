"""Editor-independent inline completion on top of the engine.

``CompletionService`` (``service``: sessions, debounce, status) keeps the open
documents (``documents``) and runs each completion on its worker thread
(``host`` holds the model and engine, ``generate.run_completion`` one
completion start to end). It builds prompts
that stay stable while typing (``prompt``), decides between a single line and
a block and cleans the model's text (``suggest``), serves typed-through
suggestions from a cache (``cache``), feeds the other open buffers to the
lookup source (``corpus``) and counts what the user accepts (``stats``). The
language server (``structspec.lsp``) is a thin protocol layer over it.
"""

from structspec.completion.documents import Document, DocumentStore, Range, TextChange
from structspec.completion.service import CompletionService
from structspec.completion.types import CompletionRequest, Status, Suggestion

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

"""Editor-independent inline completion on top of the engine.

``CompletionService`` (``service``: sessions, debounce, cancellation, status)
keeps the open documents (``documents``) and runs each completion on its
worker thread: ``host`` holds the model and engine, ``generate.run_completion``
runs one completion start to end. Prompts stay stable while typing
(``prompt``); ``suggest`` decides between a single line and a block and cleans
the model's text; ``cache`` serves typed-through suggestions; ``corpus`` feeds
the other open buffers to the sources that read them; ``stats`` counts what the
user accepts; ``types`` holds the request, suggestion and status values. The
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

"""Editor-independent inline completion on top of the engine.

``CompletionService`` (``service``) is a thin facade over one module per job:
it keeps the open documents (``documents``) and settings; ``request`` answers
each request (sharing or adopting the job in flight, ``jobs``; typing through
the suggestion on screen, ``cache``; debounce, ``debounce``); ``worker`` owns
the worker thread, where ``host`` holds the model and engine and
``generate.run_completion`` runs one completion start to end; ``background``
pre-warms (``prewarm``) and pre-generates while the user pauses; ``status``
reports the state and messages. Prompts stay stable while typing (``prompt``);
``suggest`` decides between a single line and a block and cleans the model's
text; ``corpus`` feeds the other open buffers to the sources that read them;
``stats`` counts what the user accepts; ``types`` holds the request,
suggestion and status values. The language server (``structspec.lsp``) is a
thin protocol layer over it.
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

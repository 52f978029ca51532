"""The structspec language server (``structspec-lsp``): inline completion over LSP.

``build_server`` wires pygls handlers to ``structspec.completion.CompletionService``;
``structspec.lsp.__main__`` is the command line.
"""

from structspec.lsp.server import StructspecServer, build_server

__all__ = ["StructspecServer", "build_server"]

"""The structspec language server (``structspec-lsp``): inline completion over LSP.

``structspec.lsp.server.build_server`` wires pygls handlers to
``structspec.completion.CompletionService``; ``structspec.lsp.__main__`` is the
command line. This package module imports nothing, so that no module of the
package reaches ``server`` through it (``protocol`` and ``pygls_compat`` sit
below ``server``).
"""

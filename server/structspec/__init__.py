"""structspec: local code completion with model-free speculative decoding.

Layers, from the bottom up:

- ``structspec.model``: the model layer. ``Model`` is the protocol the engine
  decodes with; ``LlamaModel`` implements it over llama-cpp-python's low-level
  API and ``StandInModel`` is a deterministic numpy model for exactness tests.
- ``structspec.drafts``: draft sources (``propose(context) -> tokens``), one
  module each.
- ``structspec.engine``: the decode loops (greedy and speculative) and the
  draft-length control. Pure logic: no I/O, no LSP, no HTTP.
- ``structspec.lsp``, ``structspec.http``, ``structspec.cli``: the surfaces.
  They talk to the engine, never to llama.cpp.
"""

__version__ = "0.1.0"

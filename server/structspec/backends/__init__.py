"""Remote inference engines the language server completes through (the ``backend`` setting).

``client`` speaks llama-server's ``/infill`` and ``/completion``, the
OpenAI-compatible ``/v1/completions`` and Ollama's ``/api/generate``, streamed;
``fim`` builds fill-in-the-middle prompts from a model family's template for
the protocols that take a plain prompt. Nothing here knows about editors or
the local engine: a request is text before and after the cursor, the answer a
stream of text.
"""

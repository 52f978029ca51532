"""Draft sources: cheap guesses of the next tokens, verified by the model.

Each source is its own module, listed as plain data in ``structspec.sources``;
``registry`` builds them by name, and ``base`` holds the interface (``Draft``,
``DraftContext``, ``DraftSource``). This package imports nothing when loaded.
"""

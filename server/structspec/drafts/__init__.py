"""Draft sources: cheap guesses of the next tokens, verified by the model.

Each source is its own module; ``registry`` lists and builds them by name, and
``base`` holds the interface (``Draft``, ``DraftContext``, ``DraftSource``).
This package imports nothing when loaded, so that ``structspec.config`` can
read the source names from the registry without pulling in the sources.
"""

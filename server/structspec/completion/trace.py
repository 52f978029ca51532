"""Generation trace: every model generation as one JSON line, for exactness checks.

When the environment variable ``STRUCTSPEC_TRACE`` names a file, ``record``
appends ``{"prompt": [token ids], "tokens": [generated ids]}`` to it (and
``"healed": "<hex>"``, the prompt bytes token healing removed, when it did: the
first generated tokens were then constrained to reproduce them, so they are
not the plain argmax). The editor benchmark sets it for its language server
and checks every traced token against the teacher-forced argmax afterwards.

Tracing must never disturb a completion: the file is opened per record
(append-only, one ``write`` per line under a lock, so lines from several
threads never interleave), and a failure is logged once and otherwise
ignored. Nothing happens when the variable is unset, nor for a generation
of no tokens (nothing to check).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

#: The environment variable naming the trace file.
TRACE_ENV = "STRUCTSPEC_TRACE"

_lock = threading.Lock()
_failed: set[str] = set()  # paths whose failure was logged (once each)


def record(prompt: Sequence[int], tokens: Sequence[int], healed: bytes = b"") -> None:
    """Append one generation to the trace file, if ``STRUCTSPEC_TRACE`` names one."""
    path = os.environ.get(TRACE_ENV)
    if not path or not tokens:
        return
    entry: dict[str, object] = {
        "prompt": [int(t) for t in prompt],
        "tokens": [int(t) for t in tokens],
    }
    if healed:
        entry["healed"] = healed.hex()
    line = json.dumps(entry, separators=(",", ":")) + "\n"
    with _lock:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line)
        except OSError as exc:
            if path not in _failed:
                _failed.add(path)
                log.warning("%s=%s: cannot write the trace: %s", TRACE_ENV, path, exc)

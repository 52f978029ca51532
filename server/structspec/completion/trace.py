"""Generation trace: every model generation as one JSON line, for exactness checks.

When the environment variable ``STRUCTSPEC_TRACE`` names a file, ``record``
appends ``{"prompt": [token ids], "tokens": [generated ids]}`` to it (and
``"healed": "<hex>"``, the prompt bytes token healing removed, when it did: the
first generated tokens were then constrained to reproduce them, so they are
not the plain argmax). The editor benchmark sets it for its language server
and checks every traced token against the teacher-forced argmax afterwards.

An editor's generation also carries what a replay of it needs
(``bench/recording.py``: ``recording_from_trace``), when the caller passes it:
``kind`` (``completion``, ``cancelled`` when an edit cancelled it,
``pregeneration``), ``language``, the options (``max_tokens``, ``stop``),
``stop_reason``, the margin of the row that chose each token (``margins``;
one more for the end-of-generation token ``end`` when the model chose it),
and the draft sources' inputs: ``suffix`` (the text after the cursor),
``recent`` (the document's latest generations, newest first) and ``corpus``
(the other buffers). Those three are token lists that repeat from one
generation to the next, so each is written once, as a line
``{"seq": "<id>", "tokens": [...]}`` before the first generation that names
it, and generations name them by id.

Tracing must never disturb a completion: the file is opened per record
(append-only, one ``write`` per line under a lock, so lines from several
threads never interleave), and a failure is logged once and otherwise
ignored. Nothing happens when the variable is unset, nor for a generation
of no tokens (nothing to check).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: The environment variable naming the trace file.
TRACE_ENV = "STRUCTSPEC_TRACE"

_lock = threading.Lock()
_failed: set[str] = set()  # paths whose failure was logged (once each)
#: Per trace file: the ids of the token lists already written to it.
_written: dict[str, set[str]] = {}


def enabled() -> bool:
    """Whether generations are traced (callers then ask the engine for the margins)."""
    return bool(os.environ.get(TRACE_ENV))


def sequence_id(tokens: Sequence[int]) -> str:
    """A token list's id in a trace: a hash of its content (equal lists share one)."""
    return hashlib.sha1(",".join(map(str, tokens)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Replayable:
    """What a replay of an editor generation needs beyond its prompt and tokens."""

    kind: str
    language: str | None
    max_tokens: int
    stop: tuple[str, ...]
    stop_reason: str
    margins: Sequence[float]
    end_token: int | None = None
    suffix: Sequence[int] = ()
    recent: Sequence[Sequence[int]] = ()
    corpus: Sequence[Sequence[int]] = ()


def record(
    prompt: Sequence[int],
    tokens: Sequence[int],
    healed: bytes = b"",
    replayable: Replayable | None = None,
) -> None:
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
    sequences: dict[str, list[int]] = {}
    if replayable is not None:
        r = replayable

        def name(seq: Sequence[int]) -> str:
            ints = [int(t) for t in seq]
            sid = sequence_id(ints)
            sequences[sid] = ints
            return sid

        entry.update(
            kind=r.kind,
            language=r.language,
            max_tokens=r.max_tokens,
            stop=list(r.stop),
            stop_reason=r.stop_reason,
            margins=[round(float(m), 4) for m in r.margins],
            suffix=name(r.suffix),
            recent=[name(s) for s in r.recent],
            corpus=[name(s) for s in r.corpus],
        )
        if r.end_token is not None:
            entry["end"] = int(r.end_token)
    with _lock:
        try:
            written = _written.setdefault(path, set())
            if not os.path.exists(path):
                written.clear()  # a new file: nothing of it is written yet
            lines = [
                json.dumps({"seq": sid, "tokens": seq}, separators=(",", ":")) + "\n"
                for sid, seq in sequences.items()
                if sid not in written
            ]
            lines.append(json.dumps(entry, separators=(",", ":")) + "\n")
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("".join(lines))
            written.update(sequences)
        except OSError as exc:
            if path not in _failed:
                _failed.add(path)
                log.warning("%s=%s: cannot write the trace: %s", TRACE_ENV, path, exc)

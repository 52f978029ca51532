"""``structspec serve`` on a slow stand-in model, for tests of disconnects and shutdown.

Usage: ``python -m tests.helpers.slow_serve DELAY structspec serve ARGS...`` with
the repository root on ``PYTHONPATH`` (``ServeProcess`` sets it). The command
runs exactly as a user runs it (``structspec.cli.main``); only the model it
opens is replaced by the stand-in with ``DELAY`` seconds per verification pass
and EOS made impossible, so a generation lasts as long as ``max_tokens`` says.
"""

from __future__ import annotations

import sys
from typing import Any

from tests.helpers.http_server import SlowModel

import structspec.runtime as runtime
from structspec.cli import main


def _slow_model(spec: str, *, context_size: int = 4096, **_: Any) -> SlowModel:
    return SlowModel(float(sys.argv[1]), seed=0, n_ctx=context_size, eos_bias=-50.0)


if __name__ == "__main__":
    runtime.open_model = _slow_model  # type: ignore[assignment]
    assert sys.argv[2] == "structspec"
    raise SystemExit(main(sys.argv[3:]))

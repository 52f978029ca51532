"""Test-wide set-up: no test reads or writes the user's prompt-prefix cache.

A prefix restored from an earlier run changes how a prompt is evaluated (and,
on the real model, the batch shapes behind its logits), so the on-disk cache
is off for every test and every server a test starts, unless the test turns
it on in a folder of its own (``tests/model/test_prefix_cache.py``).
"""

from __future__ import annotations

import os

os.environ["STRUCTSPEC_CACHE_DIR"] = ""

"""The notebook measurement: real files cut into cells, and a stand-in run both ways."""

from __future__ import annotations

import pytest

from structspec.bench.infill import TYPED
from structspec.bench.notebooks import cells_of, run_notebook_benchmark

SOURCE = '''"""A module."""
import os
import sys


# The answer.
@decorated
def f():

    return 1


x = f()
if x:
    y = 2
'''


def test_a_file_is_cut_at_top_level_statements_after_blank_lines():
    cells = cells_of(SOURCE)
    assert [first for first, _ in cells] == [0, 5, 12]
    assert cells[0][1] == '"""A module."""\nimport os\nimport sys'  # no trailing blank lines
    assert cells[1][1].startswith("# The answer.\n@decorated\ndef f():")  # comments, decorators
    assert cells[2][1] == "x = f()\nif x:\n    y = 2"
    with pytest.raises(SyntaxError):
        cells_of("def (:\n")


def test_the_measurement_asks_each_line_both_ways_through_the_language_server():
    lines: list[str] = []
    result = run_notebook_benchmark("standin", 1, lines.append, limit=2, timeout_s=120)
    for way in ("notebook", "cells"):
        for config in ("no context", "project context"):
            assert result[way][config]["cases"] == 2
    records = result["lines"]
    assert len(records) == 2 * 2 * 2 * (TYPED + 1)  # ways x configurations x lines x asks
    assert {r["part"] for r in records} == {"notebook", "cells"}
    # Every ask answered (the stand-in always writes): a way that served nothing fails.
    assert all(r["reason"] in ("model", "without-model") for r in records), records
    assert any("notebook (2 lines):" in line for line in lines)

"""The prefill-cost table (``python -m structspec.bench.prefill``) on the stand-in model."""

from __future__ import annotations

from structspec.bench import prefill


def test_prefill_table_has_a_row_per_window_length(capsys):
    assert prefill.main(["--model", "standin", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == list(prefill.LENGTHS)
    for row in rows:
        ms, rate = (float(x) for x in row.split("|")[2:4])
        assert ms > 0 and rate > 0
    waits = [line for line in out.splitlines() if line.startswith("a keystroke")]
    assert len(waits) == 2 and "pre-warm chunk" in waits[0]
    assert f"a verification pass of {prefill.PASS_ROWS} rows" in waits[1]
    assert "llama.cpp's output head" in waits[1]  # the stand-in has no head of its own

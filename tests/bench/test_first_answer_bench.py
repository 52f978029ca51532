"""The first-answer measurement: the answer before suggestions grew, and a stand-in run."""

from __future__ import annotations

from structspec.bench.first_answer import run_first_answer_benchmark, score, without_growing


def test_before_suggestions_grew_a_keystroke_along_one_showed_the_rest_of_it():
    assert without_growing("path", "p", "ath.join(a)") == "ath"
    assert without_growing("path", "x", "xyz") == "xyz"  # not along it: the model's answer
    assert without_growing("p", "p", "ath.join(a)") == "ath.join(a)"  # typed whole: past it
    assert without_growing("", "p", "ath") == "ath"


def test_the_scores_count_what_each_way_shows():
    got = score({"a": [("path.x", "path.x"), ("path.y", "path.x"), ("", "z")]}, 3)
    assert got["a"] == {"cases": 3, "shown": 2, "exact": 1, "words": 2, "chars": 6}


def test_the_measurement_asks_at_once_and_after_a_keystroke():
    lines: list[str] = []
    result = run_first_answer_benchmark("standin", 1, lines.append, limit=4, timeout_s=120)
    shown, old = result["as shown"], result["without growing"]
    assert shown["cases"] == old["cases"] > 0
    assert shown["shown"] > 0  # the stand-in always writes
    assert any(line.startswith("as shown") for line in lines), lines

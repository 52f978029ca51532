"""What the editor benchmark measures and its summaries (``bench/editor_stats.py``)."""

from __future__ import annotations

from structspec.bench.editor_stats import (
    Answer,
    PacedPoint,
    paced_summary,
    split_answers,
    without_model,
)


def test_split_of_model_and_cache_answers():
    answers = [Answer(100.0, False, True), Answer(300.0, False, True), Answer(2.0, True, True)]
    split = split_answers(answers)
    assert split["all"]["n"] == 3 and split["all"]["p50_ms"] == 100.0
    assert split["model"] == {"n": 2, "p50_ms": 200.0, "p95_ms": 290.0}
    assert split["cache"] == {"n": 1, "p50_ms": 2.0, "p95_ms": 2.0}
    assert split_answers([])["model"] == {"n": 0, "p50_ms": 0.0, "p95_ms": 0.0}


def test_answers_without_the_model_count_every_served_from_counter():
    stats = {"servedFromCache": 3, "servedFromPregeneration": 2, "shown": 7, "requests": 12}
    assert without_model(stats) == 5


def test_paced_summary_counts_answers_in_time_and_the_wait_for_the_first_suggestion() -> None:
    points = [
        PacedPoint([10.0, None, 30.0], [False, False, True], 330.0),
        PacedPoint([None, 50.0], [False, False], None),
    ]
    s = paced_summary(points)
    assert (s["keystrokes"], s["answered"], s["shown"]) == (5, 3, 1)
    assert s["answered_p50_ms"] == 30.0 and s["points_without"] == 1
    assert s["first_shown_p50_ms"] == s["first_shown_max_ms"] == 330.0

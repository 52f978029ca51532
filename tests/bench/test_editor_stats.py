"""What the editor benchmark measures and its summaries (``bench/editor_stats.py``)."""

from __future__ import annotations

from structspec.bench.editor_stats import (
    Answer,
    JumpPlace,
    PacedPoint,
    jump_summary,
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


def test_jump_summary_from_a_scripted_trace() -> None:
    """Two files opened and one jump: the first suggestion from arriving, keys, empty reasons."""
    places = [
        JumpPlace(
            True,
            [Answer(400.0, False, False), Answer(120.0, False, True, 5)],
            ["prompt-unfinished", None],
            520.0,
        ),
        JumpPlace(
            True,
            [Answer(300.0, False, False), Answer(90.0, False, False), Answer(60.0, False, False)],
            ["model-empty", "stop-rule", "cleaned-away"],
            None,
        ),
        JumpPlace(False, [Answer(80.0, False, True, 9), Answer(1.0, True, True, 8)], [None, None]),
    ]
    places[2].first_shown_ms = 80.0
    s = jump_summary(places)
    assert s["first_shown"] == {
        "n": 3,
        "without": 1,
        "p50_ms": 300.0,
        "p95_ms": 498.0,
        "max_ms": 520.0,
    }
    assert s["first_shown_opened"]["n"] == 2 and s["first_shown_opened"]["p50_ms"] == 520.0
    assert s["first_shown_jumped"] == {
        "n": 1,
        "without": 0,
        "p50_ms": 80.0,
        "p95_ms": 80.0,
        "max_ms": 80.0,
    }
    assert s["keys"]["all"]["n"] == 7 and s["keys"]["cache"]["n"] == 1
    assert s["keys"]["model"]["n"] == 6 and s["keys"]["model"]["p50_ms"] == 105.0
    assert s["first_keys"]["all"]["n"] == 3 and s["first_keys"]["all"]["p50_ms"] == 300.0
    assert (s["empty"], s["empty_fraction"]) == (4, round(4 / 7, 4))
    assert (s["empty_model_choice"], s["empty_other"]) == (2, 2)
    assert s["empty_reasons"] == {
        "cleaned-away": 1,
        "model-empty": 1,
        "prompt-unfinished": 1,
        "stop-rule": 1,
    }
    assert jump_summary([])["empty_fraction"] == 0.0

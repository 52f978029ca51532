"""Settings layered from every surface: bad values reported, never raised (``config.apply``)."""

from __future__ import annotations

from structspec.config import Settings, apply


def test_unknown_source_names_are_dropped_with_an_error_and_the_rest_apply() -> None:
    settings, changed, errors = apply(Settings(), {"sources": ["lookup", "telepathy"]})
    assert settings.sources == ("lookup",) and changed == ["sources"]
    assert len(errors) == 1 and "unknown draft source(s) telepathy" in errors[0]
    assert "choose from all, lookup" in errors[0] and errors[0].endswith("keeping ('lookup',)")


def test_sources_with_no_known_name_keep_the_value_below() -> None:
    base = Settings(sources=("rules",))
    settings, changed, errors = apply(base, {"sources": "tea, telepathy"})
    assert settings.sources == ("rules",) and changed == []
    assert len(errors) == 1 and "tea, telepathy" in errors[0]


def test_known_sources_and_none_at_all_are_no_error() -> None:
    assert apply(Settings(), {"sources": ["all"]})[2] == []
    settings, _, errors = apply(Settings(), {"sources": []})
    assert settings.sources == () and errors == []

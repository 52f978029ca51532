"""Settings layered from every surface: bad values reported, never raised (``config.apply``)."""

from __future__ import annotations

from pathlib import Path

from structspec.config import Settings, apply, load_settings


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


def test_backend_settings_have_one_name_per_surface(tmp_path: Path) -> None:
    lsp = {
        "backend": "http://gpu:8000/v1",
        "backendApiKey": "k",
        "backendModel": "qwen2.5-coder:7b",
        "fimTemplate": "<P>{prefix}<S>{suffix}<M>",
    }
    settings, changed, errors = apply(Settings(), lsp, camel_case=True)
    assert errors == [] and changed == [
        "backend",
        "backend_api_key",
        "backend_model",
        "fim_template",
    ]
    assert settings.backend == "http://gpu:8000/v1" and settings.backend_api_key == "k"
    env = {
        "STRUCTSPEC_CONFIG": str(tmp_path / "none.toml"),
        "STRUCTSPEC_BACKEND": "http://127.0.0.1:11434",
        "STRUCTSPEC_BACKEND_API_KEY": "e",
        "STRUCTSPEC_BACKEND_MODEL": "m",
        "STRUCTSPEC_FIM_TEMPLATE": "{prefix}|{suffix}",
    }
    loaded = load_settings({"backend": "http://flag:8080"}, env)
    assert loaded.errors == []
    assert loaded.settings.backend == "http://flag:8080" and loaded.origins["backend"] == "flag"
    assert (loaded.settings.backend_api_key, loaded.settings.backend_model) == ("e", "m")
    assert loaded.settings.fim_template == "{prefix}|{suffix}"


def test_a_backend_key_no_header_can_carry_is_refused_and_never_shown() -> None:
    base = Settings(backend_api_key="old-secret")
    for bad in ("caf\u00e9", "two words", "tab\tkey"):
        settings, changed, errors = apply(base, {"backendApiKey": bad}, camel_case=True)
        assert settings == base and changed == []
        assert len(errors) == 1 and "printable ASCII" in errors[0]
        assert "old-secret" not in errors[0] and bad not in errors[0]
    assert apply(base, {"backend_api_key": "sk-new_1"})[0].backend_api_key == "sk-new_1"
    assert apply(base, {"backend_api_key": ""})[0].backend_api_key == ""  # none


def test_a_bad_backend_url_or_fim_template_is_reported_and_not_applied() -> None:
    base = Settings(backend="http://good:8080")
    settings, changed, errors = apply(
        base, {"backend": "gpu-box:8080", "fimTemplate": "<P>{prefix}<M>"}, camel_case=True
    )
    assert changed == [] and settings == base
    assert "http:// or https://" in errors[0] and "keeping 'http://good:8080'" in errors[0]
    assert "{suffix}" in errors[1]
    assert apply(base, {"backend": ""})[0].backend == ""  # empty: back to the local model
    assert apply(base, {"backend": "auto"}) == (Settings(backend="auto"), ["backend"], [])

"""Which settings a layer set (they win over the adaptive defaults, ``structspec.rates``)."""

from __future__ import annotations

from pathlib import Path

from structspec.config import Settings, load_settings
from structspec.lsp.server import build_server


def test_every_layer_marks_what_it_sets():
    server = build_server(Settings(model="standin"), {"threads": 1}, explicit={"window_tokens"})
    try:
        server.init_values = {"maxTokens": 8}
        server.client_values = {"maxGenerationMs": 400, "debounceMs": None}
        settings, explicit, errors = server.effective_settings()
    finally:
        server.service.close()
    assert errors == []
    assert (settings.max_tokens, settings.max_generation_ms, settings.threads) == (8, 400, 1)
    assert explicit == {"window_tokens", "max_tokens", "max_generation_ms", "threads"}


def test_loaded_settings_name_what_the_file_env_and_flags_set(tmp_path: Path):
    config = tmp_path / "config.toml"
    config.write_text("window_tokens = 900\n")
    env = {"STRUCTSPEC_CONFIG": str(config), "STRUCTSPEC_MAX_TOKENS": "64"}
    loaded = load_settings({"threads": 1, "model": None}, env=env)
    assert loaded.explicit == {"window_tokens", "max_tokens", "threads"}
    assert load_settings(env={"STRUCTSPEC_CONFIG": str(tmp_path / "none.toml")}).explicit == set()

"""Settings shared by every surface: CLI flags, the config file, environment, LSP, HTTP.

One name per idea. A setting ``max_tokens`` is:

- ``max_tokens`` in the config file (TOML) and in Python,
- ``--max-tokens`` on the command line,
- ``STRUCTSPEC_MAX_TOKENS`` in the environment,
- ``maxTokens`` in LSP ``initializationOptions`` / ``workspace/configuration``
  (section ``structspec``) and in the VS Code setting ``structspec.maxTokens``.

Precedence, lowest first: default, config file, environment, flag (or LSP
client). A bad value never raises here: it is reported in ``errors`` and the
value from the layer below is kept; of ``sources`` only the unknown names are
dropped (an editor may name a source this server does not have: the known ones
still apply). The language server goes on that way (and tells the user); the
commands that run the model (``run``, ``serve``, ``benchmark``) refuse to
start instead (``commands.common.settings_from_args``), because a typo would
otherwise silently drop settings such as ``model``.

The config file is ``$STRUCTSPEC_CONFIG`` if set, else
``$XDG_CONFIG_HOME/structspec/config.toml`` (``~/.config/structspec/config.toml``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# The draft sources' names come from their table (plain data, on this layer); the
# backend URL and FIM template checks from the remote engines' client (same layer).
from structspec.backends.address import check_api_key, check_backend
from structspec.backends.fim import parse_template
from structspec.files import MIB, read_bounded_text
from structspec.sources import SOURCE_NAMES as SOURCE_NAMES
from structspec.sources import resolve_sources as resolve_sources

#: The largest config file read (a settings file is a few hundred bytes).
MAX_CONFIG_BYTES = 1 * MIB


def _default_threads() -> int:
    return max(1, min(os.cpu_count() or 2, 8))


@dataclass(frozen=True)
class Settings:
    """Typed settings; see the module docstring for names and precedence."""

    model: str = ""  # GGUF path; empty: the embedded default model
    threads: int = field(default_factory=_default_threads)
    context_size: int = 4096
    # Load a GGUF's Q5_0 matrices as Q8_0: the same weights, a faster prompt
    # evaluation, a copy of the model in the cache folder (model/widen.py).
    widen_weights: bool = True
    window_tokens: int = 1536  # most prompt tokens of the file before the cursor; 0: what fits
    max_tokens: int = 128
    max_latency_ms: int = 1500  # a prompt evaluation past this (from the keystroke) stops
    max_generation_ms: int = 250  # then the model writes until the end of a word
    # The longest wait before asking the model (completion/debounce.py); 0: ask at once,
    # measured faster than 60 ms since a keystroke can adopt the generation in flight.
    debounce_ms: int = 0
    languages: tuple[str, ...] = ()  # LSP languageIds to complete; empty: all
    sources: tuple[str, ...] = ("all",)
    rules_file: str = ""  # rules mined with `structspec mine`; empty: the packaged default
    prefix_reuse: bool = True
    speculative: bool = True
    token_healing: bool = True  # finish a partial word at the cursor (engine/healing.py)
    project_context: bool = False  # snippets of other open files before the prompt window
    # A remote engine to complete through instead of the local model (backends/client.py):
    # a llama-server, OpenAI-compatible or Ollama URL, or "auto" (the first one
    # `structspec detect` finds on this machine); empty: the local GGUF model.
    backend: str = ""
    # Sent as "Authorization: Bearer KEY"; kept out of the settings' repr (logs, messages).
    backend_api_key: str = field(default="", repr=False)
    backend_model: str = ""  # the remote model's name; empty: the server's first model
    fim_template: str = ""  # "...{prefix}...{suffix}..."; empty: by the model's family

    def source_names(self) -> tuple[str, ...]:
        """The enabled draft sources, ``all`` expanded."""
        return resolve_sources(self.sources)


_BOUNDS: dict[str, tuple[int, int]] = {
    "threads": (1, 256),
    "context_size": (256, 131072),
    "window_tokens": (0, 131072),
    "max_tokens": (1, 8192),
    "max_latency_ms": (10, 600_000),
    "max_generation_ms": (10, 600_000),
    "debounce_ms": (0, 10_000),
}


def _check_backend_key(key: str) -> None:
    why = check_api_key(key)
    if why is not None:
        raise ValueError(f"backendApiKey {why}")


#: String settings with a shape to check (they raise ``ValueError`` with the message).
_CHECKS: dict[str, Callable[[str], object]] = {
    "backend": check_backend,
    "backend_api_key": _check_backend_key,
    "fim_template": parse_template,
}


def camel(name: str) -> str:
    """``max_tokens`` -> ``maxTokens`` (the LSP / VS Code spelling)."""
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


class _UnknownItems(ValueError):
    """A list setting with unknown names; ``known`` is what is left without them."""

    def __init__(self, message: str, known: tuple[str, ...]) -> None:
        super().__init__(message)
        self.known = known


def _short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: a 5,000-digit number is no message."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else "a huge number"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _coerce(name: str, kind: Any, value: Any, field_name: str | None = None) -> Any:
    """Convert ``value`` for field ``name`` or raise ``ValueError`` with a message."""
    if kind is bool or kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (
            "1",
            "true",
            "yes",
            "on",
            "0",
            "false",
            "no",
            "off",
        ):
            return value.lower() in ("1", "true", "yes", "on")
        raise ValueError(f"{name} must be true or false, not {value!r}")
    if kind is int or kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str, float)):
            raise ValueError(f"{name} must be an integer, not {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            # JSON's 1e400 and TOML's inf / nan: int() would raise OverflowError.
            raise ValueError(f"{name} must be a finite integer, not {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):  # also "1" * 5000 (the digit limit)
            raise ValueError(f"{name} must be an integer, not {_short(value)}") from None
        if isinstance(value, float) and number != value:
            raise ValueError(f"{name} must be an integer, not {value!r}")
        # Bounds are keyed by the field name (``name`` may be the camelCase key).
        lo, hi = _BOUNDS.get(field_name or name, (-(2**31), 2**31))
        if not lo <= number <= hi:
            raise ValueError(f"{name} must be between {lo} and {hi}, not {_short(number)}")
        return number
    if kind is str or kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string, not {value!r}")
        if value and field_name in _CHECKS:
            _CHECKS[field_name](value)  # ValueError saying what is wrong
        return value
    # tuple[str, ...]: a list of strings, or a comma-separated string
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        raise ValueError(f"{name} must be a list of strings, not {value!r}")
    if name == "sources":
        try:
            resolve_sources(items)
        except ValueError as exc:  # unknown names: the known ones still apply
            known = tuple(v for v in items if v == "all" or v in SOURCE_NAMES)
            raise _UnknownItems(str(exc), known) from None
    return tuple(items)


def _kinds() -> dict[str, Any]:
    hints = {"bool": bool, "int": int, "str": str}
    return {f.name: hints.get(str(f.type), tuple) for f in fields(Settings)}


def apply(
    base: Settings, values: Mapping[str, Any], *, camel_case: bool = False
) -> tuple[Settings, list[str], list[str]]:
    """Layer ``values`` over ``base``.

    Returns ``(settings, changed, errors)``: ``changed`` names the fields set
    from ``values``; ``errors`` are one-line messages for bad values (their
    field keeps ``base``'s value). Unknown keys are errors too. With
    ``camel_case`` the keys are LSP spellings (``maxTokens``).
    """
    kinds = _kinds()
    by_key = {camel(n) if camel_case else n: n for n in kinds}
    updates: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in values.items():
        name = by_key.get(key)
        if name is None:
            errors.append(f"unknown setting {key!r}")
            continue
        if value is None:
            continue
        try:
            updates[name] = _coerce(key, kinds[name], value, name)
        except _UnknownItems as exc:
            if exc.known:  # none known at all is a mistake: keep the value below
                updates[name] = exc.known
            errors.append(f"{exc}; keeping {updates.get(name, getattr(base, name))!r}")
        except ValueError as exc:
            errors.append(f"{exc}; keeping {_shown(base, name)}")
    return dataclasses.replace(base, **updates), sorted(updates), errors


def _shown(settings: Settings, name: str) -> str:
    """A setting's value for a message: a secret one (``repr=False``, a key) is never shown."""
    if name in {f.name for f in fields(Settings) if not f.repr}:
        return "the value set before"
    return repr(getattr(settings, name))


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the config file is read from (it need not exist)."""
    env = os.environ if env is None else env
    if env.get("STRUCTSPEC_CONFIG"):
        return Path(env["STRUCTSPEC_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "structspec" / "config.toml"


@dataclass
class LoadedSettings:
    """Settings with the origin of each value (``default``, ``file``, ``env``, ``flag``)."""

    settings: Settings
    origins: dict[str, str]
    errors: list[str]
    path: Path
    #: The config file was there to read (a regular file at ``path``).
    present: bool = False

    @property
    def explicit(self) -> frozenset[str]:
        """The settings some layer set (the others may be chosen by ``structspec.rates``)."""
        return frozenset(k for k, origin in self.origins.items() if origin != "default")


def load_settings(
    flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> LoadedSettings:
    """Default < config file < environment < flags (``None`` flags are unset)."""
    env = os.environ if env is None else env
    settings = Settings()
    origins = {f.name: "default" for f in fields(Settings)}
    errors: list[str] = []
    file_values: dict[str, Any] = {}
    try:
        path = config_path(env)
        # /dev/null or a missing file: no config file, defaults apply.
        present = path.is_file()
        if (
            not present
            and env.get("STRUCTSPEC_CONFIG")
            and path.exists()
            and not path.is_char_device()
        ):
            raise OSError("not a regular file")  # a folder, a FIFO: named, but no config
    except (OSError, RuntimeError) as exc:  # RuntimeError: "~user" of no such user
        path, present = Path(env.get("STRUCTSPEC_CONFIG", "")), False
        errors.append(f"STRUCTSPEC_CONFIG: cannot use {str(path)[:200]!r} ({exc}); using defaults")
    if present:
        try:
            file_values = tomllib.loads(read_bounded_text(path, MAX_CONFIG_BYTES))
        except (OSError, ValueError) as exc:  # FileLimitError, UnicodeDecodeError, TOMLDecodeError
            errors.append(f"{path}: cannot read config file ({exc}); using defaults")
        except RecursionError:
            errors.append(f"{path}: cannot read config file (nested too deeply); using defaults")
    env_values = {
        f.name: env[f"STRUCTSPEC_{f.name.upper()}"]
        for f in fields(Settings)
        if f"STRUCTSPEC_{f.name.upper()}" in env
    }
    layers = (("file", file_values), ("env", env_values), ("flag", dict(flags or {})))
    for origin, values in layers:
        values = {k: v for k, v in values.items() if v is not None}
        settings, changed, errs = apply(settings, values)
        errors += [f"{origin}: {e}" for e in errs]
        for name in changed:
            origins[name] = origin
    return LoadedSettings(settings, origins, errors, path, present)

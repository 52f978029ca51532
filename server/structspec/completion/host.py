"""The worker thread's model and engine, rebuilt only when a setting that shapes them changes.

The completion service's one worker thread owns an ``EngineHost``: every
method here runs on that thread (the model is not thread-safe, and loading or
calibrating it blocks). What it keeps and when it rebuilds it:

- the model, keyed on ``model_key`` (file, threads, context size, KV slots, widened weights):
  opened again only when one of those changes; a file that failed to load is
  not retried until its key changes;
- the engine (draft sources, planner), keyed on ``engine_key`` (the enabled
  sources and ``rules_file``): rebuilt over the same model when either changes,
  with every source that can be built (``runtime.load_available_engine``);
- the prompt builder and the corpus cache, which belong to one model, and the
  project-context snippet chooser (its choice stays while the user types in
  one place, so the KV cache keeps the snippets);
- instead of all that while the ``backend`` setting names a server, the
  remote engine's client (``remote``), keyed on the backend settings; the
  local model is closed then, and the client when the setting is emptied.

The model's prompt and decode rates on this machine (``rates``, measured at
the first loads per model and machine, then cached: ``runtime.model_rates``) are taken when it
loads: they seed the prompt builder's running prompt rate and choose the
adaptive defaults (``structspec.rates``).

Outcomes are reported through ``on_loaded(name, warnings, rates)`` (``rates``
``None`` for a remote engine) and ``on_failed(message)``, called on the worker
thread (the service forwards them to its event loop).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from structspec import detect
from structspec.backends.address import AUTO
from structspec.completion.corpus import CorpusCache
from structspec.completion.generate import CompletionInput, Outcome
from structspec.completion.prompt import PromptBuilder
from structspec.completion.remote import RemoteCompleter, RemoteKey, remote_key
from structspec.completion.snippets import SnippetChooser
from structspec.completion.types import EmptyReason
from structspec.config import Settings
from structspec.engine.decode import Engine
from structspec.model.base import Model, ModelError
from structspec.model.extras import close_model
from structspec.rates import Rates

log = logging.getLogger(__name__)

#: KV caches the model keeps (one per recently completed document), so that
#: switching between documents does not evaluate either prompt again.
KV_SLOTS = 3
#: ``backend = "auto"`` that found no server looks again after this long (seconds).
DETECT_RETRY_S = 30.0

Announce = Callable[[str], None]
ModelOpener = Callable[..., Model]
#: ``(settings, model=, announce=) -> (engine, warnings)``
EngineLoader = Callable[..., tuple[Engine, list[str]]]
#: ``(model, announce) -> rates`` of a loaded model on this machine (``None``: none).
RateMeter = Callable[[Model, Announce], Rates | None]
#: ``(name, warnings, rates)``: a model or backend is ready.
Loaded = Callable[[str, list[str], Rates | None], None]

#: A model file's version (``model_file_version``): inode, size, times.
FileVersion = tuple[int, int, int, int] | None
ModelKey = tuple[str, FileVersion, int, int, int, bool, RemoteKey]
EngineKey = tuple[tuple[str, ...], str]


def model_key(settings: Settings) -> ModelKey:
    """Every setting that changes the loaded model (a remote one included), and the
    version of its file: a file replaced on disk is loaded again, and one that failed
    (a download not finished) is tried again once it changed."""
    return (
        settings.model,
        model_file_version(settings.model),
        settings.threads,
        settings.context_size,
        kv_slots(settings),
        settings.widen_weights,
        remote_key(settings),
    )


def kv_slots(settings: Settings) -> int:
    """KV slots of the model: without prefix reuse (a benchmark baseline) one, emptied
    before each request."""
    return KV_SLOTS if settings.prefix_reuse else 1


def model_file_version(spec: str) -> FileVersion:
    """The version of the file the ``model`` setting names; ``None`` for the embedded
    default and where no file is (the stand-in's ``standin``) (a stat: microseconds)."""
    if not spec:
        return None
    try:
        st = os.stat(os.path.expanduser(spec))
    except (OSError, ValueError, RuntimeError):  # missing; a NUL; ``~name`` of no user
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def engine_key(settings: Settings) -> EngineKey:
    """Every setting that changes the engine over a loaded model."""
    return (settings.source_names(), settings.rules_file)


def default_open_model(spec: str, **kwargs: Any) -> Model:
    """The editor's model: with the on-disk prompt-prefix cache, so a restart starts warm."""
    from structspec.runtime import open_model

    return open_model(spec, prefix_cache=True, **kwargs)


def default_load_engine(settings: Settings, **kwargs: Any) -> tuple[Engine, list[str]]:
    from structspec.runtime import load_available_engine

    return load_available_engine(settings, **kwargs)


def default_model_rates(model: Model, announce: Announce) -> Rates | None:
    from structspec.runtime import model_rates

    return model_rates(model, announce)


class EngineHost:
    """The model, engine, prompt builder, corpus and snippets of the worker thread."""

    def __init__(
        self,
        *,
        announce: Announce,
        on_loaded: Loaded,
        on_failed: Callable[[str], None],
        open_model: ModelOpener = default_open_model,
        load_engine: EngineLoader = default_load_engine,
        model_rates: RateMeter = default_model_rates,
    ) -> None:
        self._announce = announce
        self._model_rates = model_rates
        self._on_loaded = on_loaded
        self._on_failed = on_failed
        self._open_model = open_model
        self._load_engine = load_engine
        self.model: Model | None = None
        #: The loaded model's rates on this machine (``None`` until one is loaded).
        self.rates: Rates | None = None
        self.engine: Engine | None = None
        self.prompts: PromptBuilder | None = None
        self.corpus = CorpusCache()
        self.snippets = SnippetChooser()
        self._model_key: ModelKey | None = None
        self._engine_key: EngineKey | None = None
        #: A key that failed (a model's, or a backend's) and the message the user got.
        self._failed: tuple[ModelKey | RemoteKey, str] | None = None
        self.remote: RemoteCompleter | None = None
        #: ``backend = "auto"`` found no server: when to look again, and whether it was said.
        self._detect_after = 0.0
        self._detect_told = False
        self._detect_message = ""

    def remote_for(self, settings: Settings) -> RemoteCompleter | None:
        """The client of ``settings.backend``, made when a backend setting changed.

        ``None`` (the user told once) when the settings cannot make one.
        """
        key = remote_key(settings)
        if self.remote is not None and self.remote.key == key:
            return self.remote
        if self._failed is not None and self._failed[0] == key:
            return None
        self.close()  # neither the local model nor another backend's client is needed
        url = self._detect() if settings.backend == AUTO else settings.backend
        if url is None:
            return None
        try:
            self.remote = RemoteCompleter(
                settings,
                on_loaded=lambda name, notes: self._on_loaded(name, notes, None),
                on_failed=self._on_failed,
                url=url,
            )
        except ValueError as exc:  # a URL or template that slipped past config's checks
            message = f"structspec: cannot use backend {settings.backend!r}: {exc}"
            self._failed = (key, message)
            log.error("%s", message)
            self._on_failed(message)
            return None
        return self.remote

    def warm_remote(self, settings: Settings) -> str | None:
        """Make the client of ``settings.backend`` now; the message of why not, if it cannot."""
        if self.remote_for(settings) is not None:
            return None
        if self._failed is not None and self._failed[0] == remote_key(settings):
            return self._failed[1]
        return self._detect_message

    def _detect(self) -> str | None:
        """``backend = "auto"``: the URL of the server ``structspec detect`` picks, if any."""
        now = time.monotonic()
        if now < self._detect_after:
            return None
        try:
            found = detect.probe_backends()
        except Exception:  # a defect in the probe: no backend, looked for again later
            log.exception("backend auto: probing the local servers failed")
            found = []
        picked = detect.pick_backend(found)
        if picked is not None:
            self._detect_told = False
            return picked.url
        self._detect_after = now + DETECT_RETRY_S
        if not self._detect_told:
            self._detect_told = True
            ports = ", ".join(f"{name} :{port}" for name, port in detect.KNOWN_BACKENDS)
            odd = "; ".join(f":{b.port} answered, but {b.error}" for b in found if b.error)
            self._detect_message = (
                f"structspec: backend auto found no inference server on this machine ({ports})"
                f"{f' ({odd})' if odd else ''}; looking again every {DETECT_RETRY_S:.0f} s. "
                "Fix: start one, or set `backend` to its URL"
            )
            log.warning("%s", self._detect_message)
            self._on_failed(self._detect_message)
        return None

    def complete_remotely(
        self,
        job: CompletionInput,
        *,
        cancelled: Callable[[], bool],
        progress: Callable[[str], None] | None = None,
    ) -> Outcome:
        """One suggestion from the ``backend`` server (``RemoteCompleter.complete``)."""
        try:
            remote = self.remote_for(job.settings)
            if remote is None:
                return Outcome(empty=EmptyReason.NO_MODEL)
            return remote.complete(job, cancelled=cancelled, progress=progress)
        except Exception:  # a bug must cost a suggestion, not the request
            log.exception("completion through %s failed", job.settings.backend)
            return Outcome(empty=EmptyReason.ERROR)

    def engine_for(self, settings: Settings) -> Engine:
        """The engine for ``settings``, loading or rebuilding what changed; ``ModelError``."""
        if self.remote is not None:  # back to the local model
            self.remote.close()
            self.remote = None
        key = model_key(settings)
        if self.model is None or self._model_key != key:
            self._load_model(settings, key)
        assert self.model is not None
        ekey = engine_key(settings)
        if self.engine is None or self._engine_key != ekey:
            self.engine, warnings = self._load_engine(
                settings, model=self.model, announce=self._announce
            )
            self._engine_key = ekey
            self._on_loaded(self.model.name, warnings, self.rates)
        return self.engine

    def _load_model(self, settings: Settings, key: ModelKey) -> None:
        if self._failed is not None and self._failed[0] == key:
            raise ModelError(self._failed[1])
        self.close()
        try:
            model = self._open_model(
                settings.model,
                context_size=settings.context_size,
                threads=settings.threads,
                announce=self._announce,
                slots=kv_slots(settings),
                widen=settings.widen_weights,
            )
        except Exception as exc:  # ModelError, or an OS error reading the file
            what = settings.model or "the default model"
            message = (
                f"structspec: cannot load {what}: {exc}. Fix: set `model` (LSP `model`, "
                "env STRUCTSPEC_MODEL) to a readable GGUF file, or leave it empty for the "
                "default model."
            )
            self._failed = (key, message)
            log.error("%s", message)
            self._on_failed(message)
            raise ModelError(message) from None
        self._failed = None
        try:
            rates = self._model_rates(model, self._announce)
        except Exception:  # measuring must not cost the model: the static defaults apply
            log.exception("measuring the model's rates failed")
            rates = None
        if rates is not None:
            self._announce(
                f"structspec: {model.name} evaluates {rates.prompt_tps:.0f} prompt tokens/s and "
                f"decodes {rates.decode_tps:.1f} tokens/s on this machine"
            )
        self.model, self._model_key, self.rates = model, key, rates
        self.prompts = PromptBuilder(model, None if rates is None else rates.prompt_tps)
        self.corpus = CorpusCache()

    def close(self) -> None:
        """Free the model and the remote client now (the next request makes them again)."""
        model, self.model, self.engine, self.prompts = self.model, None, None, None
        self.rates = None
        self._model_key = self._engine_key = None
        close_model(model)
        remote, self.remote = self.remote, None
        if remote is not None:
            remote.close()

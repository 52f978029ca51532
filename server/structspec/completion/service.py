"""The completion service: documents in, suggestions out, independent of any editor protocol.

Threads: every public method runs on one asyncio event loop (the language
server's). The model and the engine belong to a single worker thread, so one
generation uses the model at a time and the loop stays free to answer
``initialize``, edits and ``shutdown`` while a generation runs. Blocking work
(loading the model, tokenizing, decoding) never runs on the loop.

Stale work: a new request for a document cancels the one in flight for it
(that one answers ``None``); a cancelled request (``$/cancelRequest``, which
cancels the awaiting task) stops its generation between verification passes.

A request goes: typing-through cache (no model) -> debounce -> worker: stable
prompt (see ``prompt``; with ``projectContext``, snippets of the other open
documents, see ``snippets``), corpus of the open buffers, chunked prefill
within the latency budget (see ``prewarm``), engine stream with the
single-line/block mode and the latency budget -> clean-up (see ``suggest``).

Pre-warm: an opened document, or one the user stopped editing for
``PREWARM_IDLE_S``, is prefilled in the background when nothing else runs;
any request or edit abandons it between two chunks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from structspec.completion.cache import PendingSuggestion
from structspec.completion.corpus import CorpusCache, DocumentSnapshot
from structspec.completion.documents import (
    UTF16,
    Document,
    DocumentStore,
    TextChange,
    index_to_column,
    uri_path,
)
from structspec.completion.prewarm import (
    PREFILL_CHUNK,
    PREWARM_IDLE_S,
    opening_offset,
    prefill_in_chunks,
    reusable_prefix,
)
from structspec.completion.prompt import Prompt, PromptBuilder, file_name, prompt_room
from structspec.completion.snippets import Neighbour, Snippet, SnippetChooser
from structspec.completion.stats import AcceptanceStats
from structspec.completion.suggest import BLOCK, LINE, CursorContext, clean, cut_block
from structspec.config import Settings
from structspec.engine.decode import Engine, EngineError, GenerationOptions
from structspec.engine.stats import GenerationStats
from structspec.model.base import Model, ModelError
from structspec.syntax.domains import detect_language

log = logging.getLogger(__name__)

#: KV caches the model keeps (one per recently completed document), so that
#: switching between documents does not evaluate either prompt again.
KV_SLOTS = 3

IDLE = "idle"
BUSY = "busy"
ERROR = "error"

Announce = Callable[[str], None]
ModelOpener = Callable[..., Model]
EngineLoader = Callable[..., Engine]


def draft_language(uri: str, language_id: str, text: str) -> str:
    """The languageId the draft sources see for a document.

    The editor's own languageId when the syntax table knows it; otherwise the
    language detected from the file name and the text (a ``.py`` buffer the
    editor calls ``plaintext``, a ``#!/bin/sh`` script without an extension),
    so the syntax sources still serve it. Unknown stays as the editor said.
    """
    lang, _ = detect_language(language_id, uri_path(uri), text)
    return lang.language_ids[0] if lang is not None and lang.language_ids else language_id


@dataclass(frozen=True)
class CompletionRequest:
    """A cursor in an open document; ``invoked``: asked for explicitly (no debounce)."""

    uri: str
    line: int
    character: int
    invoked: bool = False


@dataclass(frozen=True)
class Suggestion:
    """Text to insert at the cursor, with what a protocol layer needs to present it.

    Columns are in the document store's position encoding. ``line_suffix`` is
    the text after the cursor on its line; ``word_prefix`` the identifier
    characters before it (completion menus filter on them).
    """

    id: str
    uri: str
    text: str
    line: int
    character: int
    line_end_character: int
    line_suffix: str
    word_prefix: str
    word_start_character: int
    mode: str
    source: str  # "model" or "cache"
    latency_ms: float
    stats: GenerationStats | None = None


@dataclass(frozen=True)
class Status:
    """What ``structspec/status`` reports."""

    state: str
    model: str
    tokens_per_second: float | None
    acceptance: float
    last_latency_ms: float | None
    message: str = ""
    counters: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "model": self.model,
            "tokensPerSecond": None
            if self.tokens_per_second is None
            else round(self.tokens_per_second, 2),
            "acceptance": round(self.acceptance, 4),
            "lastLatencyMs": None
            if self.last_latency_ms is None
            else round(self.last_latency_ms, 1),
            "message": self.message,
            "stats": self.counters,
        }


class _Job:
    """One request's work for the worker thread (immutable inputs + a cancel flag)."""

    __slots__ = (
        "session",
        "uri",
        "text",
        "offset",
        "language",
        "ctx",
        "settings",
        "others",
        "t0",
        "waiters",
        "_cancelled",
    )

    def __init__(
        self,
        session: _Session,
        uri: str,
        text: str,
        offset: int,
        language: str,
        ctx: CursorContext,
        settings: Settings,
        others: list[DocumentSnapshot],
        t0: float,
    ) -> None:
        self.session = session
        self.uri = uri
        self.text = text
        self.offset = offset
        self.language = language
        self.ctx = ctx
        self.settings = settings
        self.others = others
        self.t0 = t0
        self.waiters = 0  # requests awaiting this job
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    def cancelled(self) -> bool:
        return self._cancelled.is_set()


@dataclass
class _Outcome:
    text: str | None = None
    stats: GenerationStats | None = None
    cancelled: bool = False
    id: str | None = None  # the suggestion's id once it is shown
    unfinished: bool = False  # the prefill ran out of the latency budget


@dataclass
class _Session:
    """Per-document state: the prompt cut (worker), the pending suggestion and job (loop)."""

    cut: int | None = None
    pending: PendingSuggestion | None = None
    job: _Job | None = None
    task: asyncio.Future[_Outcome] | None = None


def _default_open_model(spec: str, **kwargs: Any) -> Model:
    from structspec.runtime import open_model

    return open_model(spec, **kwargs)


def _default_load_engine(settings: Settings, **kwargs: Any) -> Engine:
    from structspec.runtime import load_engine

    return load_engine(settings, **kwargs)


class CompletionService:
    """Editor-independent inline completion (see the module docstring).

    ``on_status`` and ``on_message(level, text)`` are called on the event loop;
    ``level`` is ``error``, ``warning`` or ``info``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        on_status: Callable[[Status], None] | None = None,
        on_message: Callable[[str, str], None] | None = None,
        open_model: ModelOpener = _default_open_model,
        load_engine: EngineLoader = _default_load_engine,
    ) -> None:
        self.settings = settings
        self.documents = DocumentStore(UTF16)
        self.stats = AcceptanceStats()
        self._on_status = on_status
        self._on_message = on_message
        self._open_model = open_model
        self._load_engine = load_engine
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="structspec-engine"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, _Session] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._prewarm_timer: asyncio.TimerHandle | None = None
        self._prewarm_job: _Job | None = None
        self._ids = itertools.count(1)
        self._busy = 0
        self._closed = False
        self._released: threading.Event | None = None
        self._state = IDLE
        self._message = ""
        # Worker-thread state.
        self._model: Model | None = None
        self._model_key: tuple[str, int, int, int] | None = None
        self._engine: Engine | None = None
        self._engine_key: tuple[str, ...] | None = None
        self._prompts: PromptBuilder | None = None
        self._corpus = CorpusCache()
        self._snippets = SnippetChooser()
        self._draft_languages: dict[str, str] = {}  # uri -> languageId the sources see
        self._failed: tuple[tuple[str, int, int, int], str] | None = None
        self._model_name = "not loaded"

    # -- documents ---------------------------------------------------------
    def open_document(self, uri: str, language: str, version: int, text: str) -> Document:
        self._touch(uri)
        self._draft_languages[uri] = draft_language(uri, language, text)
        doc = self.documents.open(uri, language, version, text)
        self._schedule_prewarm(uri)
        return doc

    def change_document(self, uri: str, version: int, changes: Iterable[TextChange]) -> Document:
        """Apply edits; raises ``UnknownDocument`` for a URI that is not open."""
        doc = self.documents.change(uri, version, changes)
        self._touch(uri)
        self._schedule_prewarm(uri, doc.edited_at)
        return doc

    def close_document(self, uri: str) -> None:
        self.documents.close(uri)
        self._recent.pop(uri, None)
        self._draft_languages.pop(uri, None)
        session = self._sessions.pop(uri, None)
        if session is not None and session.job is not None:
            session.job.cancel()

    def _touch(self, uri: str) -> None:
        self._recent[uri] = None
        self._recent.move_to_end(uri, last=False)

    # -- settings and lifecycle -------------------------------------------
    def configure(self, settings: Settings) -> None:
        """Use new settings from the next request on; reload the model if it changed."""
        old = self.settings
        self.settings = settings
        model_changed = (old.model, old.threads, old.context_size, old.prefix_reuse) != (
            settings.model,
            settings.threads,
            settings.context_size,
            settings.prefix_reuse,
        )
        if model_changed or old.source_names() != settings.source_names():
            self.start()

    def start(self) -> None:
        """Load the model in the worker now rather than on the first request."""
        self._bind_loop()
        if self._closed:
            return
        settings = self.settings
        self._set_state(BUSY, "loading model")
        try:
            future = self._executor.submit(self._warm, settings)
        except RuntimeError:
            return
        future.add_done_callback(lambda f: self._call_soon(self._warm_done, f))

    def _warm_done(self, future: concurrent.futures.Future[str | None]) -> None:
        error = None if future.cancelled() else future.result()
        if error is not None:
            self._set_state(ERROR, error)  # the user was told by _model_failed already
        elif self._busy == 0:
            self._set_state(IDLE, "")

    def close(self) -> None:
        """Cancel everything in flight; the worker then releases the model and ends."""
        if self._closed:
            return
        self._closed = True
        self._abandon_prewarm()
        for session in self._sessions.values():
            if session.job is not None:
                session.job.cancel()
        self._released = threading.Event()
        released = self._released

        def _release() -> None:
            model, self._model, self._engine = self._model, None, None
            close = getattr(model, "close", None)
            try:
                if callable(close):
                    close()
            finally:
                released.set()

        # Queued jobs see their cancel flag (or ``_closed``) and return at once.
        self._executor.submit(_release)
        self._executor.shutdown(wait=False)

    def join(self, timeout: float = 10.0) -> bool:
        """After ``close``: wait until the worker released the model."""
        return self._released.wait(timeout) if self._released is not None else False

    @property
    def model_name(self) -> str:
        return self._model_name

    def status(self) -> Status:
        return Status(
            self._state,
            self._model_name,
            self.stats.last_tokens_per_second,
            self.stats.acceptance,
            self.stats.last_latency_ms,
            self._message,
            self.stats.to_dict(),
        )

    # -- acceptance ---------------------------------------------------------
    def accept(self, suggestion_id: str) -> bool:
        """The user took suggestion ``suggestion_id``; ``False`` if it is unknown."""
        accepted = self.stats.record_accept(suggestion_id)
        if accepted:
            self._emit_status()
        return accepted

    # -- completion ---------------------------------------------------------
    async def complete(self, request: CompletionRequest) -> Suggestion | None:
        """A suggestion at the request's cursor, or ``None``.

        A request for the same text and cursor as the one in flight (an
        editor asking for inline and menu completion at once) shares its
        generation; any other request for the document cancels it. Raises
        ``asyncio.CancelledError`` when the awaiting task is cancelled (the
        generation stops too once no request waits for it).
        """
        self._bind_loop()
        t0 = time.perf_counter()
        self._abandon_prewarm()
        self.stats.requests += 1
        doc = self.documents.get(request.uri)
        settings = self.settings
        if doc is None or self._closed:
            self.stats.empty += 1
            return None
        if settings.languages and doc.language not in settings.languages:
            self.stats.empty += 1
            return None
        session = self._sessions.setdefault(request.uri, _Session())
        enc = self.documents.encoding
        text = doc.text
        offset = doc.offset_at(request.line, request.character, enc)
        ctx = CursorContext.at(text, offset)

        job, task = session.job, session.task
        shared = (
            job is not None
            and task is not None
            and not job.cancelled()
            and job.text is text
            and job.offset == offset
        )
        if not shared and job is not None:
            job.cancel()
            session.job = session.task = None

        if not shared and session.pending is not None:
            rest = session.pending.rest_at(text, offset)
            if rest is not None:
                self.stats.served_from_cache += 1
                latency = (time.perf_counter() - t0) * 1000.0
                self.stats.record_latency(latency)
                return self._suggestion(
                    session.pending.id, doc, text, offset, ctx, rest, "cache", latency, None
                )
            session.pending = None

        if not shared:
            job = self._job(session, request.uri, text, offset, settings, t0)
            task = asyncio.ensure_future(self._execute(job, request.invoked))
            session.job, session.task = job, task
        assert job is not None and task is not None
        job.waiters += 1
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            job.waiters -= 1
            if job.waiters == 0:
                job.cancel()  # nobody waits any more: stop between passes
            self.stats.cancelled += 1
            raise
        job.waiters -= 1
        if session.job is job and task.done():
            session.job = session.task = None
        if outcome.text is None or outcome.id is None or job.cancelled():
            self.stats.empty += 1
            return None
        latency = (time.perf_counter() - t0) * 1000.0
        self.stats.record_latency(latency)
        return self._suggestion(
            outcome.id, doc, text, offset, ctx, outcome.text, "model", latency, outcome.stats
        )

    async def _execute(self, job: _Job, invoked: bool) -> _Outcome:
        """Debounce, generate in the worker, and record the outcome (once per job)."""
        debounce = job.settings.debounce_ms
        if debounce > 0 and not invoked:
            await asyncio.sleep(debounce / 1000.0)
            if job.cancelled():
                return _Outcome(cancelled=True)
        outcome = await self._submit(job)
        if outcome.stats is not None and not outcome.cancelled:
            st = outcome.stats
            self.stats.record_generation(st.tokens, st.seconds, st.prefill_ms, st.decode_ms)
        if outcome.text is not None and not job.cancelled():
            outcome.id = f"s{next(self._ids)}"
            self.stats.record_shown(outcome.id, len(outcome.text))
            job.session.pending = PendingSuggestion.at(
                outcome.id, job.text, job.offset, outcome.text
            )
        elif outcome.unfinished and not job.cancelled():
            self._schedule_prewarm(job.uri, job.offset)  # finish that prefill when idle
        self._emit_status()
        return outcome

    def _job(
        self, session: _Session, uri: str, text: str, offset: int, settings: Settings, t0: float
    ) -> _Job:
        """A job for ``uri`` with snapshots of the other open documents (on the loop)."""
        doc = self.documents.get(uri)
        others = [
            DocumentSnapshot(d.uri, d.version, d.text)
            for u in self._recent
            if u != uri and (d := self.documents.get(u)) is not None
        ]
        language = self._draft_languages.get(uri, doc.language if doc is not None else "")
        ctx = CursorContext.at(text, max(0, offset))
        return _Job(session, uri, text, offset, language, ctx, settings, others, t0)

    # -- pre-warm (see ``prewarm``) ------------------------------------------
    def _schedule_prewarm(self, uri: str, offset: int | None = None) -> None:
        """Pre-warm ``uri`` at ``offset`` (``None``: as opened) once the user pauses."""
        self._bind_loop()
        loop = self._loop
        if loop is None or loop.is_closed() or self._closed or not self.settings.prefix_reuse:
            return
        self._abandon_prewarm()
        self._prewarm_timer = loop.call_later(PREWARM_IDLE_S, self._start_prewarm, uri, offset)

    def _abandon_prewarm(self) -> None:
        """A request or an edit came: stop any pre-warm (between two prefill chunks)."""
        if self._prewarm_timer is not None:
            self._prewarm_timer.cancel()
            self._prewarm_timer = None
        if self._prewarm_job is not None:
            self._prewarm_job.cancel()
            self._prewarm_job = None

    def _start_prewarm(self, uri: str, offset: int | None) -> None:
        self._prewarm_timer = None
        doc = self.documents.get(uri)
        session = self._sessions.setdefault(uri, _Session()) if doc is not None else None
        # Lowest priority: only when no request is queued or running.
        busy = self._busy or any(s.job is not None for s in self._sessions.values())
        if doc is None or session is None or self._closed or busy:
            return
        if self.settings.languages and doc.language not in self.settings.languages:
            return
        at = -1 if offset is None else max(0, min(offset, len(doc.text)))
        job = self._job(session, uri, doc.text, at, self.settings, time.perf_counter())
        self._prewarm_job = job
        with contextlib.suppress(RuntimeError):  # shut down
            self._executor.submit(self._prewarm, job)

    def _prewarm(self, job: _Job) -> None:
        """Worker: evaluate the job's prompt into a KV slot until done or abandoned."""
        if job.cancelled() or self._closed or not job.settings.prefix_reuse:
            return
        try:
            model = self._engine_for(job.settings).model
            if job.offset < 0:
                room = prompt_room(model, job.settings.max_tokens)
                job.offset = opening_offset(model, job.text, room)
            prompt = self._prompt(job)
            if prefill_in_chunks(model, prompt.tokens[:-1], job.cancelled):
                self.stats.prewarmed += 1
        except Exception:  # a failed pre-warm costs nothing but its time
            log.debug("pre-warm of %s failed", job.uri, exc_info=True)

    async def _submit(self, job: _Job) -> _Outcome:
        self._abandon_prewarm()  # a pre-warm queued meanwhile must not delay a request
        try:
            future = self._executor.submit(self._run, job)
        except RuntimeError:  # shut down
            return _Outcome(cancelled=True)
        self._busy += 1
        if self._busy == 1 and self._state != ERROR:
            self._set_state(BUSY, "")
        try:
            return await asyncio.wrap_future(future)
        finally:
            self._busy -= 1
            if self._busy == 0 and self._state == BUSY:
                self._set_state(IDLE, "")

    def _suggestion(
        self,
        suggestion_id: str,
        doc: Document,
        text: str,
        offset: int,
        ctx: CursorContext,
        suggestion: str,
        source: str,
        latency: float,
        stats: GenerationStats | None,
    ) -> Suggestion:
        # Positions are computed on the text the request saw, not a later edit
        # (the document itself while unchanged: its line index is cached).
        view = doc if doc.text is text else Document(doc.uri, doc.language, doc.version, text)
        enc = self.documents.encoding
        line, character = view.position_at(offset, enc)
        line_start, line_end = view.line_bounds(line)
        line_text = text[line_start:line_end]
        word = ctx.word_prefix
        return Suggestion(
            id=suggestion_id,
            uri=doc.uri,
            text=suggestion,
            line=line,
            character=character,
            line_end_character=index_to_column(line_text, len(line_text), enc),
            line_suffix=ctx.line_suffix,
            word_prefix=word,
            word_start_character=index_to_column(line_text, offset - line_start - len(word), enc),
            mode=ctx.mode,
            source=source,
            latency_ms=latency,
            stats=stats,
        )

    # -- loop plumbing --------------------------------------------------------
    def _bind_loop(self) -> None:
        if self._loop is None:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:
                self._loop = None

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn`` on the event loop (from any thread); dropped once the loop is gone."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    def _set_state(self, state: str, message: str) -> None:
        self._state, self._message = state, message
        self._emit_status()

    def _emit_status(self) -> None:
        if self._on_status is not None:
            try:
                self._on_status(self.status())
            except Exception:  # a broken transport must not break completion
                log.exception("status notification failed")

    def _message_user(self, level: str, text: str) -> None:
        if self._on_message is not None:
            try:
                self._on_message(level, text)
            except Exception:
                log.exception("message to the user failed")

    def _model_failed(self, message: str) -> None:
        self._set_state(ERROR, message)
        self._message_user("error", message)

    def _model_loaded(self, name: str, warnings: list[str]) -> None:
        self._model_name = name
        if self._state == ERROR:
            self._set_state(BUSY if self._busy else IDLE, "")
        for w in warnings:
            self._message_user("warning", w)
        self._emit_status()

    # -- worker thread ------------------------------------------------------
    def _announce(self, message: str) -> None:
        log.info("%s", message)
        self._call_soon(self._message_user, "info", message)

    def _warm(self, settings: Settings) -> str | None:
        if self._closed:
            return None
        try:
            self._engine_for(settings)
        except ModelError as exc:
            return str(exc)
        except Exception as exc:  # a bug must not leave the state "busy" forever
            log.exception("loading the engine failed")
            return f"structspec: loading the engine failed: {exc}"
        return None

    def _engine_for(self, settings: Settings) -> Engine:
        """The engine for ``settings``, loading or rebuilding what changed (worker only)."""
        # Without prefix reuse (a benchmark baseline) one slot, emptied before each request.
        slots = KV_SLOTS if settings.prefix_reuse else 1
        key = (settings.model, settings.threads, settings.context_size, slots)
        if self._model is None or self._model_key != key:
            if self._failed is not None and self._failed[0] == key:
                raise ModelError(self._failed[1])
            old, self._model, self._engine, self._prompts = self._model, None, None, None
            close = getattr(old, "close", None)
            if callable(close):
                close()
            try:
                model = self._open_model(
                    settings.model,
                    context_size=settings.context_size,
                    threads=settings.threads,
                    announce=self._announce,
                    slots=slots,
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
                self._call_soon(self._model_failed, message)
                raise ModelError(message) from None
            self._failed = None
            self._model, self._model_key = model, key
            self._prompts = PromptBuilder(model)
            self._corpus = CorpusCache()
        assert self._model is not None
        sources = settings.source_names()
        if self._engine is None or self._engine_key != sources:
            self._engine, warnings = self._build_engine(settings, self._model)
            self._engine_key = sources
            self._call_soon(self._model_loaded, self._model.name, warnings)
        return self._engine

    def _build_engine(self, settings: Settings, model: Model) -> tuple[Engine, list[str]]:
        """An engine with every requested draft source that can be built."""
        try:
            return self._load_engine(settings, model=model, announce=self._announce), []
        except Exception:
            log.exception("building the engine with sources %s failed", settings.source_names())
        from structspec.drafts.registry import build_sources

        usable: list[str] = []
        warnings: list[str] = []
        for name in settings.source_names():
            try:
                build_sources([name], model)
                usable.append(name)
            except Exception as exc:
                warnings.append(f"structspec: draft source {name!r} is unavailable ({exc})")
        engine = self._load_engine(settings, model=model, sources=usable, announce=self._announce)
        return engine, warnings

    def _run(self, job: _Job) -> _Outcome:
        if job.cancelled() or self._closed:
            return _Outcome(cancelled=True)
        try:
            engine = self._engine_for(job.settings)
        except ModelError:
            return _Outcome()
        except Exception:
            log.exception("loading the engine failed")
            return _Outcome()
        try:
            return self._generate(engine, job)
        except (ModelError, EngineError) as exc:
            log.warning("completion for %s failed: %s", job.uri, exc)
        except Exception:
            log.exception("completion for %s failed", job.uri)
        return _Outcome()

    def _prompt(self, job: _Job) -> Prompt:
        """The job's prompt, with project context when it is on (worker only)."""
        assert self._prompts is not None
        settings = job.settings
        context: list[Snippet] = []
        if settings.project_context:
            neighbours = [Neighbour(o.uri, file_name(o.uri), o.version, o.text) for o in job.others]
            context = self._snippets.choose(job.uri, job.text, job.offset, neighbours)
        prompt = self._prompts.build(
            job.text,
            job.offset,
            uri=job.uri,
            language=job.language,
            cut_hint=job.session.cut,
            max_tokens=settings.max_tokens,
            context=context,
        )
        job.session.cut = prompt.cut
        return prompt

    def _generate(self, engine: Engine, job: _Job) -> _Outcome:
        model = engine.model
        settings = job.settings
        prompt = self._prompt(job)
        corpus: list[list[int]] = []
        if settings.speculative and "lookup" in settings.source_names():
            corpus = self._corpus.collect(
                model,
                text=job.text,
                cut=prompt.cut,
                suffix_start=prompt.suffix_end,
                others=job.others,
            )
        if job.cancelled():
            return _Outcome(cancelled=True)
        if not settings.prefix_reuse:
            model.truncate(0)  # evaluate the whole prompt again (the benchmark's baseline)
        budget = settings.max_latency_ms / 1000.0
        # The latency budget holds during prefill too: stop between chunks (what
        # was evaluated stays cached for the next request).
        reused = reusable_prefix(model, prompt.tokens[:-1])
        t_prefill = time.perf_counter()
        if not prefill_in_chunks(
            model,
            prompt.tokens[:-1],
            lambda: job.cancelled() or time.perf_counter() - job.t0 > budget,
            leave=PREFILL_CHUNK,  # the engine evaluates the last chunk itself
        ):
            return _Outcome(cancelled=job.cancelled(), unfinished=not job.cancelled())
        generation_start = time.perf_counter()
        mode = job.ctx.mode
        options = GenerationOptions(
            max_tokens=settings.max_tokens,
            stop=("\n",) if mode == LINE else (),
            speculative=settings.speculative,
        )
        generation = engine.stream(
            prompt.tokens,
            options,
            corpus=corpus,
            language=job.language or None,
            cancelled=job.cancelled,
        )
        text = ""
        mark: int | None = None
        early = False
        steps = iter(generation)
        try:
            for step in steps:
                before = len(text)
                text += step.text
                if mode == BLOCK:
                    text, dedented = cut_block(text, job.ctx)
                    if dedented:
                        early = True
                        break
                if mark is None and time.perf_counter() - job.t0 > budget:
                    mark = before  # finish the line being written, then stop
                if mark is not None:
                    newline = text.find("\n", mark)
                    if newline >= 0:
                        text, early = text[:newline], True
                        break
        finally:
            # Closing the generator ends the generation now (its result is final).
            close = getattr(steps, "close", None)
            if callable(close):
                close()
        result = generation.result
        stats = result.stats if result is not None else None
        if stats is not None:
            # The chunks evaluated above are part of this request's prefill.
            stats.prefill_ms = (generation_start - t_prefill) * 1000.0 + stats.prefill_ms
            stats.reused_tokens = min(stats.reused_tokens, reused)
        if job.cancelled():
            return _Outcome(stats=stats, cancelled=True)
        if not early and result is not None:
            text = result.text
        return _Outcome(clean(text, job.ctx, mode), stats)

"""The completion service: documents in, suggestions out, independent of any editor protocol.

``CompletionService`` is the one entry point of the language server and the
editor benchmark: a thin facade over the parts, each one job in its own module:

- documents (``documents``) and the per-document sessions (``jobs.Session``):
  open, change, close, kept here; a notebook's cells are completed in the
  text of its cells joined (``notebooks``): requests move into it and
  suggestions back;
- settings and model warm-up (``configure``), kept here;
- the request lifecycle (``request.RequestFlow``): sharing or adopting the job
  in flight (``jobs``), typing through the suggestion on screen, debounce,
  cancellation;
- the worker thread that owns the model (``worker.Worker``, ``host``);
- background work (``background.Background``): pre-warm and pre-generation;
- status and user messages (``status.StatusBoard``).

Threads: every public method runs on one asyncio event loop (the language
server's); blocking model work runs on the worker thread only.

Settings: ``configure`` is the one way in (the language server's
``initialized`` too). A change that reshapes the model or the engine queues one
warm-up on the worker; changes arriving while one is queued share it (it reads
the latest settings when it runs), so toggling a setting twenty times loads at
most twice.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence

from structspec.completion.background import Background
from structspec.completion.corpus import DocumentSnapshot
from structspec.completion.debounce import AdaptiveDebounce
from structspec.completion.documents import (
    UTF16,
    Document,
    DocumentStore,
    TextChange,
    UnknownDocument,
    uri_path,
)
from structspec.completion.generate import CompletionInput
from structspec.completion.host import (
    EngineLoader,
    ModelOpener,
    RateMeter,
    default_load_engine,
    default_model_rates,
    default_open_model,
    engine_key,
    model_key,
)
from structspec.completion.jobs import Job, Session
from structspec.completion.notebooks import CellText, NotebookChange, NotebookStore, difference
from structspec.completion.request import RequestFlow
from structspec.completion.stats import AcceptanceStats
from structspec.completion.status import StatusBoard
from structspec.completion.suggest import CursorContext
from structspec.completion.types import BUSY, CompletionRequest, Status, Suggestion
from structspec.completion.worker import Worker
from structspec.config import Settings
from structspec.engine.healing import vocab_index
from structspec.model.base import ModelError
from structspec.rates import adapt
from structspec.syntax.domains import detect_language

__all__ = ["CompletionRequest", "CompletionService", "Status", "Suggestion", "draft_language"]

log = logging.getLogger(__name__)


def draft_language(uri: str, language_id: str, text: str) -> str:
    """The languageId the draft sources see for a document.

    The editor's own languageId when the syntax table knows it; otherwise the
    language detected from the file name and the text (a ``.py`` buffer the
    editor calls ``plaintext``, a ``#!/bin/sh`` script without an extension),
    so the syntax sources still serve it. Unknown stays as the editor said.
    """
    lang, _ = detect_language(language_id, uri_path(uri), text)
    return lang.language_ids[0] if lang is not None and lang.language_ids else language_id


class CompletionService:
    """Editor-independent inline completion (see the module docstring).

    ``on_status`` and ``on_message(level, text)`` are called on the event loop;
    ``level`` is ``error``, ``warning`` or ``info``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        explicit: Collection[str] = (),
        on_status: Callable[[Status], None] | None = None,
        on_message: Callable[[str, str], None] | None = None,
        open_model: ModelOpener = default_open_model,
        load_engine: EngineLoader = default_load_engine,
        model_rates: RateMeter = default_model_rates,
    ) -> None:
        self._given = settings
        self._explicit = frozenset(explicit)
        self.documents = DocumentStore(UTF16)
        self.notebooks = NotebookStore(self.documents)
        #: Per open notebook, the URIs of its notebook texts in ``documents``.
        self._notebook_texts: dict[str, set[str]] = {}
        self.stats = AcceptanceStats()
        self.debounce = AdaptiveDebounce()
        self._sessions: dict[str, Session] = {}
        self._recent: OrderedDict[str, None] = OrderedDict()  # uris, most recently used first
        self._draft_languages: dict[str, str] = {}  # uri -> languageId the sources see
        #: The client sent a cursor report (``cursor_moved``): its word is taken over
        #: the places other requests name (``cursor_named``).
        self._cursor_reported = False
        #: The place a request last named the cursor at (uri, line, character).
        self._cursor_named: tuple[str, int, int] | None = None
        #: The model and engine keys the last warm-up was queued for (``None``: never).
        self._warm_keys: tuple[object, object] | None = None
        self._warm_queued = False
        self._status = StatusBoard(self.stats, on_status, on_message, lambda: self.settings)
        self._worker = Worker(self._status, open_model, load_engine, model_rates)
        self._background = Background(
            self._worker,
            self.documents,
            self._sessions,
            self.stats,
            self._status,
            lambda: self.settings,
            self._job,
        )
        self._requests = RequestFlow(
            self._worker,
            self.documents,
            self._sessions,
            self.stats,
            self.debounce,
            self._status,
            self._background,
            lambda: self.settings,
            self._job,
            self.notebooks,
        )

    # -- documents ---------------------------------------------------------
    def open_document(self, uri: str, language: str, version: int, text: str) -> None:
        """Open (or reopen) a document the editor sent; a notebook text's URI is refused
        (``_notebook_text``)."""
        if not self._notebook_text(uri, "didOpen"):
            self._open_document(uri, language, version, text)

    def _open_document(self, uri: str, language: str, version: int, text: str) -> None:
        self._touch(uri)
        self._draft_languages[uri] = draft_language(uri, language, text)
        self.documents.open(uri, language, version, text)
        self._background.schedule_prewarm(uri, rested=True)

    def change_document(self, uri: str, version: int, changes: Iterable[TextChange]) -> Document:
        """Apply edits; raises ``UnknownDocument`` for a URI that is not open (or is a
        notebook text's, which only its notebook's changes edit).

        The edit's place becomes the document's latest (``jobs.Session.places``),
        and the places after it move with the text.
        """
        if self._notebook_text(uri, "didChange"):
            raise UnknownDocument(uri)
        return self._edited(uri, lambda: self.documents.change(uri, version, changes))

    def _edited(self, uri: str, edit: Callable[[], Document]) -> Document:
        """Run ``edit`` on document ``uri``, then note where it was (``change_document``)."""
        before = self.documents.get(uri)
        length = len(before.text) if before is not None else 0
        doc = edit()
        self.debounce.keystroke(time.perf_counter())
        self._touch(uri)
        places = self._sessions.setdefault(uri, Session()).places
        places.edited(doc.edited_at, len(doc.text) - length, len(doc.text))
        if doc.edited_at is not None:
            places.visit(doc.edited_at)
        self._background.schedule_prewarm(uri, doc.edited_at)
        self._cursor_named = None  # the prompt changed: the same place is worth warming again
        return doc

    def close_document(self, uri: str) -> None:
        """Forget a document the editor closed; a notebook text's URI is refused."""
        if not self._notebook_text(uri, "didClose"):
            self._close_document(uri)

    def _notebook_text(self, uri: str, what: str) -> bool:
        """``uri`` is a notebook text's: its notebook's events alone open, edit and
        close it, never a document's of the same name (logged as ``what``)."""
        if not any(uri in texts for texts in self._notebook_texts.values()):
            return False
        log.warning("%s of %s refused: the URI is a notebook's text", what, uri)
        return True

    def _close_document(self, uri: str) -> None:
        self.documents.close(uri)
        self._recent.pop(uri, None)
        self._draft_languages.pop(uri, None)
        if self._cursor_named is not None and self._cursor_named[0] == uri:
            self._cursor_named = None
        session = self._sessions.pop(uri, None)
        if session is not None and session.job is not None:
            session.job.cancel()

    # -- notebooks -------------------------------------------------------------
    def open_notebook(
        self, uri: str, version: int, cells: Sequence[str], texts: Iterable[CellText]
    ) -> None:
        """Open notebook ``uri``: its cells' URIs in order and their texts (``notebooks``)."""
        self.notebooks.open(uri, cells, texts)
        self._sync_notebook(uri, version)

    def change_notebook(self, uri: str, version: int, change: NotebookChange) -> None:
        """Apply a notebook's change; raises ``UnknownDocument`` for one that is not open."""
        if not self.notebooks.change(uri, change):
            raise UnknownDocument(uri)
        self._sync_notebook(uri, version)

    def close_notebook(self, uri: str) -> None:
        self.notebooks.close(uri)
        for joined in self._notebook_texts.pop(uri, ()):
            self._close_document(joined)

    def _sync_notebook(self, uri: str, version: int) -> None:
        """Bring the notebook's texts in ``documents`` up to its cells: each changed one by
        one edit where it differs (``notebooks.difference``), so the place typed at is known."""
        texts = self.notebooks.texts(uri)
        for gone in self._notebook_texts.get(uri, set()) - texts.keys():
            self._close_document(gone)
        self._notebook_texts[uri] = set(texts)
        for joined, (language, text) in texts.items():
            doc = self.documents.get(joined)
            if doc is None:
                self._open_document(joined, language, version, text)
            elif doc.text != text:
                start, end, new = difference(doc.text, text)
                splice = functools.partial(self.documents.splice, joined, version, start, end, new)
                self._edited(joined, splice)

    def _in_text(self, uri: str, line: int, character: int) -> tuple[str, int, int]:
        """A position of a notebook cell in its notebook text; any other as it is."""
        place = self.notebooks.place(uri, line, character)
        return (uri, line, character) if place is None else (place.uri, place.line, place.character)

    def cursor_moved(self, uri: str, line: int, character: int) -> None:
        """The editor's cursor rests at ``line``/``character`` of ``uri``: pre-warm there.

        Ignored for a document that is not open and while the cursor sits at
        the suggestion on screen (pre-generation is working there).
        """
        self._cursor_reported = True
        self._warm_at_cursor(*self._in_text(uri, line, character))

    def cursor_named(self, uri: str, line: int, character: int) -> None:
        """A request named the cursor's place (``textDocument/documentHighlight``).

        Clients that never report the cursor still ask for the highlights of
        the symbol where it rests (Emacs' eglot and lsp-mode, Sublime Text's
        LSP, Neovim with the usual ``CursorHold`` autocommand): the place is
        pre-warmed as a report's would be. Ignored once the client reports
        the cursor itself, and when it names the place it named last (those
        clients ask again after every pause there).
        """
        where = self._in_text(uri, line, character)
        if self._cursor_reported or self._cursor_named == where:
            return
        self._cursor_named = where
        self._warm_at_cursor(*where)

    def _warm_at_cursor(self, uri: str, line: int, character: int) -> None:
        doc = self.documents.get(uri)
        if doc is None or self._worker.closed:
            return
        offset = doc.offset_at(line, character, self.documents.encoding)
        session = self._sessions.get(uri)
        pending = session.pending if session is not None else None
        if pending is not None and pending.anchor <= offset <= pending.anchor + len(pending.text):
            return
        self._background.schedule_prewarm(uri, offset, rested=True)

    def _touch(self, uri: str) -> None:
        self._recent[uri] = None
        self._recent.move_to_end(uri, last=False)

    def _job(
        self,
        session: Session,
        uri: str,
        text: str,
        offset: int,
        settings: Settings,
        t0: float,
        ctx: CursorContext | None = None,
    ) -> Job:
        """A job for ``uri`` with snapshots of the other open documents (on the loop)."""
        doc = self.documents.get(uri)
        others = [
            DocumentSnapshot(d.uri, d.revision, d.text)
            for u in self._recent
            if u != uri and (d := self.documents.get(u)) is not None
        ]
        language = self._draft_languages.get(uri, doc.language if doc is not None else "")
        ctx = ctx or CursorContext.at(text, max(0, offset))
        inputs = CompletionInput(
            uri,
            text,
            offset,
            language,
            ctx,
            settings,
            others,
            t0,
            recent_suggestions=tuple(session.recent),
        )
        return Job(session, inputs)

    # -- settings and lifecycle -------------------------------------------
    @property
    def settings(self) -> Settings:
        """The settings in use: those given, with the loaded model's adaptive defaults.

        ``windowTokens``, ``maxGenerationMs`` and ``maxTokens`` that no layer
        set (``explicit``) are chosen from the model's measured rates
        (``structspec.rates.adapt``) once it is loaded.
        """
        return adapt(self._given, self._status.rates, self._explicit)

    def configure(self, settings: Settings, explicit: Collection[str] = ()) -> None:
        """Use ``settings`` from the next request on (the one way to apply settings).

        ``explicit``: the names of the settings some layer set; the others
        may be chosen by the model's rates (``settings``). A change of a
        setting that shapes the model or the engine (the first call included)
        loads them in the worker now rather than on the next request; other
        settings cost nothing.
        """
        if model_key(settings) != model_key(self._given):
            for session in self._sessions.values():
                # Another model's: its suggestion (with the token ids pre-generation
                # would go on from) and its latest generations (the drafts' input).
                session.pending = None
                session.recent.clear()
        self._given, self._explicit = settings, frozenset(explicit)
        if self._warm_keys != (model_key(settings), engine_key(settings)):
            self.start()

    def start(self) -> None:
        """Load the model and engine for the current settings in the worker now.

        At most one warm-up waits in the queue: it reads the settings of the
        moment it runs, so settings changed meanwhile share it.
        """
        self._worker.bind_loop()
        if self._worker.closed:
            return
        self._warm_keys = (model_key(self.settings), engine_key(self.settings))
        if self._warm_queued:
            return
        self._status.set_state(BUSY, "loading model")
        self._warm_queued = True  # before submitting: the worker may clear it at once
        future = self._worker.submit(self._warm)
        if future is None:  # shut down
            self._warm_queued = False
            return
        future.add_done_callback(lambda f: self._worker.call_soon(self._warm_done, f))

    def _warm_done(self, future: concurrent.futures.Future[str | None]) -> None:
        self._status.warm_done(None if future.cancelled() else future.result())

    def _warm(self) -> str | None:
        """Worker: load the engine for the latest settings; the error message, if any."""
        # Cleared before the settings are read: a change after this queues another warm-up.
        self._warm_queued = False
        if self._worker.closed:
            return None
        settings = self.settings
        if settings.backend:  # a remote engine: nothing to load (completion/remote.py)
            return self._worker.host.warm_remote(settings)
        try:
            engine = self._worker.host.engine_for(settings)
            if settings.token_healing:
                vocab_index(engine.model)  # built once per model: no request pays for it
        except ModelError as exc:
            return str(exc)
        except Exception as exc:  # a bug must not leave the state "busy" forever
            log.exception("loading the engine failed")
            return f"structspec: loading the engine failed: {exc}"
        return None

    def close(self) -> None:
        """Cancel everything in flight; the worker then releases the model and ends."""
        if self._worker.closed:
            return
        self._background.abandon()
        for session in self._sessions.values():
            if session.job is not None:
                session.job.cancel()
        self._worker.close()

    def join(self, timeout: float = 10.0) -> bool:
        """After ``close``: wait until the worker released the model."""
        return self._worker.join(timeout)

    # -- status and acceptance ------------------------------------------------
    @property
    def model_name(self) -> str:
        return self._status.model_name

    def status(self) -> Status:
        return self._status.status()

    def accept(self, suggestion_id: str) -> bool:
        """The user took suggestion ``suggestion_id``; ``False`` if it is unknown."""
        accepted = self.stats.record_accept(suggestion_id)
        if accepted:
            self._status.emit()
        return accepted

    # -- completion ---------------------------------------------------------
    async def complete(self, request: CompletionRequest) -> Suggestion | None:
        """A suggestion at the request's cursor, or ``None`` (see ``request``).

        A request for the same text and cursor as the one in flight (an
        editor asking for inline and menu completion at once) shares its
        generation; any other request for the document cancels it, unless it
        types what that generation is writing (it is then typed through its
        answer). Raises ``asyncio.CancelledError`` when the awaiting task is
        cancelled (the generation stops too once no request waits for it).

        In a notebook cell, the request is asked in the cell's notebook text
        and its suggestion moved back to the cell (``notebooks``).
        """
        self._worker.bind_loop()
        uri, line, character = self._in_text(request.uri, request.line, request.character)
        doc = self.documents.get(uri)
        if doc is not None:
            at = doc.offset_at(line, character, self.documents.encoding)
            self._sessions.setdefault(uri, Session()).places.visit(at)
        suggestion = await self._requests.complete(request)
        self._background.resume(uri)  # warm where the user is while they read
        return suggestion

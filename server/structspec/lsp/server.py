"""The structspec language server: thin pygls handlers over ``CompletionService``.

Each handler fetches what the request names, calls the service and converts
the result; all completion logic lives in ``structspec.completion``.

Robustness: the JSON-RPC side is ``structspec.lsp.protocol`` (parse errors,
lifecycle, invalid params, no leaked futures), framing and transports are
``structspec.lsp.framing`` and ``structspec.lsp.transport``. Here: edits to
unknown documents are logged, not raised; server-side errors are logged
(``--log-file``) and sent as ``window/logMessage``, never as a pop-up per
failure.

Settings, lowest precedence first: defaults, config file, environment
(``structspec.config.load_settings``), ``initializationOptions``, the latest
``workspace/didChangeConfiguration`` (section ``structspec``), and command-line
flags given explicitly (``--model``, ``--threads``), which always win. A bad
value is reported with ``window/showMessage`` and its default is kept.

A ``didChangeConfiguration`` without settings makes the server pull the
section with ``workspace/configuration``. One pull is outstanding at a time:
changes that arrive while it is are folded into one more pull when it ends, so
a client that never answers costs one request (given up after
``structspec.lsp.protocol.CLIENT_REQUEST_TIMEOUT_S``), not one per change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcMethodNotFound
from pygls.lsp.server import LanguageServer

from structspec import __version__
from structspec.completion.documents import ENCODINGS, UnknownDocument
from structspec.completion.service import CompletionRequest, CompletionService, Status
from structspec.config import Settings, apply
from structspec.lsp.convert import (
    ACCEPT_COMMAND,
    CURSOR_NOTIFICATION,
    NOTEBOOK_SYNC,
    STATUS_NOTIFICATION,
    cell_text,
    completion_list,
    cursor_position,
    inline_completion,
    language_id,
    notebook_change,
    reports_cursor,
    selected_item,
    status_json,
    text_changes,
)
from structspec.lsp.protocol import StructspecProtocol

log = logging.getLogger(__name__)

#: Errors of a request the client got wrong: answered with their code, not a server fault.
CLIENT_MISTAKES = (JsonRpcMethodNotFound, JsonRpcInvalidParams, JsonRpcInvalidRequest)

STATUS_COMMAND = "structspec.status"
#: Keys a client may send in the ``structspec`` section that are not server
#: settings (VS Code's ``structspec.trace.server``): ignored silently.
CLIENT_ONLY_KEYS = frozenset({"trace"})


class StructspecServer(LanguageServer):
    """The server object: pygls plumbing plus the completion service and settings."""

    protocol: StructspecProtocol

    def __init__(
        self,
        base: Settings,
        pinned: Mapping[str, Any] | None = None,
        explicit: Collection[str] = (),
    ) -> None:
        super().__init__(
            "structspec-lsp",
            __version__,
            protocol_cls=StructspecProtocol,
            notebook_document_sync=NOTEBOOK_SYNC,
        )
        self.base = base
        #: The settings of ``base`` that a layer set (config file, environment, flag).
        self.base_explicit = frozenset(explicit)
        self.pinned = dict(pinned or {})
        self.init_values: dict[str, Any] = {}
        self.client_values: dict[str, Any] = {}
        settings, explicit, _ = self.effective_settings()
        self.service = CompletionService(
            settings,
            explicit=explicit,
            on_status=self.send_status,
            on_message=self.tell_user,
        )
        self.startup_messages: list[tuple[str, str]] = []
        # Set by shutdown: nothing more is sent on our own initiative (after exit
        # the output is closed, and a failed send must not turn into a loop).
        self.closing = False
        self._reporting = False
        #: A configuration pull is outstanding / another is due when it ends.
        self._pulling = False
        self._pull_again = False
        #: Set by ``stop``: the transport ends its loop (``structspec.lsp.transport``).
        self.stopped = asyncio.Event()
        self.exit_code: int | None = None

    def stop(self, code: int) -> None:
        """End the server with exit ``code`` (the first code given wins)."""
        if self.exit_code is None:
            self.exit_code = code
        self.closing = True
        self.stopped.set()

    # -- settings ----------------------------------------------------------
    def effective_settings(self) -> tuple[Settings, frozenset[str], list[str]]:
        """Settings from every layer, the names some layer set, and the client layers' errors.

        The settings no layer set may be chosen by the model's rates
        (``CompletionService.settings``).
        """
        settings, from_init, errors = apply(self.base, self.init_values, camel_case=True)
        settings, from_client, more = apply(settings, self.client_values, camel_case=True)
        settings, from_flags, _ = apply(settings, self.pinned)
        explicit = self.base_explicit.union(from_init, from_client, from_flags)
        return settings, explicit, errors + more

    def report_settings_errors(self, errors: list[str]) -> None:
        for error in errors:
            if error.startswith("unknown setting"):
                self.tell_user("info", f"structspec: ignoring {error}")
            else:
                self.tell_user("warning", f"structspec: invalid setting: {error}")

    def take_client_values(self, values: Any, *, layer: str) -> bool:
        """Store a client's settings object for ``layer``; ``False`` if it is not usable."""
        section = _section(values)
        if section is None:
            if values is not None:
                nested = isinstance(values, dict)  # its "structspec" entry is not an object
                what = f"{layer}.structspec" if nested else layer
                kind = type(values["structspec"] if nested else values).__name__
                self.tell_user(
                    "warning", f"structspec: {what} must be an object of settings, not {kind}"
                )
            return False
        clean = {k: v for k, v in section.items() if k not in CLIENT_ONLY_KEYS}
        if layer == "initializationOptions":
            self.init_values = clean
        else:
            self.client_values = clean
        return True

    def refresh_settings(self) -> None:
        settings, explicit, errors = self.effective_settings()
        self.report_settings_errors(errors)
        self.service.configure(settings, explicit)

    async def pull_configuration(self) -> None:
        """Ask the client for the ``structspec`` section, one pull at a time (module docstring)."""
        caps = self.client_capabilities
        if not (caps and caps.workspace and caps.workspace.configuration):
            return
        if self._pulling:
            self._pull_again = True
            return
        self._pulling = True
        try:
            self._pull_again = True
            while self._pull_again and not self.closing:
                self._pull_again = False
                await self._pull_once()
        finally:
            self._pulling = False

    async def _pull_once(self) -> None:
        try:
            result = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="structspec")])
            )
        except Exception as exc:  # refused, failed or timed out: keep what we have
            log.info("workspace/configuration failed: %s", exc)
            return
        # pygls hands the result over as a tuple; one item per ConfigurationItem.
        values = result[0] if isinstance(result, (list, tuple)) and result else None
        if values is not None and self.take_client_values(values, layer="workspace/configuration"):
            self.refresh_settings()

    # -- messages to the client --------------------------------------------
    def tell_user(self, level: str, text: str) -> None:
        """``error``/``warning`` pop up (``window/showMessage``); ``info`` goes to the log."""
        if self.closing:
            return
        if getattr(self.protocol, "writer", None) is None:
            self.startup_messages.append((level, text))
            return
        if level == "info":
            self.window_log_message(
                types.LogMessageParams(type=types.MessageType.Info, message=text)
            )
            return
        kind = types.MessageType.Error if level == "error" else types.MessageType.Warning
        self.window_show_message(types.ShowMessageParams(type=kind, message=text))

    def send_status(self, status: Status) -> None:
        if not self.closing and getattr(self.protocol, "writer", None) is not None:
            self.protocol.notify(STATUS_NOTIFICATION, status_json(status))

    def report_server_error(self, error: Exception, source: Any) -> None:
        if isinstance(error, CLIENT_MISTAKES):
            # Answered with its error code already: the client's mistake, not ours.
            log.info("refused a request: %s", error)
            return
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        # Sending the report can itself fail (the transport may be what broke) and
        # would be reported again: report once, and never while closing.
        if self.closing or self._reporting:
            return
        self._reporting = True
        try:
            with contextlib.suppress(Exception):
                self.window_log_message(
                    types.LogMessageParams(
                        type=types.MessageType.Error,
                        message=f"structspec: internal error: {error}",
                    )
                )
        finally:
            self._reporting = False


def _section(values: Any) -> dict[str, Any] | None:
    """The ``structspec`` settings in a client object (nested or flat); ``None`` if unusable."""
    if not isinstance(values, dict):
        return None
    inner = values.get("structspec")
    if isinstance(inner, dict):
        return inner
    if "structspec" in values:
        return None
    return values


def _encoding(value: Any) -> str:
    text = str(getattr(value, "value", value))
    return text if text in ENCODINGS else "utf-16"


def build_server(
    base: Settings, pinned: Mapping[str, Any] | None = None, explicit: Collection[str] = ()
) -> StructspecServer:
    """A ready server (not started); see the module docstring for settings.

    ``explicit``: the settings of ``base`` that a layer set (``LoadedSettings.explicit``).
    """
    server = StructspecServer(base, pinned, explicit)
    _register_lifecycle(server, server.service)
    _register_documents(server, server.service)
    _register_completion(server, server.service)
    return server


def _register_lifecycle(server: StructspecServer, service: CompletionService) -> None:
    """initialize/initialized, configuration changes, shutdown and exit."""

    @server.feature(types.INITIALIZE)
    def initialize(ls: StructspecServer, params: types.InitializeParams) -> None:
        with contextlib.suppress(RuntimeError):  # no workspace: keep UTF-16
            service.documents.encoding = _encoding(ls.workspace.position_encoding)
        ls.take_client_values(params.initialization_options, layer="initializationOptions")
        if not reports_cursor(params.capabilities):
            _register_highlights(ls, service)  # before pygls computes the capabilities

    @server.feature(types.INITIALIZED)
    async def initialized(ls: StructspecServer, params: types.InitializedParams) -> None:
        for level, text in ls.startup_messages:
            ls.tell_user(level, text)
        ls.startup_messages.clear()
        ls.refresh_settings()  # loads the model in the worker; initialize has been answered
        await ls.pull_configuration()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: StructspecServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if ls.take_client_values(params.settings, layer="didChangeConfiguration settings"):
            ls.refresh_settings()
        else:
            await ls.pull_configuration()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: StructspecServer, params: None) -> None:
        ls.closing = True
        service.close()

    @server.feature(types.EXIT)
    def exit_(ls: StructspecServer, params: None) -> None:
        ls.closing = True  # also when a client exits without shutdown
        service.close()


def _register_documents(server: StructspecServer, service: CompletionService) -> None:
    """Document and notebook open/change/close and the client's cursor notification."""

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: StructspecServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        service.open_document(doc.uri, language_id(doc.language_id), doc.version, doc.text)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: StructspecServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        changes = text_changes(params.content_changes)
        try:
            service.change_document(uri, params.text_document.version, changes)
        except UnknownDocument:
            if changes and changes[-1].range is None:
                # A whole-text change says everything we need: adopt the document.
                service.open_document(uri, "", params.text_document.version, changes[-1].text)
            else:
                log.warning("didChange for a document that is not open: %s", uri)

    def unreadable_edit(uri: str, notebook: bool) -> None:
        # Applied or not, the text is no longer the editor's: suggestions from it
        # would be written at the wrong places. Forgotten until the editor sends
        # the whole text (a whole-text change adopts it; reopening the file does).
        # A close that cannot be read forgets it too, as it asked.
        log.warning("a didChange or didClose of %s could not be read: its text is forgotten", uri)
        if notebook:
            service.close_notebook(uri)
        else:
            service.close_document(uri)

    server.protocol.unreadable_edit = unreadable_edit

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: StructspecServer, params: types.DidCloseTextDocumentParams) -> None:
        service.close_document(params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def did_open_notebook(
        ls: StructspecServer, params: types.DidOpenNotebookDocumentParams
    ) -> None:
        notebook = params.notebook_document
        cells = [cell.document for cell in notebook.cells]
        texts = [cell_text(item) for item in params.cell_text_documents]
        service.open_notebook(notebook.uri, notebook.version, cells, texts)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def did_change_notebook(
        ls: StructspecServer, params: types.DidChangeNotebookDocumentParams
    ) -> None:
        notebook = params.notebook_document
        try:
            service.change_notebook(notebook.uri, notebook.version, notebook_change(params.change))
        except UnknownDocument:
            log.warning("didChange of a notebook that is not open: %s", notebook.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def did_close_notebook(
        ls: StructspecServer, params: types.DidCloseNotebookDocumentParams
    ) -> None:
        service.close_notebook(params.notebook_document.uri)

    @server.feature(CURSOR_NOTIFICATION)
    def did_move_cursor(ls: StructspecServer, params: Any) -> None:
        where = cursor_position(params)
        if where is None:
            log.warning("ignoring %s with params %r", CURSOR_NOTIFICATION, params)
            return
        service.cursor_moved(*where)


def _register_highlights(server: StructspecServer, service: CompletionService) -> None:
    """``textDocument/documentHighlight``: where the cursor rests, for a client that does not say.

    Clients without ``structspec/didMoveCursor`` ask for the highlights of
    the symbol under a cursor that rests (Emacs, Sublime Text, Neovim with a
    ``CursorHold`` autocommand): the place is pre-warmed. The answer is no
    highlights (``null``): an editor takes them from its other servers.
    Registered at ``initialize`` only for clients that do not declare the
    cursor report (``convert.reports_cursor``; the VS Code client does): a
    client that reports it is not asked for one more request per cursor move.
    """

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
    def document_highlight(
        ls: StructspecServer, params: types.DocumentHighlightParams
    ) -> list[types.DocumentHighlight] | None:
        where = params.position
        service.cursor_named(params.text_document.uri, where.line, where.character)
        return None


def _register_completion(server: StructspecServer, service: CompletionService) -> None:
    """Inline and menu completion, and the accept and status commands."""

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline(
        ls: StructspecServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        context, position = params.context, params.position
        invoked = context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        selected = selected_item(position, context.selected_completion_info)
        request = CompletionRequest(
            params.text_document.uri, position.line, position.character, invoked, selected
        )
        suggestion = await service.complete(request)
        return inline_completion(suggestion) if suggestion is not None else None

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionOptions(trigger_characters=[".", "("], resolve_provider=False),
    )
    async def completion(
        ls: StructspecServer, params: types.CompletionParams
    ) -> types.CompletionList:
        invoked = params.context is None or (
            params.context.trigger_kind == types.CompletionTriggerKind.Invoked
        )
        request = CompletionRequest(
            params.text_document.uri, params.position.line, params.position.character, invoked
        )
        return completion_list(await service.complete(request))

    @server.command(ACCEPT_COMMAND)
    def accept(ls: StructspecServer, *args: Any) -> dict[str, Any]:
        suggestion_id = args[0] if args else None
        if isinstance(suggestion_id, dict):
            suggestion_id = suggestion_id.get("id")
        accepted = isinstance(suggestion_id, str) and service.accept(suggestion_id)
        return {"accepted": accepted, "acceptance": round(service.stats.acceptance, 4)}

    @server.command(STATUS_COMMAND)
    def status(ls: StructspecServer, *args: Any) -> dict[str, Any]:
        return status_json(service.status())

"""The structspec language server: thin pygls handlers over ``CompletionService``.

Each handler fetches what the request names, calls the service and converts
the result; all completion logic lives in ``structspec.completion``.

Robustness beyond pygls' defaults:

- A request whose parameters do not fit the LSP types (a string where a line
  number belongs) is answered with ``InvalidParams`` instead of being dropped,
  so a client never waits forever.
- Documents are kept only in the service's store (pygls' own workspace copy
  is bypassed): one copy of a 1 MB buffer, and edits to unknown documents are
  logged, not raised.
- Server-side errors are logged (``--log-file``) and sent as
  ``window/logMessage``, never as a pop-up per failure. Error responses carry
  no traceback and no file path: an internal error is answered with a fixed
  message and the details go to the log.
- JSON-RPC as the spec says (``receive``): a body that is not JSON is answered
  with ``-32700``, a message that is not JSON-RPC 2.0 with ``-32600``;
  requests before ``initialize`` with ``-32002``, a second ``initialize`` and
  requests after ``shutdown`` with ``-32600``; notifications then are dropped
  (``exit`` excepted, which ends the server with 0 after ``shutdown``, else 1).
- A string field that is not a string (``"text": null`` in ``didOpen``) makes
  the message invalid: a request gets ``InvalidParams``, a notification is
  dropped with a log line; pygls would turn it into the string ``'None'``.
- Finished notification handlers leave nothing behind (pygls keeps the future
  of every generator or coroutine notification handler in
  ``_request_futures`` forever: about 2 KB per edit).

Settings, lowest precedence first: defaults, config file, environment
(``structspec.config.load_settings``), ``initializationOptions``, the latest
``workspace/didChangeConfiguration`` (section ``structspec``), and command-line
flags given explicitly (``--model``, ``--threads``), which always win. A bad
value is reported with ``window/showMessage`` and its default is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from structspec import __version__
from structspec.completion.documents import ENCODINGS, Range, TextChange, UnknownDocument
from structspec.completion.service import CompletionRequest, CompletionService, Status
from structspec.config import Settings, apply
from structspec.lsp.convert import (
    ACCEPT_COMMAND,
    STATUS_NOTIFICATION,
    completion_list,
    inline_completion,
)

log = logging.getLogger(__name__)

STATUS_COMMAND = "structspec.status"
#: Keys a client may send in the ``structspec`` section that are not server
#: settings (VS Code's ``structspec.trace.server``): ignored silently.
CLIENT_ONLY_KEYS = frozenset({"trace"})


class _ClientMistakes(logging.Filter):
    """Keep pygls' log of a client's malformed message to one line, without a traceback.

    A request or notification whose fields do not fit the LSP types is the
    client's mistake, answered with ``InvalidParams`` or dropped with a warning
    of ours; a traceback in the log would read like a server bug.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Unable to deserialize message"):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, JsonRpcException) and exc.code != _INTERNAL.code:
            record.exc_info = None
            record.msg = f"{record.msg}: {exc.message.replace('%', '%%')}"
        return True


logging.getLogger("pygls.protocol.json_rpc").addFilter(_ClientMistakes())

#: What an internal error tells the client; the details go to the server log.
_INTERNAL = JsonRpcException("Internal error (details are in the server log)", code=-32603)


def _structure_str(value: Any, _type: Any) -> str:
    """cattrs' default turns any value into a string (``None`` into ``'None'``): refuse."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _envelope_problem(data: Any) -> str | None:
    """Why ``data`` is not a JSON-RPC 2.0 request, notification or response; ``None`` if it is."""
    if not isinstance(data, dict):
        return f"expected an object, got {type(data).__name__}"
    if data.get("jsonrpc") != "2.0":
        return 'expected "jsonrpc": "2.0"'
    if "method" in data:
        if not isinstance(data["method"], str):
            return "method must be a string"
        if "id" in data and not _is_id(data["id"]):
            return "id must be a string or an integer"
        if "params" in data and not isinstance(data["params"], (dict, list, type(None))):
            return "params must be an object or an array"
        return None
    if not _is_id(data.get("id")) or ("result" not in data and "error" not in data):
        return "neither a request, a notification nor a response"
    return None


def _public(error: types.ResponseError) -> types.ResponseError:
    """``error`` as the client may see it: no traceback, no internal detail."""
    if error.code == _INTERNAL.code:
        return _INTERNAL.to_response_error()
    return types.ResponseError(code=error.code, message=error.message[:500])


def _short(exc: BaseException, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."


class _BadRequest:
    """A request whose params could not be structured; answered with an error."""

    def __init__(self, msg_id: Any, method: str, error: JsonRpcException) -> None:
        self.id = msg_id
        self.method = method
        self.error = error


class StructspecProtocol(LanguageServerProtocol):
    """pygls' protocol with the robustness described in the module docstring."""

    _server: StructspecServer

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        converter.register_structure_hook(str, _structure_str)
        #: ``initialize`` was answered: other requests are served from now on.
        self.handshake_done = False

    @property
    def shutdown_received(self) -> bool:
        return self._shutdown

    # -- JSON-RPC ------------------------------------------------------------
    def receive(self, body: bytes) -> None:
        """Handle one message body from the transport; never raises."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            log.warning("message is not JSON (%d bytes): %s", len(body), _short(exc))
            self._send_error(None, JsonRpcParseError("Parse error: the message is not JSON"))
            return
        problem = _envelope_problem(data)
        if problem is not None:
            msg_id = data.get("id") if isinstance(data, dict) else None
            msg_id = msg_id if _is_id(msg_id) else None
            log.warning("invalid JSON-RPC message: %s", problem)
            self._send_error(msg_id, JsonRpcInvalidRequest(f"Invalid request: {problem}"))
            return
        try:
            message = self.structure_message(data)
        except JsonRpcException:
            # Requests become _BadRequest (answered); this is a notification or a
            # response whose fields do not fit: nobody waits for an answer.
            log.warning(
                "dropped a %s message whose fields do not fit", data.get("method", "response")
            )
            return
        try:
            self.handle_message(message)
        except Exception:
            log.exception("handling %s failed", data.get("method", "a response"))
            if "method" in data and "id" in data:
                self._send_error(data["id"], _INTERNAL)

    def _send_error(self, msg_id: Any, error: JsonRpcException) -> None:
        if msg_id is None:
            # An error about a message whose id is unknown has ``"id": null``, which
            # pygls' serializer would leave out.
            public = _public(error.to_response_error())
            body = {"code": public.code, "message": public.message}
            self._send_data({"jsonrpc": "2.0", "id": None, "error": body})
            return
        self._send_response(msg_id, error=error.to_response_error())

    def _send_response(
        self, msg_id: Any, result: Any | None = None, error: types.ResponseError | None = None
    ) -> None:
        if error is not None:
            error = _public(error)
        super()._send_response(msg_id, result, error)

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                return _BadRequest(data["id"], str(data["method"]), exc)
            raise

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        is_request = method is not None and msg_id is not None
        if method is not None and method != types.EXIT:
            refusal: JsonRpcException | None = None
            if self._shutdown:
                refusal = JsonRpcInvalidRequest("the server is shutting down")
            elif not self.handshake_done and method != types.INITIALIZE:
                refusal = JsonRpcServerNotInitialized("the server is not initialized")
            elif self.handshake_done and method == types.INITIALIZE:
                refusal = JsonRpcInvalidRequest("initialize was already received")
            if refusal is not None:
                if is_request:
                    self._send_error(msg_id, refusal)
                else:
                    log.info("dropped %s notification: %s", method, refusal.message)
                return
        if isinstance(message, _BadRequest):
            log.warning("invalid params for %s (id %r)", message.method, message.id)
            self._send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)
        if method == types.INITIALIZE and is_request:
            self.handshake_done = True

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Any,
        callback: Callable[[Future[Any]], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        # pygls files the future of a generator or coroutine handler under
        # ``msg_id`` and only removes it for requests: forget it when it is done.
        def done(future: Future[Any]) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        if not _is_id(msg_id):  # ``{"id": [1]}`` passes the LSP types' structuring
            log.warning("dropped $/cancelRequest for an id that is not one: %.60r", msg_id)
            return
        super()._handle_cancel_notification(msg_id)

    def _run_generator(
        self, future: Future[Any] | None, *, gen: Generator[Any, Any, Any], result_future: Any
    ) -> None:
        # pygls calls ``future.result()`` on a handler that was cancelled (at
        # shutdown, or when the loop ends) and the CancelledError escapes into the
        # event loop; the request would never be answered. Cancel the outer one.
        if future is not None and future.cancelled():
            gen.close()
            result_future.cancel()
            return
        super()._run_generator(future, gen=gen, result_future=result_future)

    # -- lifecycle -----------------------------------------------------------
    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        current = self.msg_id
        # A copy: cancelling runs callbacks that remove entries.
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls raises SystemExit here, which its transport swallows (exit code 0
        # even without shutdown); the transport ends the loop on ``stop`` instead.
        if (handler := self.fm.features.get(types.EXIT)) is not None:
            yield handler, args, None
        self._server.stop(0 if self._shutdown else 1)

    # Document sync: the user handlers (the service's store) only.
    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(
        self, params: types.DidOpenTextDocumentParams
    ) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(
        self, params: types.DidChangeTextDocumentParams
    ) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(
        self, params: types.DidCloseTextDocumentParams
    ) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None


class StructspecServer(LanguageServer):
    """The server object: pygls plumbing plus the completion service and settings."""

    protocol: StructspecProtocol

    def __init__(self, base: Settings, pinned: Mapping[str, Any] | None = None) -> None:
        super().__init__("structspec-lsp", __version__, protocol_cls=StructspecProtocol)
        self.base = base
        self.pinned = dict(pinned or {})
        self.init_values: dict[str, Any] = {}
        self.client_values: dict[str, Any] = {}
        self.service = CompletionService(
            self.effective_settings()[0],
            on_status=self.send_status,
            on_message=self.tell_user,
        )
        self.startup_messages: list[tuple[str, str]] = []
        # Set by shutdown: nothing more is sent on our own initiative (after exit
        # the output is closed, and a failed send must not turn into a loop).
        self.closing = False
        self._reporting = False
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
    def effective_settings(self) -> tuple[Settings, list[str]]:
        """Settings from every layer, and the errors of the client layers."""
        settings, _, errors = apply(self.base, self.init_values, camel_case=True)
        settings, _, more = apply(settings, self.client_values, camel_case=True)
        settings, _, _ = apply(settings, self.pinned)
        return settings, errors + more

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
                kind = type(values).__name__
                self.tell_user(
                    "warning", f"structspec: {layer} must be an object of settings, not {kind}"
                )
            return False
        clean = {k: v for k, v in section.items() if k not in CLIENT_ONLY_KEYS}
        if layer == "initializationOptions":
            self.init_values = clean
        else:
            self.client_values = clean
        return True

    def refresh_settings(self) -> None:
        settings, errors = self.effective_settings()
        self.report_settings_errors(errors)
        self.service.configure(settings)

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
            self.protocol.notify(STATUS_NOTIFICATION, status.to_json())

    def report_server_error(self, error: Exception, source: Any) -> None:
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


def build_server(base: Settings, pinned: Mapping[str, Any] | None = None) -> StructspecServer:
    """A ready server (not started); see the module docstring for settings."""
    server = StructspecServer(base, pinned)
    service = server.service

    @server.feature(types.INITIALIZE)
    def initialize(ls: StructspecServer, params: types.InitializeParams) -> None:
        with contextlib.suppress(RuntimeError):  # no workspace: keep UTF-16
            service.documents.encoding = _encoding(ls.workspace.position_encoding)
        ls.take_client_values(params.initialization_options, layer="initializationOptions")

    @server.feature(types.INITIALIZED)
    async def initialized(ls: StructspecServer, params: types.InitializedParams) -> None:
        for level, text in ls.startup_messages:
            ls.tell_user(level, text)
        ls.startup_messages.clear()
        settings, errors = ls.effective_settings()
        ls.report_settings_errors(errors)
        service.settings = settings
        service.start()  # load the model in the worker; initialize has been answered
        await _pull_configuration(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: StructspecServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if ls.take_client_values(params.settings, layer="didChangeConfiguration settings"):
            ls.refresh_settings()
        else:
            await _pull_configuration(ls)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: StructspecServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        service.open_document(doc.uri, doc.language_id, doc.version, doc.text)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: StructspecServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        changes = []
        for change in params.content_changes:
            r = getattr(change, "range", None)
            rng = None
            if r is not None:
                rng = Range(r.start.line, r.start.character, r.end.line, r.end.character)
            changes.append(TextChange(change.text, rng))
        try:
            service.change_document(uri, params.text_document.version, changes)
        except UnknownDocument:
            if changes and changes[-1].range is None:
                # A whole-text change says everything we need: adopt the document.
                service.open_document(uri, "", params.text_document.version, changes[-1].text)
            else:
                log.warning("didChange for a document that is not open: %s", uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: StructspecServer, params: types.DidCloseTextDocumentParams) -> None:
        service.close_document(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline(
        ls: StructspecServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
        request = CompletionRequest(
            params.text_document.uri, params.position.line, params.position.character, invoked
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
        return service.status().to_json()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: StructspecServer, params: None) -> None:
        ls.closing = True
        service.close()

    @server.feature(types.EXIT)
    def exit_(ls: StructspecServer, params: None) -> None:
        ls.closing = True  # also when a client exits without shutdown
        service.close()

    return server


async def _pull_configuration(ls: StructspecServer) -> None:
    """Ask for the ``structspec`` section when the client supports ``workspace/configuration``."""
    caps = ls.client_capabilities
    if not (caps and caps.workspace and caps.workspace.configuration):
        return
    try:
        result = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="structspec")])
        )
    except Exception as exc:  # the client may refuse or fail: keep what we have
        log.info("workspace/configuration failed: %s", exc)
        return
    # pygls hands the result over as a tuple; one item per ConfigurationItem.
    values = result[0] if isinstance(result, (list, tuple)) and result else None
    if values is not None and ls.take_client_values(values, layer="workspace/configuration"):
        ls.refresh_settings()

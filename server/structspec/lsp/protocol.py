"""The JSON-RPC side of the language server: pygls' protocol, hardened.

``structspec.lsp.transport`` hands every framed body to
``StructspecProtocol.receive``; what pygls does with it is kept, with these
changes:

- JSON-RPC as the spec says: a body that is not JSON is answered with
  ``-32700``, a message that is not JSON-RPC 2.0 with ``-32600`` (``"id":
  null`` when its id is unknown); requests before ``initialize`` with
  ``-32002``, a second ``initialize`` and requests after ``shutdown`` with
  ``-32600``; notifications then are dropped (``exit`` excepted, which ends the
  server with 0 after ``shutdown``, else 1: pygls' ``exit`` always ended it
  with 0).
- A request whose parameters do not fit the LSP types (a string where a line
  number belongs) is answered with ``InvalidParams`` instead of being dropped,
  so a client never waits forever. A string field that is not a string
  (``"text": null`` in ``didOpen``) is such a misfit: pygls would have made it
  the string ``'None'``. A notification that does not fit is dropped with a
  log line; a ``didChange`` that does not fit (``"range": null``) is handed to
  ``unreadable_edit`` with its document's (or notebook's) URI: the server no
  longer knows that text. So is a ``didClose`` that does not fit: what it
  names is forgotten, as it asked.
- Error responses carry no traceback and no file path: an internal error is
  answered with a fixed message and the details go to the log.
- A request to the client (``workspace/configuration``) that is not answered
  within ``CLIENT_REQUEST_TIMEOUT_S`` is given up: its future fails with
  ``TimeoutError`` and nothing of it is kept (a client that never answers cost
  memory with every request).
- Documents and notebooks are kept only in the service's store (pygls' own
  workspace copy is bypassed): one copy of a 1 MB buffer.

The pygls internals this needs, and two pygls bugs worked around, are in
``structspec.lsp.pygls_compat``; this module names no pygls private.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
import uuid
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any

import attrs
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.protocol.language_server import lsp_method

from structspec.lsp.pygls_compat import DESERIALIZE_FAILURE, RPC_LOGGER, PyglsProtocol

log = logging.getLogger(__name__)


#: What an internal error tells the client; the details go to the server log.
_INTERNAL = JsonRpcException("Internal error (details are in the server log)", code=-32603)

#: How long a request to the client is waited for before it is given up.
CLIENT_REQUEST_TIMEOUT_S = 30.0


class _ClientMistakes(logging.Filter):
    """Keep pygls' log of a client's malformed message to one line, without a traceback.

    A request or notification whose fields do not fit the LSP types is the
    client's mistake, answered with ``InvalidParams`` or dropped with a warning
    of ours; a traceback in the log would read like a server bug.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(DESERIALIZE_FAILURE):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, JsonRpcException) and exc.code != _INTERNAL.code:
            record.exc_info = None
            record.msg = f"{record.msg}: {exc.message.replace('%', '%%')}"
            record.levelno, record.levelname = logging.WARNING, "WARNING"  # not a server fault
        return True


logging.getLogger(RPC_LOGGER).addFilter(_ClientMistakes())


def _structure_str(value: Any, _type: Any) -> str:
    """cattrs' default turns any value into a string (``None`` into ``'None'``): refuse."""
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _parses(uri: str) -> bool:
    """Whether ``uri`` is a URL Python can take apart (pygls' workspace does)."""
    try:
        urllib.parse.urlsplit(uri)
    except ValueError:
        return False
    return True


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


#: The ``didChange`` and ``didClose`` notifications, and the params field that names
#: what they edit or close. One that cannot be read forgets what it names: an
#: edit's text is no longer known, and a close was meant to forget it anyway.
_EDITED_FIELD = {
    types.TEXT_DOCUMENT_DID_CHANGE: "textDocument",
    types.TEXT_DOCUMENT_DID_CLOSE: "textDocument",
    types.NOTEBOOK_DOCUMENT_DID_CHANGE: "notebookDocument",
    types.NOTEBOOK_DOCUMENT_DID_CLOSE: "notebookDocument",
}
_NOTEBOOK_METHODS = (types.NOTEBOOK_DOCUMENT_DID_CHANGE, types.NOTEBOOK_DOCUMENT_DID_CLOSE)


class _UnreadableEdit:
    """A ``didChange`` or ``didClose`` whose params could not be structured, of a document
    (or notebook) named in it."""

    id = None

    def __init__(self, method: str, uri: str) -> None:
        self.method = method
        self.uri = uri


def _edited_uri(data: dict[str, Any]) -> str | None:
    """The document (or notebook) URI a ``didChange`` or ``didClose`` names, if it names one."""
    params = data.get("params")
    field = _EDITED_FIELD.get(str(data.get("method")))
    document = params.get(field) if isinstance(params, dict) and field else None
    uri = document.get("uri") if isinstance(document, dict) else None
    return uri if isinstance(uri, str) else None


def _user_handler_only(method: str) -> Callable[..., Generator[Any, Any, None]]:
    """A built-in handler of notification ``method`` that runs its user handler alone."""

    @lsp_method(method)
    def handler(self: PyglsProtocol, params: Any) -> Generator[Any, Any, None]:
        if (user := self.user_handler(method)) is not None:
            yield user, (params,), None

    return handler


class StructspecProtocol(PyglsProtocol):
    """pygls' protocol with the robustness described in the module docstring.

    ``server`` is the pygls server that builds it; its ``stop(code)`` ends the
    process on ``exit``.
    """

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        converter.register_structure_hook(str, _structure_str)
        self._stop: Callable[[int], None] = server.stop
        #: ``initialize`` was answered: other requests are served from now on.
        self.handshake_done = False
        #: Called with a document's (or, ``True``, a notebook's) URI when a
        #: ``didChange`` or ``didClose`` of it could not be read.
        self.unreadable_edit: Callable[[str, bool], None] = lambda uri, notebook: None

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
            # response whose fields do not fit.
            log.warning(
                "dropped a %s message whose fields do not fit", data.get("method", "response")
            )
            if "method" not in data and _is_id(data.get("id")):
                # The request it answers fails now rather than at its timeout.
                future = self.forget_request(data["id"])
                if future is not None and not future.done():
                    future.set_exception(
                        JsonRpcInvalidRequest("the client's response does not fit its request")
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
            self.send_json({"jsonrpc": "2.0", "id": None, "error": body})
            return
        self.send_response(msg_id, error=error.to_response_error())

    def send_response(
        self, msg_id: Any, result: Any | None = None, error: types.ResponseError | None = None
    ) -> None:
        if error is not None:
            error = _public(error)
        super().send_response(msg_id, result, error)

    def send_request(
        self,
        method: str,
        params: Any | None = None,
        callback: Callable[[Any], None] | None = None,
        msg_id: Any = None,
    ) -> Future[Any]:
        """pygls' ``send_request``, given up after ``CLIENT_REQUEST_TIMEOUT_S``.

        Called on the event loop (requests to the client are sent by handlers).
        """
        loop = asyncio.get_running_loop()  # raises before anything is sent or kept
        msg_id = str(uuid.uuid4()) if msg_id is None else msg_id
        future = super().send_request(method, params, callback, msg_id)
        timer = loop.call_later(CLIENT_REQUEST_TIMEOUT_S, self._give_up, msg_id, method)
        future.add_done_callback(lambda _: timer.cancel())
        return future

    def _give_up(self, msg_id: Any, method: str) -> None:
        future = self.forget_request(msg_id)
        if future is not None and not future.done():
            log.warning(
                "%s request got no answer in %g s: given up", method, CLIENT_REQUEST_TIMEOUT_S
            )
            future.set_exception(TimeoutError(f"the client did not answer {method}"))

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                return _BadRequest(data["id"], str(data["method"]), exc)
            uri = _edited_uri(data)
            if uri is not None:
                return _UnreadableEdit(str(data["method"]), uri)
            raise

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        msg_id = getattr(message, "id", None)
        is_request = method is not None and msg_id is not None
        if method is not None and method != types.EXIT:
            refusal: JsonRpcException | None = None
            if self.shutdown_received:
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
        if isinstance(message, _UnreadableEdit):
            self.unreadable_edit(message.uri, message.method in _NOTEBOOK_METHODS)
            return
        if isinstance(message, _BadRequest):
            log.warning("invalid params for %s (id %r)", message.method, message.id)
            self.send_response(message.id, error=message.error.to_response_error())
            return
        super().handle_message(message)
        if method == types.INITIALIZE and is_request:
            self.handshake_done = True

    def handle_cancel(self, msg_id: Any) -> None:
        if not _is_id(msg_id):  # ``{"id": [1]}`` passes the LSP types' structuring
            log.warning("dropped $/cancelRequest for an id that is not one: %.60r", msg_id)
            return
        super().handle_cancel(msg_id)

    # -- lifecycle -----------------------------------------------------------
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(
        self, params: types.InitializeParams
    ) -> Generator[Any, Any, types.InitializeResult]:
        # pygls builds its workspace from the roots first, and a root that is
        # no URL (``file://[x``) would fail the whole session: it is left out.
        roots = [params.root_uri, *(f.uri for f in params.workspace_folders or ())]
        if not all(_parses(uri) for uri in roots if uri is not None):
            log.warning("initialize: leaving out workspace roots that are not URLs")
            folders = [f for f in params.workspace_folders or () if _parses(f.uri)]
            root = params.root_uri if params.root_uri is None or _parses(params.root_uri) else None
            params = attrs.evolve(params, root_uri=root, workspace_folders=folders or None)
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        if (handler := self.user_handler(types.SHUTDOWN)) is not None:
            yield handler, args, None
        current = self.msg_id
        # A copy: cancelling runs callbacks that remove entries.
        for msg_id, future in list(self.pending.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self.mark_shutdown()

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        # pygls raises SystemExit here, which its transport swallows (exit code 0
        # even without shutdown); the transport ends the loop on ``stop`` instead.
        if (handler := self.user_handler(types.EXIT)) is not None:
            yield handler, args, None
        self._stop(0 if self.shutdown_received else 1)

    # Document and notebook sync: the user handlers (the service's store) only. The
    # names replace pygls' built-in handlers of the same names, which would keep a
    # second copy of every text (``pygls_compat.RELIED_ON`` checks that they still exist).
    lsp_text_document__did_open = _user_handler_only(types.TEXT_DOCUMENT_DID_OPEN)
    lsp_text_document__did_change = _user_handler_only(types.TEXT_DOCUMENT_DID_CHANGE)
    lsp_text_document__did_close = _user_handler_only(types.TEXT_DOCUMENT_DID_CLOSE)
    lsp_notebook_document__did_open = _user_handler_only(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    lsp_notebook_document__did_change = _user_handler_only(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    lsp_notebook_document__did_close = _user_handler_only(types.NOTEBOOK_DOCUMENT_DID_CLOSE)

"""Every private pygls name the server relies on, in one place.

pygls 2.1 offers no public hooks for what ``structspec.lsp.protocol`` must
change (error responses without tracebacks, cancel ids, finished handlers'
futures, server-to-client requests that time out), so ``PyglsProtocol`` reads
and overrides its private methods and attributes here and offers them under
public names; nothing else in the server touches a pygls private name.

``pyproject.toml`` pins pygls to the minor version these were checked against,
and ``tests/lsp/test_pygls_compat.py`` checks every name in ``RELIED_ON``
against the installed pygls, failing with the name that went missing.

Two pygls bugs are worked around here, below the public names:

- pygls files the future of every generator or coroutine notification handler
  in ``_request_futures`` and never removes it (memory grew with every edit;
  ``tests/lsp/test_memory.py``): finished ones are forgotten.
- pygls calls ``future.result()`` on a generator's inner handler that was
  cancelled (at shutdown, or when the loop ends); the ``CancelledError`` escapes
  into the event loop and the request is never answered: the outer one is
  cancelled instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.feature_manager import FeatureManager
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCProtocol

_ABSENT = object()

#: The logger pygls reports a message that does not fit the LSP types to (its
#: module's ``getLogger(__name__)``).
RPC_LOGGER = JsonRPCProtocol.__module__
#: How that report begins (pygls adds a traceback).
DESERIALIZE_FAILURE = "Unable to deserialize message"


@dataclass(frozen=True)
class Relied:
    """One pygls name the server relies on: ``owner.name``, and what it must offer.

    ``parameters`` are those of a method that are passed by name or overridden
    with the same signature; ``method`` the LSP method a builtin handler serves
    (``PyglsProtocol``'s subclass replaces it under the same name); ``text`` a
    string the method's source must contain.
    """

    owner: type
    name: str
    parameters: tuple[str, ...] = ()
    method: str | None = None
    text: str | None = None

    @property
    def label(self) -> str:
        return f"{self.owner.__name__}.{self.name}"


#: Every private (or internal) pygls name used in ``structspec``.
RELIED_ON: tuple[Relied, ...] = (
    Relied(JsonRPCProtocol, "_request_futures"),
    Relied(JsonRPCProtocol, "_result_types"),
    Relied(JsonRPCProtocol, "_shutdown"),
    Relied(JsonRPCProtocol, "fm"),
    Relied(FeatureManager, "features"),
    Relied(JsonRPCProtocol, "_send_data", ("data",)),
    Relied(JsonRPCProtocol, "_send_response", ("msg_id", "result", "error")),
    Relied(JsonRPCProtocol, "_handle_cancel_notification", ("msg_id",)),
    Relied(
        JsonRPCProtocol, "_execute_handler", ("msg_id", "handler", "callback", "args", "kwargs")
    ),
    Relied(JsonRPCProtocol, "_run_generator", ("future", "gen", "result_future")),
    Relied(JsonRPCProtocol, "structure_message", text=DESERIALIZE_FAILURE),
    Relied(LanguageServerProtocol, "lsp_initialize", method=types.INITIALIZE),
    Relied(LanguageServerProtocol, "lsp_shutdown", method=types.SHUTDOWN),
    Relied(LanguageServerProtocol, "lsp_exit", method=types.EXIT),
    Relied(
        LanguageServerProtocol, "lsp_text_document__did_open", method=types.TEXT_DOCUMENT_DID_OPEN
    ),
    Relied(
        LanguageServerProtocol,
        "lsp_text_document__did_change",
        method=types.TEXT_DOCUMENT_DID_CHANGE,
    ),
    Relied(
        LanguageServerProtocol,
        "lsp_text_document__did_close",
        method=types.TEXT_DOCUMENT_DID_CLOSE,
    ),
    Relied(
        LanguageServerProtocol,
        "lsp_notebook_document__did_open",
        method=types.NOTEBOOK_DOCUMENT_DID_OPEN,
    ),
    Relied(
        LanguageServerProtocol,
        "lsp_notebook_document__did_change",
        method=types.NOTEBOOK_DOCUMENT_DID_CHANGE,
    ),
    Relied(
        LanguageServerProtocol,
        "lsp_notebook_document__did_close",
        method=types.NOTEBOOK_DOCUMENT_DID_CLOSE,
    ),
)


def missing(relied: tuple[Relied, ...] = RELIED_ON) -> list[str]:
    """What of ``relied`` the installed pygls lacks, one line per name (empty: all there)."""
    protocol = LanguageServer("structspec-pygls-check", "0").protocol
    problems = []
    for item in relied:
        # Methods and properties on pygls' own class (a subclass could hide a loss),
        # attributes that ``__init__`` sets on a fresh instance.
        member: Any = getattr(item.owner, item.name, _ABSENT)
        if member is _ABSENT:
            target = protocol.fm if item.owner is FeatureManager else protocol
            member = getattr(target, item.name, _ABSENT)
        if member is _ABSENT:
            problems.append(f"{item.label} is missing")
            continue
        if item.parameters:
            names = set(inspect.signature(member).parameters)
            lost = [p for p in item.parameters if p not in names]
            if lost:
                problems.append(f"{item.label} has no parameter {', '.join(lost)}")
        if item.method is not None and getattr(member, "method_name", None) != item.method:
            problems.append(f"{item.label} no longer serves {item.method}")
        if item.text is not None and item.text not in inspect.getsource(member):
            problems.append(f"{item.label} no longer says {item.text!r}")
    return problems


class PyglsProtocol(LanguageServerProtocol):
    """pygls' protocol with its private names behind public ones (see the module docstring).

    Subclasses override ``send_response`` and ``handle_cancel`` (pygls'
    ``_send_response`` and ``_handle_cancel_notification``) and use the
    properties and methods below; none of them names a pygls private.
    """

    # -- state -----------------------------------------------------------------
    @property
    def shutdown_received(self) -> bool:
        """``shutdown`` was handled: only ``exit`` is served from now on."""
        return self._shutdown

    def mark_shutdown(self) -> None:
        self._shutdown = True

    @property
    def pending(self) -> dict[Any, Future[Any]]:
        """Futures by message id: requests in flight both ways (pygls' own dict)."""
        return self._request_futures

    def forget_request(self, msg_id: Any) -> Future[Any] | None:
        """Drop a request to the client that will not be waited for; its future, if any."""
        self._result_types.pop(msg_id, None)
        return self._request_futures.pop(msg_id, None)

    def user_handler(self, method: str) -> Callable[..., Any] | None:
        """The handler the server registered for ``method`` (``@server.feature``), if any."""
        handler: Callable[..., Any] | None = self.fm.features.get(method)
        return handler

    def send_json(self, data: dict[str, Any]) -> None:
        """Send ``data`` as it is (pygls' serializer would drop ``"id": null``)."""
        self._send_data(data)

    # -- public hooks over pygls' private ones ---------------------------------
    def send_response(
        self, msg_id: Any, result: Any | None = None, error: types.ResponseError | None = None
    ) -> None:
        """Answer request ``msg_id``: every response pygls sends passes here."""
        LanguageServerProtocol._send_response(self, msg_id, result, error)

    def _send_response(
        self, msg_id: Any, result: Any | None = None, error: types.ResponseError | None = None
    ) -> None:
        self.send_response(msg_id, result, error)

    def handle_cancel(self, msg_id: Any) -> None:
        """Cancel request ``msg_id`` (``$/cancelRequest``)."""
        LanguageServerProtocol._handle_cancel_notification(self, msg_id)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        self.handle_cancel(msg_id)

    # -- the pygls bugs worked around ------------------------------------------
    def _execute_handler(
        self,
        msg_id: Any,
        handler: Any,
        callback: Callable[[Future[Any]], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        def done(future: Future[Any]) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _run_generator(
        self, future: Future[Any] | None, *, gen: Generator[Any, Any, Any], result_future: Any
    ) -> None:
        if future is not None and future.cancelled():
            gen.close()
            result_future.cancel()
            return
        super()._run_generator(future, gen=gen, result_future=result_future)

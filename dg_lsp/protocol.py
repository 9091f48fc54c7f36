"""pygls protocol adjustments: our store owns the text, cancel reaches the engine, commands see params.

Three places where pygls' defaults do not fit (all pygls 2.x internals, pinned by pyproject's `pygls<3`):
- didOpen/didChange/didClose: pygls keeps its own copy of every document; ours (`DocumentStore`, with the
  tree-sitter tree) is the only one, so the built-ins only forward to our handlers.
- `$/cancelRequest`: pygls cancels the request's future, which stops an `async` handler at its next `await`
  but cannot stop a job already on the engine thread, nor the task behind a command. We also cancel the
  engine job.
- `workspace/executeCommand`: pygls passes only `arguments`; our commands need the whole params
  (`workDoneToken`), and an unknown command deserves a precise error.
- Malformed messages: pygls only logs a body that is not JSON, and silently drops a request whose params do
  not fit their type (the client then waits forever). We answer both with JSON-RPC errors.
- Answers: a handler may return a JSON-ready dict, which is written as it is. pygls' generic serializer (cattrs
  over attrs classes) took ~0.15 ms for an inline answer when its code was not in the CPU's caches, which is the
  case after an engine run; a dict takes ~0.03 ms.
- didChange: handled at once, without pygls' generic route for notifications (see `_did_change`).
- Timing: the arrival of each message (`received_at`: from the stdio reader when it has one, see
  dg_lsp.stdio) and a hook once a response is written, so the server can report its own per-keystroke time and
  send a request's dg/status after its answer, not before it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from lsprotocol import types
from pygls.exceptions import FeatureNotificationError, JsonRpcException, JsonRpcInvalidParams, JsonRpcParseError
from pygls.protocol import LanguageServerProtocol, lsp_method

log = logging.getLogger(__name__)


class DgProtocol(LanguageServerProtocol):
    received_at = 0.0  # time.perf_counter() when the message being handled arrived
    arrived_at: float | None = None  # set by the stdio reader before it parses a message (dg_lsp.stdio)

    def handle_message(self, message: Any) -> None:
        self.received_at = self.arrived_at if self.arrived_at is not None else time.perf_counter()
        self.arrived_at = None
        if type(message) is types.DidChangeTextDocumentNotification and not self._shutdown:
            self._did_change(message.params)
            return
        super().handle_message(message)

    def _did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        """A keystroke's didChange goes straight to its handler. pygls' route for a notification (a context copy,
        two uuid4 ids, two futures and the generator of its built-in feature) took ~0.18 ms when its code was not
        in the CPU's caches, as on every keystroke; an error is reported as pygls would."""
        handler = self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)
        if handler is None:
            return
        try:
            handler(params)
        except Exception as error:
            log.exception("didChange handler failed")
            self._server._report_server_error(error, FeatureNotificationError)

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        if error is None and (result is None or type(result) is dict):  # already JSON: no attrs envelope
            self._result_types.pop(msg_id, None)
            self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "result": result})
        else:
            super()._send_response(msg_id, result, error)
        after = getattr(self._server, "after_response", None)
        if after is not None:
            after(str(msg_id))

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams):
        if (handler := self.fm.commands.get(params.command)) is None:
            known = ", ".join(sorted(self.fm.commands))
            raise JsonRpcInvalidParams(f"unknown command {params.command!r} (this server has: {known})")
        result = yield handler, (params,), None
        return result

    def structure_message(self, data: dict[str, Any]) -> Any:
        """A request whose params do not fit its method's type gets an Invalid Params answer, not silence."""
        try:
            return super().structure_message(data)
        except JsonRpcException:
            if not ("id" in data and "method" in data):
                raise
            err = JsonRpcInvalidParams(f"invalid params for {data['method']!r}")
            self._send_response(data["id"], error=err.to_response_error())
            return _Dropped()

    def send_parse_error(self, exc: Exception) -> bool:
        """JSON-RPC 2.0 answers an unparseable message with a Parse error whose id is null."""
        if not isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            return False
        err = JsonRpcParseError(f"malformed JSON-RPC message: {exc}")
        self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": err.code, "message": err.message}})
        return True

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        on_cancel = getattr(self._server, "on_cancel_request", None)
        if on_cancel is not None:
            on_cancel(str(msg_id))
        super()._handle_cancel_notification(msg_id)



class _Dropped:
    """Stands in for a message already answered with an error; `handle_message` ignores a wrong version."""

    jsonrpc = "dropped"

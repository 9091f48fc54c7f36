"""What the server sends the editor: answers, notifications (dg/status, dg/draft, $/progress, window/showMessage,
window/logMessage) and its own requests (workspace/applyEdit, window/workDoneProgress/create,
client/registerCapability), each awaited as a future that the editor's response settles.

`Client` is the one writer of the connection (dg_lsp.wire.dispatch reads, this writes): a message is JSON with LSP's
headers; a dict is written as it is (attrs leaves inside it, such as a Range in dg/draft, unstructured), an attrs
value through lsprotocol's converter. A response to one of our requests is structured into its method's result
type; one that does not fit fails that request ("malformed response") instead of leaving it waiting. A message
that cannot be written is logged, never reported with another message (that write would fail the same way).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

from lsprotocol import types as T
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

log = logging.getLogger(__name__)

HEADER = "Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n"


class Client:
    """The editor, as the server's handlers see it: messages to it and requests whose answers they await."""

    def __init__(self, converter: Any = None) -> None:
        self.converter = converter if converter is not None else get_converter()  # lsprotocol's, one per connection
        self.writer: Any = None  # .write(bytes); dg_lsp.wire.stdio.TimedWriter or an asyncio StreamWriter
        self.capabilities = T.ClientCapabilities()  # the editor's, from `initialize`
        self._ids = itertools.count(1)
        self._pending: dict[Any, tuple[asyncio.Future[Any], type | None]] = {}  # our id -> (future, its type)
        self._progress_cancel: dict[T.ProgressToken, list[Callable[[], None]]] = {}

    def set_writer(self, writer: Any) -> None:
        self.writer = writer

    @property
    def handed_at(self) -> float:
        """When the writer last handed bytes to the OS (dg_lsp.wire.stdio.TimedWriter), else 0."""
        return getattr(self.writer, "handed_at", 0.0)

    def close(self) -> None:
        """`exit`: the stream is closed; later writes are dropped (dg_lsp.wire.stdio.TimedWriter)."""
        if self.writer is not None and hasattr(self.writer, "close"):
            self.writer.close()

    # -- writing ------------------------------------------------------------------------------------------------

    def _json(self, value: Any) -> Any:
        if hasattr(value, "__attrs_attrs__"):
            return self.converter.unstructure(value)
        if isinstance(value, enum.Enum):
            return value.value
        return value.__dict__

    def send(self, message: dict[str, Any]) -> None:
        if self.writer is None:
            log.error("no writer: message dropped")
            return
        try:
            body = json.dumps(message, default=self._json)
            self.writer.write((HEADER.format(len(body)) + body).encode("utf-8"))
        except BrokenPipeError:
            raise
        except Exception as error:  # noqa: BLE001 -- logged only: a report to the client would fail the same way
            log.error("a message to the client could not be written: %s", error)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, msg_id: Any, result: Any, result_type: type | None = None) -> None:
        """An answer: a dict or None as it is; an attrs value (or a list of them) typed by its response class."""
        if result is not None and type(result) is not dict:
            if result_type is not None:
                result = self.converter.unstructure(result_type(id=msg_id, result=result))["result"]
            else:
                result = self.converter.unstructure(result)
        self.send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    def error(self, msg_id: Any, code: int, message: str) -> None:
        """An error answer; `msg_id` None answers a message whose id could not be read (JSON-RPC's id null)."""
        self.send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})

    def show_message(self, kind: T.MessageType, message: str) -> None:
        self.notify(T.WINDOW_SHOW_MESSAGE, T.ShowMessageParams(type=kind, message=message))

    def log_message(self, kind: T.MessageType, message: str) -> None:
        self.notify(T.WINDOW_LOG_MESSAGE, T.LogMessageParams(type=kind, message=message))

    # -- our requests -------------------------------------------------------------------------------------------

    def request(self, method: str, params: Any, msg_id: Any = None) -> asyncio.Future[Any]:
        """Send a request; the future gets its result (structured into the method's result type) or the
        editor's error as a JsonRpcException."""
        msg_id = f"dg-{next(self._ids)}" if msg_id is None else msg_id
        future = asyncio.get_running_loop().create_future()
        types = T.METHOD_TO_TYPES.get(method)
        self._pending[msg_id] = (future, types[1] if types is not None else None)
        future.add_done_callback(lambda _: self._pending.pop(msg_id, None))
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return future

    def response(self, data: dict[str, Any]) -> None:
        """The editor answered one of our requests (its envelope checked by dg_lsp.wire.jsonrpc)."""
        pending = self._pending.pop(data["id"], None)
        if pending is None:
            log.warning("response to unknown request %r", data["id"])
            return
        future, response_type = pending
        if future.done():
            return
        try:
            if "error" in data:
                error = self.converter.structure(data, T.ResponseErrorMessage).error
                if error is None:
                    raise ValueError("an error response without its error")
                future.set_exception(JsonRpcException.from_error(error))
            elif response_type is not None:
                future.set_result(self.converter.structure(data, response_type).result)
            else:
                future.set_result(data.get("result"))
        except Exception:  # noqa: BLE001 -- it does not fit its type: fail the request that waits for it
            log.error("malformed response to request %r", data["id"])
            future.set_exception(JsonRpcInvalidParams("malformed response"))

    def cancel_requests(self) -> None:
        for future, _ in list(self._pending.values()):
            future.cancel()

    async def apply_edit(self, params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult | None:
        result: T.ApplyWorkspaceEditResult | None = await self.request(T.WORKSPACE_APPLY_EDIT, params)
        return result

    async def register_capability(self, params: T.RegistrationParams) -> None:
        await self.request(T.CLIENT_REGISTER_CAPABILITY, params)

    # -- work done progress -------------------------------------------------------------------------------------

    async def progress_create(self, token: T.ProgressToken) -> None:
        await self.request(T.WINDOW_WORK_DONE_PROGRESS_CREATE, T.WorkDoneProgressCreateParams(token=token))

    def progress(self, token: T.ProgressToken,
                 value: T.WorkDoneProgressBegin | T.WorkDoneProgressReport | T.WorkDoneProgressEnd) -> None:
        if isinstance(value, T.WorkDoneProgressEnd):
            self._progress_cancel.pop(token, None)
        self.notify(T.PROGRESS, T.ProgressParams(token=token, value=value))

    def on_progress_cancel(self, token: T.ProgressToken, callback: Callable[[], None]) -> None:
        """Call `callback` if the editor sends window/workDoneProgress/cancel for `token` before its end."""
        self._progress_cancel.setdefault(token, []).append(callback)

    def progress_cancelled(self, token: T.ProgressToken) -> None:
        callbacks = self._progress_cancel.pop(token, None)
        if callbacks is None:
            log.warning("window/workDoneProgress/cancel for an unknown token %r", token)
        for callback in callbacks or ():
            callback()

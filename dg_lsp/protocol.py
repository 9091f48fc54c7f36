"""pygls protocol adjustments: the LSP lifecycle, one answer per request, our store owns the text, cancel reaches
the engine, commands see their params, no internals in errors.

Where pygls' defaults do not fit (all pygls 2.x internals, pinned by pyproject's `pygls<3`):
- Lifecycle (`receive`, the entry point of dg_lsp.transport): pygls answers requests before `initialize` and
  silently drops every message after `shutdown`. LSP wants -32002 ServerNotInitialized before `initialize`
  (notifications dropped, except `exit`), -32600 InvalidRequest after `shutdown`, and `initialize` only once.
  A request sent with a notification's method (or `exit` with an id) is answered -32600 instead of being run
  and never answered; a notification with a request's method is dropped instead of being run.
- didOpen/didChange/didClose: pygls keeps its own copy of every document; ours (`DocumentStore`, with the
  tree-sitter tree) is the only one, so the built-ins for didOpen/didClose only forward to our handlers, and
  didChange skips pygls' generic route for notifications altogether (see `_did_change`).
- `$/cancelRequest`: pygls cancels the request's future; we also cancel the engine job and a command's task.
- `workspace/executeCommand`: our commands get the whole params (`workDoneToken`); an unknown one a precise error.
- Params that do not fit their method's type: pygls silently drops such a request (the client then waits
  forever). We answer it with Invalid Params. Positions are taken only as LSP types them (integers): cattrs
  coerced `"3"`, `1.5` and `true` to ints.
- Internal errors: pygls sends a handler's exception with its traceback (server paths); the client gets a short
  message instead, the traceback goes to the log (stderr).
- Answers: a handler may return a JSON-ready dict, written as it is (pygls' cattrs serializer is slow when cold).
- The keystroke's path: didChange and inlineCompletion params are built by hand (dg_lsp.fastparams), a message's
  kind comes from a table by class, a generator handler's async work runs as one task that also writes the answer
  (pygls filed a second future per request that nothing removed), and dict params of our notifications (dg/status,
  dg/draft) are written without cattrs.
- Timing: each message's arrival (`received_at`, dg_lsp.stdio) and a hook once a response is written, so the
  server reports its own per-keystroke time and sends a request's dg/status after its answer.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import re
import time
import uuid
from typing import Any

import attrs
from lsprotocol import types
from lsprotocol.types import ResponseError
from pygls.exceptions import (
    FeatureNotificationError,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcParseError,
)
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage

from dg_lsp import fastparams
from dg_lsp.jsonrpc import INVALID_REQUEST

log = logging.getLogger(__name__)

SERVER_NOT_INITIALIZED = -32002


class DgProtocol(LanguageServerProtocol):
    received_at = 0.0  # time.perf_counter() when the message being handled arrived
    arrived_at: float | None = None  # set by the reader before it parses a message (dg_lsp.transport)
    arrivals: Any = None  # the stdio reader's dg_lsp.stdio.Arrivals (set by dg_lsp.transport), else None
    initialize_seen = False

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        converter.register_structure_hook(types.Position, _structure_position)  # no coercion (see below)

    def receive(self, data: dict[str, Any]) -> None:
        """One message whose JSON-RPC envelope is valid (dg_lsp.jsonrpc): the lifecycle's gate, then pygls."""
        method = data.get("method")
        if method is not None:
            refusal = self._refusal(method, "id" in data)
            if refusal is not None:
                if "id" in data:
                    self.send_error(data["id"], *refusal)
                else:
                    log.warning("notification %r dropped: %s", method, refusal[1])
                return
            if method not in _KINDS:  # pygls' generic message types need params, which JSON-RPC lets a client omit
                data.setdefault("params", None)
        message = _keystroke_message(method, data)
        if message is None:
            message = self.structure_message(data)
        if type(message) is _Dropped:
            return
        if method == types.INITIALIZE:
            self.initialize_seen = True
        self.handle_message(message)

    @property
    def input_at(self) -> float:
        """When bytes last came in (perf_counter), read or still waiting to be: stdio only, else 0."""
        return self.arrivals.last if self.arrivals is not None else 0.0

    def _refusal(self, method: str, is_request: bool) -> tuple[int, str] | None:
        kind = _KINDS.get(method)  # None for methods LSP does not define (ours, dg/...)
        if is_request and kind == "notification":
            return INVALID_REQUEST, f"{method} is a notification: it takes no id"
        if not is_request and kind == "request":
            return INVALID_REQUEST, f"{method} is a request: it needs an id"
        if method == types.EXIT:
            return None
        if not self.initialize_seen:
            if method == types.INITIALIZE:
                return None
            return SERVER_NOT_INITIALIZED, "the server is not initialized: send initialize first"
        if method == types.INITIALIZE:
            return INVALID_REQUEST, "initialize was already received"
        if self._shutdown:
            return INVALID_REQUEST, "the server is shutting down: only exit is accepted"
        return None

    def handle_message(self, message: Any) -> None:
        """pygls' dispatch (its version and shutdown checks, each handler in its own context), with the message's
        kind from `_MESSAGE_KINDS`; didChange goes straight to its handler (`_did_change`)."""
        self.received_at = self.arrived_at if self.arrived_at is not None else time.perf_counter()
        self.arrived_at = None
        if type(message) is types.DidChangeTextDocumentNotification and not self._shutdown:
            self._did_change(message.params)
            return
        kind = _MESSAGE_KINDS.get(type(message))
        if kind is None or message.jsonrpc != self.VERSION or self._shutdown:
            super().handle_message(message)  # pygls' checks and their warnings; a class outside the table
            return
        ctx = contextvars.copy_context()
        if kind == "request":
            ctx.run(self._handle_request, message.id, message.method, message.params)
        elif kind == "notification":
            ctx.run(self._handle_notification, message.method, message.params)
        elif kind == "response":
            ctx.run(self._handle_response, message.id, message.result)
        else:
            ctx.run(self._handle_response, message.id, None, message.error)

    def _run_generator(self, future: Any, *, gen: Any, result_future: Any) -> None:
        """pygls' route for a generator handler: it yields (handler, args, kwargs) and gets the result sent back;
        an exception or a cancel ends the request (`result_future`, whose callback answers it)."""
        if result_future.cancelled():
            return
        try:
            value = future.result() if future is not None else None
        except asyncio.CancelledError:
            result_future.cancel()
            return
        except Exception as exc:
            result_future.set_exception(exc)
            return
        self._send_to_generator(gen, result_future, value)

    def _send_to_generator(self, gen: Any, result_future: Any, value: Any) -> None:
        try:
            handler, args, kwargs = gen.send(value)
        except StopIteration as done:
            result_future.set_result(done.value)
            return
        except Exception as exc:
            result_future.set_exception(exc)
            return
        if not asyncio.iscoroutinefunction(handler):
            next_step = functools.partial(self._run_generator, gen=gen, result_future=result_future)
            self._execute_handler(str(uuid.uuid4()), handler, next_step, args, kwargs)
            return
        # An async handler's task hands its result to the generator itself (a done callback would wait for the
        # loop's next iteration to write the answer); filed in `_request_futures` while it runs, so `shutdown`
        # still cancels it.
        task = asyncio.ensure_future(self._run_task(handler(*args, **(kwargs or {})), gen, result_future))
        key = ("dg-task", id(task))
        self._request_futures[key] = task
        task.add_done_callback(lambda _: self._request_futures.pop(key, None))

    async def _run_task(self, work: Any, gen: Any, result_future: Any) -> None:
        try:
            value = await work
        except asyncio.CancelledError:
            if not result_future.done():
                result_future.cancel()
            raise
        except Exception as exc:
            if not result_future.done():
                result_future.set_exception(exc)
            return
        if not result_future.cancelled():
            self._send_to_generator(gen, result_future, value)

    def _handle_notification(self, method_name: str, params: Any) -> None:
        """pygls' route, less its leak: it files a notification's future in `_request_futures` under a fresh uuid4
        that nothing removes once the handler is done (pygls' built-in didOpen/didClose are generators), one
        finished future (with its lock, condition and callbacks) per didOpen and didClose for the session's life.
        Besides the bytes, each such survivor lands among a just-parsed tree's freed blocks (py-tree-sitter
        allocates with PyMem_Malloc) and keeps their 1 MiB arena from going back to the system (issue 21)."""
        pending = set(self._request_futures)
        super()._handle_notification(method_name, params)
        for key in [k for k in self._request_futures if k not in pending]:
            future = self._request_futures[key]
            if future.done():
                del self._request_futures[key]
            else:
                future.add_done_callback(lambda _, key=key: self._request_futures.pop(key, None))

    def _did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        """A keystroke's didChange goes straight to its handler. pygls' route for a notification (a context copy,
        two uuid4 ids, two futures and the generator of its built-in feature) took ~0.18 ms when its code was not
        in the CPU's caches, as on every keystroke; an error is reported as pygls would, without internals."""
        handler = self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)
        if handler is None:
            return
        try:
            handler(params)
        except Exception as error:
            log.exception("didChange handler failed")
            self._report_internal(error)

    def _check_handler_result(self, future: Any) -> None:
        """A notification handler failed: the traceback to the log, a short message to the client."""
        if not future.cancelled() and (error := future.exception()) is not None:
            log.error("notification handler failed", exc_info=error)
            self._report_internal(error)

    def _report_internal(self, error: BaseException) -> None:
        self._server._report_server_error(JsonRpcInternalError(_short(type(error).__name__)), FeatureNotificationError)

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        if error is None and (result is None or type(result) is dict):  # already JSON: no attrs envelope
            self._result_types.pop(msg_id, None)
            self._send_data({"jsonrpc": self.VERSION, "id": msg_id, "result": result})
        else:
            if error is not None and error.code == JsonRpcInternalError.CODE:
                error = ResponseError(code=error.code, message=_short_message(error.message))  # no traceback
            super()._send_response(msg_id, result, error)
        after = getattr(self._server, "after_response", None)
        if after is not None:
            after(str(msg_id))

    def notify(self, method: str, params: Any = None) -> None:
        if type(params) is dict and self.get_message_type(method) is None:  # ours (dg/...): JSON but for attrs leaves
            self._send_data({"jsonrpc": self.VERSION, "method": method, "params": params})
            return
        super().notify(method, params)

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        """An error answer; `msg_id` None answers a message whose id could not be read (JSON-RPC's id null)."""
        if msg_id is None:
            self._send_data({"jsonrpc": self.VERSION, "id": None, "error": {"code": code, "message": message}})
        else:
            self._send_response(msg_id, error=ResponseError(code=code, message=message))

    def send_parse_error(self, exc: Exception) -> bool:
        """JSON-RPC 2.0 answers an unparseable message with a Parse error whose id is null."""
        if not isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
            return False
        self.send_error(None, JsonRpcParseError.CODE, f"malformed JSON-RPC message: {exc}")
        return True

    def get_message_type(self, method: str) -> Any:
        # pygls caches this per (protocol, method) in an lru_cache, which keeps every protocol (and its server,
        # documents and model) alive after its TCP connection closed; the dict lookup needs no cache.
        return types.METHOD_TO_TYPES.get(method, (None,))[0]

    def get_result_type(self, method: str) -> Any:
        return types.METHOD_TO_TYPES.get(method, (None, None))[1]

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls' initialize, plus the server's `experimental` capabilities (DgServer.experimental, e.g.
        dgNextEdit), for which pygls' capability builder has no place."""
        result = yield from super().lsp_initialize(params)
        extra = getattr(self._server, "experimental", None)
        if extra:
            result.capabilities.experimental = {**(result.capabilities.experimental or {}), **extra}
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any):
        """pygls' shutdown, but it cancels the pending requests from a copy of `_request_futures`: cancelling a
        request's (concurrent) future runs its done callback at once, which removes it from that dict, and pygls'
        loop over the dict itself then raised; shutdown answered an error and `exit` ended the server with 1."""
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        for msg_id, future in list(self._request_futures.items()):  # msg_id: the shutdown's own is kept
            if msg_id != self.msg_id and not future.done():
                future.cancel()
        self._shutdown = True

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams):
        if (handler := self.fm.commands.get(params.command)) is None:
            known = ", ".join(sorted(self.fm.commands))
            raise JsonRpcInvalidParams(f"unknown command {params.command!r} (this server has: {known})")
        result = yield handler, (params,), None
        return result

    def structure_message(self, data: dict[str, Any]) -> Any:
        """A message whose params do not fit its method's type: a request gets an Invalid Params answer, not
        silence; a notification is logged and reported; a response fails the request of ours it answers (which
        would otherwise wait forever, and with it the client's request that sent it)."""
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "method" not in data:  # an answer to our request that does not fit its type: fail that request
                log.error("malformed response to request %r", data.get("id"))
                self._handle_response(data.get("id"), error=ResponseError(code=JsonRpcInvalidParams.CODE,
                                                                        message="malformed response"))
                return _Dropped()
            bad_position = isinstance(cause := exc.__cause__, BaseExceptionGroup) and \
                cause.subgroup(lambda e: isinstance(e, _BadPosition)) is not None
            why = f": {_BadPosition.MESSAGE}" if bad_position else ""
            err = JsonRpcInvalidParams(f"invalid params for {data['method']!r}{why}")
            if "id" in data:
                self._send_response(data["id"], error=err.to_response_error())
            else:
                self._server._report_server_error(err, FeatureNotificationError)
            return _Dropped()

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        on_cancel = getattr(self._server, "on_cancel_request", None)
        if on_cancel is not None:
            on_cancel(str(msg_id))
        super()._handle_cancel_notification(msg_id)


class _Dropped:
    """Stands in for a message already answered with an error."""


_KINDS = {method: "request" if "id" in attrs.fields_dict(cls) else "notification"
          for method, (cls, *_) in types.METHOD_TO_TYPES.items() if cls is not None}


def _message_kind(cls: type) -> str:
    """What pygls' isinstance checks decide for an attrs message class (every field of an instance is set): the
    first of request, notification, response that its fields satisfy, else error."""
    fields = set(attrs.fields_dict(cls))
    for kind, needs in (("request", {"id", "method", "jsonrpc", "params"}), ("notification", {"method", "jsonrpc",
                        "params"}), ("response", {"id", "jsonrpc", "result"})):
        if needs <= fields:
            return kind
    return "error"


# the classes pygls structures messages into: each method's message and response types, its generic ones, errors
_MESSAGE_CLASSES = {cls for message, response, *_ in types.METHOD_TO_TYPES.values() for cls in (message, response)
                    if cls is not None} | {JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage,
                                           types.ResponseErrorMessage}
_MESSAGE_KINDS = {cls: _message_kind(cls) for cls in _MESSAGE_CLASSES}


def _keystroke_message(method: str | None, data: dict[str, Any]) -> Any:
    """A keystroke's didChange or inlineCompletion request built without cattrs (dg_lsp.fastparams), else None."""
    if method == types.TEXT_DOCUMENT_DID_CHANGE and "id" not in data:
        params = fastparams.did_change(data.get("params"))
        return None if params is None else types.DidChangeTextDocumentNotification(params=params)
    if method == types.TEXT_DOCUMENT_INLINE_COMPLETION and "id" in data:
        params = fastparams.inline_completion(data.get("params"))
        return None if params is None else types.InlineCompletionRequest(id=data["id"], params=params)
    return None


class _BadPosition(ValueError):
    MESSAGE = "a position's line and character must be integers in 0..2^31-1"


def _structure_position(raw: Any, _: type) -> types.Position:
    """A Position exactly as LSP types it. cattrs' int hook is `int(v)`: it made `"3"` line 3, `1.5` line 1 and
    `true` line 1 in every request that carries a position or range; such params are Invalid Params instead."""
    if type(raw) is not dict or type(line := raw.get("line")) is not int or \
            type(character := raw.get("character")) is not int:
        raise _BadPosition(_BadPosition.MESSAGE)
    try:
        return types.Position(line=line, character=character)  # its validators: LSP's uinteger
    except (TypeError, ValueError):
        raise _BadPosition(_BadPosition.MESSAGE) from None


_EXC_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?=:|$)")  # "ValueError: ..." -> ValueError


def _short(name: str | None) -> str:
    what = f" ({name})" if name else ""
    return f"internal error in the server{what}; its log has the details"


def _short_message(message: str) -> str:
    """pygls' internal-error text is the exception's own text ("ValueError: ... /path/file.py ..."): keep its
    class name only."""
    m = _EXC_NAME.match(message or "")
    return _short(m.group(1) if m else None)

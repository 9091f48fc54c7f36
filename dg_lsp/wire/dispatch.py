"""The dispatch: one JSON-RPC message (its envelope checked by dg_lsp.wire.jsonrpc) -> the lifecycle's gate -> its
params -> its handler; a request's answer written once. Ours alone, on dg_lsp.wire.transport's message loop and
dg_lsp.wire.outgoing's writer, as ruff's server owns its dispatch (house style 17).

- Lifecycle: before `initialize`, requests are answered -32002 ServerNotInitialized and notifications dropped
  (except `exit`); `initialize` is answered once (again: -32600); after `shutdown`, requests are answered -32600
  and notifications dropped, except `exit`, which ends the session with LSP's exit code (0 after `shutdown`,
  else 1). A request sent with a notification's method (or `exit` with an id) is answered -32600; a notification
  with a request's method is dropped. `shutdown` answers every request still open as cancelled.
- Params: a method LSP defines gets its lsprotocol type (lsprotocol's converter, plus a Position hook that takes
  only integers: cattrs made `"3"`, `1.5` and `true` ints); ours (dg/..., copilotInlineEdit) get plain JSON. A
  request whose params do not fit is answered Invalid Params (-32602), a notification's is reported. A keystroke's
  didChange and inlineCompletion params are built without cattrs (dg_lsp.wire.fastparams).
- Arrival order: a request's `arrive` (positions checked, snapshot taken, trace started) runs here, as the message
  is read, in order with the didChanges around it; its `run` then runs as a task, which writes the answer itself.
  `$/cancelRequest` answers the request as cancelled (-32800), cancels its task and tells `on_cancel` (the engine
  job). An unknown method is -32601; a handler's exception is a short internal error (-32603, the class name only),
  its traceback goes to the log.
- Timing: each message's arrival (`Clock`), and `after_response(id)` once a request's answer is written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import attrs
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException

from dg_lsp.wire import fastparams
from dg_lsp.wire.capabilities import choose_encoding, server_capabilities
from dg_lsp.wire.jsonrpc import INVALID_REQUEST
from dg_lsp.wire.outgoing import Client

log = logging.getLogger(__name__)

SERVER_NOT_INITIALIZED = -32002
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
# LSP's methods: "request" (its message has an id) or "notification"
KINDS = {method: "request" if "id" in attrs.fields_dict(cls) else "notification"
         for method, (cls, *_) in T.METHOD_TO_TYPES.items() if cls is not None}
IGNORED = {T.SET_TRACE, T.PROGRESS, T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS}  # taken, nothing to do


@dataclass
class Clock:
    """When the message being handled arrived (perf_counter), shared with the session (dg_lsp.session)."""

    received_at: float = 0.0
    arrived_at: float | None = None  # set by the reader before it hands a message over (dg_lsp.wire.transport)
    arrivals: Any = None  # the stdio reader's dg_lsp.wire.stdio.Arrivals, else None

    @property
    def input_at(self) -> float:
        """When bytes last came in, read or still waiting to be: stdio only, else 0."""
        return self.arrivals.last if self.arrivals is not None else 0.0


@dataclass(frozen=True)
class Route:
    """A method's handler. A notification: `run(params)`. A request: `run(params) -> result` at once, or, with
    `arrive`, `arrive(request_id, params) -> arrived` as the message is read and `await run(arrived, params)` as
    a task. `options`: its capability (dg_lsp.wire.capabilities). `request`: a request's (a notification with its
    method is dropped)."""

    run: Callable[..., Any]
    arrive: Callable[[str, Any], Any] | None = None
    options: Any = None
    request: bool = False


class InvalidParams(JsonRpcException):
    CODE = INVALID_PARAMS


class Dispatcher:
    """Feeds one connection's messages to the routes registered with `request`, `notification`, `command`."""

    def __init__(self, client: Client, clock: Clock, on_cancel: Callable[[str], None] = lambda _: None,
                 after_response: Callable[[str], None] = lambda _: None) -> None:
        self.client, self.clock = client, clock
        self.on_cancel, self.after_response = on_cancel, after_response
        self.routes: dict[str, Route] = {}
        self.commands: dict[str, Route] = {}
        self.initialized = False  # `initialize` passed the gate
        self.shut_down = False  # `shutdown` was answered
        self.exit_code: int | None = None  # set by `exit`: the transport stops
        self._open: dict[str, tuple[Any, asyncio.Task[None] | None]] = {}  # request id -> (its JSON id, its task)
        client.converter.register_structure_hook(T.Position, _structure_position)

    # -- registration -------------------------------------------------------------------------------------------

    def request(self, method: str, run: Callable[..., Any], arrive: Callable[[str, Any], Any] | None = None,
                options: Any = None) -> None:
        self.routes[method] = Route(run, arrive, options, request=True)

    def notification(self, method: str, run: Callable[[Any], None]) -> None:
        self.routes[method] = Route(run)

    def command(self, name: str, run: Callable[..., Any], arrive: Callable[[str, Any], Any] | None = None) -> None:
        """A workspace/executeCommand command; its handler gets the whole ExecuteCommandParams."""
        self.commands[name] = Route(run, arrive, request=True)

    def capabilities(self, client: T.ClientCapabilities, experimental: dict[str, Any]
                     ) -> tuple[str, T.ServerCapabilities]:
        """(the position encoding, the server's capabilities) for an `initialize` from `client`."""
        encoding = choose_encoding(client)
        options = {m: r.options for m, r in self.routes.items() if r.options is not None}
        methods = set(self.routes) | IGNORED | ({T.WORKSPACE_EXECUTE_COMMAND} if self.commands else set())
        return encoding, server_capabilities(client, methods, options, list(self.commands), encoding, experimental)

    # -- incoming -----------------------------------------------------------------------------------------------

    def receive(self, data: dict[str, Any]) -> None:
        """One message, in the order the client sent it."""
        clock = self.clock
        clock.received_at = clock.arrived_at if clock.arrived_at is not None else time.perf_counter()
        clock.arrived_at = None
        method = data.get("method")
        if method is None:  # an answer to one of our requests
            if not self.shut_down:
                self.client.response(data)
            return
        has_id = "id" in data
        refusal = self._refusal(method, has_id)
        if refusal is not None:
            if has_id:
                self.client.error(data["id"], *refusal)
            else:
                log.warning("notification %r dropped: %s", method, refusal[1])
            return
        try:
            params = self._params(method, has_id, data.get("params"))
        except InvalidParams as error:
            self._failed(data, error)
            return
        if method == T.INITIALIZE:
            self.initialized = True
        if has_id:
            self._request(data["id"], method, params)
        else:
            self._notification(method, params)

    def _refusal(self, method: str, is_request: bool) -> tuple[int, str] | None:
        kind = KINDS.get(method)  # None for methods LSP does not define (ours, dg/...)
        if is_request and kind == "notification":
            return INVALID_REQUEST, f"{method} is a notification: it takes no id"
        if not is_request and kind == "request":
            return INVALID_REQUEST, f"{method} is a request: it needs an id"
        if method == T.EXIT:
            return None
        if not self.initialized:
            if method == T.INITIALIZE:
                return None
            return SERVER_NOT_INITIALIZED, "the server is not initialized: send initialize first"
        if method == T.INITIALIZE:
            return INVALID_REQUEST, "initialize was already received"
        if self.shut_down:
            return INVALID_REQUEST, "the server is shutting down: only exit is accepted"
        return None

    def _params(self, method: str, is_request: bool, raw: Any) -> Any:
        if method == T.TEXT_DOCUMENT_DID_CHANGE and not is_request:
            if (change := fastparams.did_change(raw)) is not None:
                return change
        elif method == T.TEXT_DOCUMENT_INLINE_COMPLETION and is_request:
            if (inline := fastparams.inline_completion(raw)) is not None:
                return inline
        types = T.METHOD_TO_TYPES.get(method)
        if types is None:  # ours: plain JSON
            return raw
        params_type: Any = types[2]
        if params_type is None:  # shutdown, exit
            return None
        try:
            return self.client.converter.structure(raw, params_type)
        except Exception as exc:  # noqa: BLE001 -- cattrs' errors (a group, a TypeError, ...): they do not fit
            bad_position = isinstance(exc, BaseExceptionGroup) and \
                exc.subgroup(lambda e: isinstance(e, _BadPosition)) is not None
            raise InvalidParams(f"invalid params for {method!r}"
                                + (f": {_BadPosition.MESSAGE}" if bad_position else "")) from None

    def _notification(self, method: str, params: Any) -> None:
        if method == T.EXIT:
            self.exit_code = 0 if self.shut_down else 1
            self.client.close()
            return
        if method == T.CANCEL_REQUEST:
            self.cancel(str(params.id))
            return
        if method == T.WINDOW_WORK_DONE_PROGRESS_CANCEL:
            self.client.progress_cancelled(params.token)
            return
        route = self.routes.get(method)
        if route is None or route.request:  # (a request of ours sent without an id: nothing to answer it with)
            if method not in IGNORED:
                log.warning("notification for %s method %r ignored", "a request's" if route else "an unknown", method)
            return
        try:
            route.run(params)
        except Exception as error:  # noqa: BLE001 -- reported, and the next message is served
            log.exception("%s handler failed", method)
            self._report(_short(type(error).__name__))

    def _request(self, msg_id: Any, method: str, params: Any) -> None:
        key = str(msg_id)
        if method == T.WORKSPACE_EXECUTE_COMMAND and self.commands:
            route = self.commands.get(params.command)
            if route is None:
                known = ", ".join(sorted(self.commands))
                self._answer_error(msg_id, key, INVALID_PARAMS,
                                   f"unknown command {params.command!r} (this server has: {known})", method)
                return
        elif (route := self.routes.get(method)) is None:
            log.warning("request %r for an unknown method %r", msg_id, method)
            self._answer_error(msg_id, key, METHOD_NOT_FOUND, f"Method Not Found: {method}", method)
            return
        self._open[key] = (msg_id, None)
        try:
            if route.arrive is None:
                result = route.run(params)
                if method == T.SHUTDOWN:
                    self._shutdown(key)
                self._answer(key, result, method)
                return
            arrived = route.arrive(key, params)
        except Exception as error:  # noqa: BLE001 -- answered
            self._answer_exception(key, error, method)
            return
        self._open[key] = (msg_id, asyncio.ensure_future(self._run(key, method, route, arrived, params)))

    async def _run(self, key: str, method: str, route: Route, arrived: Any, params: Any) -> None:
        try:
            result = await route.run(arrived, params)
        except asyncio.CancelledError:
            self._cancelled(key)
            raise
        except Exception as error:  # noqa: BLE001 -- answered
            self._answer_exception(key, error, method)
        else:
            self._answer(key, result, method)

    def cancel(self, key: str) -> None:
        """$/cancelRequest: answer the request as cancelled now, stop its task, and its engine job."""
        self.on_cancel(key)
        entry = self._open.get(key)
        if entry is None:
            log.warning("cancel for request %r, which is not open", key)
            return
        self._cancelled(key)
        if entry[1] is not None:
            entry[1].cancel()

    def _shutdown(self, key: str) -> None:
        for other in [k for k in self._open if k != key]:
            self.cancel(other)
        self.client.cancel_requests()
        self.shut_down = True

    # -- answers ------------------------------------------------------------------------------------------------

    def _answer(self, key: str, result: Any, method: str) -> None:
        entry = self._open.pop(key, None)
        if entry is None:  # answered already (cancelled)
            return
        types = T.METHOD_TO_TYPES.get(method)
        self.client.respond(entry[0], result, types[1] if types is not None else None)
        self.after_response(key)

    def _answer_error(self, msg_id: Any, key: str, code: int, message: str, method: str) -> None:
        self._open.pop(key, None)
        self.client.error(msg_id, code, message)
        self.after_response(key)

    def _cancelled(self, key: str) -> None:
        entry = self._open.get(key)
        if entry is not None:
            self._answer_error(entry[0], key, REQUEST_CANCELLED, f'Request with id "{key}" is canceled', "")

    def _answer_exception(self, key: str, error: Exception, method: str) -> None:
        entry = self._open.get(key)
        if entry is None:
            return
        if isinstance(error, JsonRpcException):
            log.info("%s %s answered %d: %s", method, key, error.code, error.message)
            self._answer_error(entry[0], key, error.code, error.message, method)
        else:
            log.error("%s %s failed", method, key, exc_info=error)
            self._answer_error(entry[0], key, INTERNAL_ERROR, _short(type(error).__name__), method)

    def _failed(self, data: dict[str, Any], error: JsonRpcException) -> None:
        """A message whose params do not fit: a request is answered, a notification reported."""
        if "id" in data:
            self.client.error(data["id"], error.code, error.message)
        else:
            log.error("%s", error.message)
            self._report(error.message)

    def _report(self, message: str) -> None:
        """A failure the client is not waiting for (a notification's): shown to the user, as pygls did."""
        self.client.show_message(T.MessageType.Error, f"Error in server: {message}")

    def send_error(self, msg_id: Any, code: int, message: str) -> None:
        """An error answer to a message the transport refused (`msg_id` None: id null)."""
        self.client.error(msg_id, code, message)


class _BadPosition(ValueError):
    MESSAGE = "a position's line and character must be integers in 0..2^31-1"


def _structure_position(raw: Any, _: type) -> T.Position:
    """A Position exactly as LSP types it. cattrs' int hook is `int(v)`: it made `"3"` line 3, `1.5` line 1 and
    `true` line 1 in every request that carries a position or range; such params are Invalid Params instead."""
    if type(raw) is not dict or type(line := raw.get("line")) is not int or \
            type(character := raw.get("character")) is not int:
        raise _BadPosition(_BadPosition.MESSAGE)
    try:
        return T.Position(line=line, character=character)  # its validators: LSP's uinteger
    except (TypeError, ValueError):
        raise _BadPosition(_BadPosition.MESSAGE) from None


def _short(name: str | None) -> str:
    what = f" ({name})" if name else ""
    return f"internal error in the server{what}; its log has the details"


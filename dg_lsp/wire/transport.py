"""The message loop shared by stdio and TCP: bytes -> frames (dg_lsp.wire.framing) -> messages (dg_lsp.wire.jsonrpc) ->
`Dispatcher.receive` (dg_lsp.wire.dispatch), one at a time in the order the client sent them.

pygls' own loop (`pygls.io_.run_async`) dies on a header line over its reader's limit, waits forever on a huge
Content-Length, and after any header it does not expect drops every message until a stray blank line comes. This
loop never stops on input: a bad frame is logged and answered with a Parse error (id null), and reading resumes at
the next `Content-Length` header; a body that is not a message gets the JSON-RPC error the specification asks for.
It returns when the stream ends or on `exit` (the dispatcher sets its `exit_code`), with LSP's exit code.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dg_lsp.wire.framing import BODY_LIMIT, BadFrame, Framer
from dg_lsp.wire.jsonrpc import PARSE_ERROR, Refused, read_message, valid_id

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # bytes asked of the stream per read
UNAUTHORIZED_BODY_LIMIT = 1 << 20  # before a token gate passes (dg_lsp.wire.tcp), a body may not be larger
Gate = Callable[[dict[str, Any]], "str | None"]  # the first message -> None to let it in, else why not


async def serve_messages(read: Callable[[], Awaitable[bytes]], dispatcher: Any, arrivals: Any = None,
                         gate: Gate | None = None) -> int:
    """Feed `dispatcher` (a dg_lsp.wire.dispatch.Dispatcher) until the stream ends (`read` returns b"") or the client
    sends `exit`. Returns LSP's exit code: 0 after `shutdown`, else 1. `arrivals` (dg_lsp.wire.stdio.Arrivals) times
    each message's last byte; `gate` must accept the first message, else the connection is answered once and
    closed."""
    framer = Framer(body_limit=UNAUTHORIZED_BODY_LIMIT if gate is not None else BODY_LIMIT)
    if arrivals is not None:
        dispatcher.clock.arrivals = arrivals
    while data := await read():
        framer.feed(data)
        while (event := framer.next()) is not None:
            if isinstance(event, BadFrame):
                log.error("bad frame at byte %d: %s; reading resumes at the next Content-Length header", event.at,
                          event.reason)
                dispatcher.send_error(None, PARSE_ERROR, event.reason)
                if gate is not None:
                    return 1
                continue
            if arrivals is not None:
                dispatcher.clock.arrived_at = arrivals.at(event.end)
            message = read_message(event.body)
            if isinstance(message, Refused):
                _refuse(dispatcher, message, event.start)
                if message.code == PARSE_ERROR:
                    framer.reject(event)  # its Content-Length may have been wrong: the next header may be inside
                if gate is not None:
                    return 1
                continue
            if gate is not None:
                if (why := gate(message)) is not None:
                    log.error("connection refused: %s", why)
                    _refuse(dispatcher, Refused(-32600, why, (message.get("id"),)), event.start)
                    return 1
                gate = None
                framer.body_limit = BODY_LIMIT
            code = _deliver(dispatcher, message)
            if code is not None:
                return code
    if framer.pending:
        log.error("the stream ended inside a message (%d bytes unread)", framer.pending)
    return 0 if dispatcher.shut_down else 1


def _refuse(dispatcher: Any, refused: Refused, at: int) -> None:
    log.error("message at byte %d refused (%d): %s", at, refused.code, refused.message)
    for msg_id in refused.ids:
        dispatcher.send_error(msg_id, refused.code, refused.message)


def _deliver(dispatcher: Any, message: dict[str, Any]) -> int | None:
    """Hand one message to the dispatcher; the exit code when it was `exit`."""
    try:
        dispatcher.receive(message)
    except BrokenPipeError:
        raise
    except Exception:  # the dispatcher answers a handler's errors itself; this is a failure around it
        log.exception("message not handled")
        if "method" in message and valid_id(message.get("id")):
            dispatcher.send_error(message["id"], -32603, "internal error in the server; its log has the details")
    code: int | None = dispatcher.exit_code
    return code

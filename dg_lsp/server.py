"""The wiring: a session (`DgServer`, dg_lsp.session) and a dispatcher (dg_lsp.wire.dispatch) with every handler family
registered (dg_lsp.handlers), both writing through one `Client` (dg_lsp.wire.outgoing).

    keystroke -> didChange (handlers.documents) -> inlineCompletion (handlers.inline) -> snapshot (documents)
    -> hole (holes) -> prompt (prompt) -> engine steps (worker, on the engine thread) -> post-processing (edits,
    syntax) -> the item; commands (handlers.commands) end in one workspace/applyEdit instead.

docs/ARCHITECTURE.md draws the whole path; docs/PROTOCOL.md is the contract the handlers implement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dg_lsp.backends.factory import build_backend
from dg_lsp.backends.loading import check_fill
from dg_lsp.config import Settings
from dg_lsp.devtools import debug
from dg_lsp.fill.worker import Check, Worker
from dg_lsp.handlers import commands, documents, inline, lifecycle, nextedit
from dg_lsp.session import DgServer, server_version
from dg_lsp.wire.dispatch import Clock, Dispatcher
from dg_lsp.wire.outgoing import Client
from dg_lsp.wire.stdio import serve_stdio
from engine.seam import InfillBackend

__all__ = ["DgServer", "Server", "build_server", "server_version"]


class Server:
    """One connection's server: the session, its dispatcher and the client they write to."""

    def __init__(self, session: DgServer, dispatcher: Dispatcher) -> None:
        self.session, self.dispatcher, self.client = session, dispatcher, session.client

    @property
    def worker(self) -> Worker:
        return self.session.worker

    def start_io(self, stdin: Any = None, stdout: Any = None) -> int:
        """Serve on stdin/stdout until `exit` or the end of the stream; LSP's exit code."""
        return serve_stdio(self, stdin, stdout)

    def shutdown(self) -> None:
        """The connection is over: stop the engine thread (again after `shutdown`: harmless)."""
        self.session.worker.shutdown()


def build_server(engine_factory: Callable[[Settings], InfillBackend] = build_backend,
                 default_model: str | None = None, check: Check | None = check_fill) -> Server:
    """A server with every handler registered. `engine_factory` (settings -> a loaded backend, run on the engine
    thread: by default the one the `backend` setting names) and `check` (the check fill before "ready") are seams
    for tests and benchmarks."""
    client, clock = Client(), Clock()
    session = DgServer(engine_factory, default_model, check, client, clock)
    dispatcher = Dispatcher(client, clock, on_cancel=session.on_cancel_request, after_response=session.after_response)
    # each family takes the session as the services it declares (dg_lsp.handlers.services): mypy checks it has them
    lifecycle.register(dispatcher, session)
    documents.register(dispatcher, session)
    inline.register(dispatcher, session)
    commands.register(dispatcher, session)
    nextedit.register(dispatcher, session)
    debug.register(dispatcher, session)
    return Server(session, dispatcher)

"""The wiring: a `DgServer` (dg_lsp.session) with every handler family registered (dg_lsp.handlers).

    keystroke -> didChange (handlers.documents) -> inlineCompletion (handlers.inline) -> snapshot (documents)
    -> hole (holes) -> prompt (prompt) -> engine steps (worker, on the engine thread) -> post-processing (edits,
    syntax) -> the item; commands (handlers.commands) end in one workspace/applyEdit instead.

docs/ARCHITECTURE.md draws the whole path; docs/PROTOCOL.md is the contract the handlers implement.
"""

from __future__ import annotations

from collections.abc import Callable

from dg_lsp import debug
from dg_lsp.backends.factory import build_backend
from dg_lsp.config import Settings
from dg_lsp.handlers import commands, documents, inline, lifecycle, nextedit
from dg_lsp.loading import check_fill
from dg_lsp.session import DgServer, server_version
from dg_lsp.worker import Check
from engine.seam import InfillBackend

__all__ = ["DgServer", "build_server", "server_version"]


def build_server(engine_factory: Callable[[Settings], InfillBackend] = build_backend,
                 default_model: str | None = None, check: Check | None = check_fill) -> DgServer:
    """A server with every handler registered. `engine_factory` (settings -> a loaded backend, run on the engine
    thread: by default the one the `backend` setting names) and `check` (the check fill before "ready") are seams
    for tests and benchmarks."""
    server = DgServer(engine_factory, default_model, check)
    lifecycle.register(server)
    documents.register(server)
    inline.register(server)
    commands.register(server)
    nextedit.register(server)
    debug.register(server)
    return server

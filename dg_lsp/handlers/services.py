"""What each handler family may use of the session: one `typing.Protocol` per family, built from four small ones.

A handler is a function of (the services it needs, the request as it arrived, its params). The services are
declared here as Protocols rather than as separate objects the session builds, because the session
(dg_lsp.session.DgServer) already is the one place their state lives (the document store, the worker, the fill
caches, dg/status) and the services share it: a fill reads the documents, the status reads the fills. Splitting it
into objects would add forwarding and a second place to look; a Protocol per family says, in one screen, which
members a family reads, and mypy (strict, `[tool.mypy] files` in pyproject.toml) checks both sides: each handler
uses only what its family declares, and dg_lsp.server, which registers every family with the session, checks that
the session provides it.

The four building blocks:
    Documents   the store, the agreed position encoding, and the questions asked of a snapshot
    Editor      messages to the editor: the `Client` (dg_lsp.wire.outgoing), dg/status, warnings
    Fills       the settings, the worker (debounce, the loaded backend, cancels) and the fill pipeline
    (family)    the few per-family members (the typed-ahead cache, the withheld commands, next-edit state)

Read-only members are properties: a family may read them, not rebind them. Lifecycle sets the session's
settings, encoding and roots, so its Protocol declares those as attributes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, Protocol

from lsprotocol import types as T

from dg_lsp.config import Settings
from dg_lsp.context.workspace import Workspace
from dg_lsp.documents import DocumentStore, Encoding, Snapshot
from dg_lsp.fill.cache import FillCaches, Shown
from dg_lsp.fill.holes import Hole
from dg_lsp.fill.pipeline import HOLE_FILL, FillOutcome, FillStats, Shape
from dg_lsp.fill.worker import Loaded, Worker
from dg_lsp.nextedit.state import NextEdits
from dg_lsp.session import Received
from dg_lsp.trace import Trace
from dg_lsp.wire.dispatch import Clock
from dg_lsp.wire.outgoing import Client
from engine.seam import RequestKind

# uri -> the last command the confidence gate withheld there: (identity, start, end, rewrite, confidence)
Withheld = dict[str, tuple[tuple[int, int], int, int, bool, float]]


class Documents(Protocol):
    """The open documents as a request sees them."""

    @property
    def store(self) -> DocumentStore: ...
    @property
    def encoding(self) -> Encoding: ...

    def receive(self, request_id: str, uri: str, positions: Sequence[T.Position] = (), what: str = "request"
                ) -> Received:
        """The arrive step: positions checked, the snapshot, the trace."""

    def moved_on(self, snap: Snapshot) -> bool:
        """Has the document changed, closed or been reopened since `snap`?"""

    def offset(self, snap: Snapshot, pos: T.Position) -> int: ...

    def keystroke_snapshot(self, uri: str) -> Snapshot | None:
        """The document now, without waiting for a reparse."""


class Editor(Protocol):
    """Messages to the editor."""

    @property
    def client(self) -> Client: ...

    def send_status(self, state: str | None = None, message: str = "", request: dict[str, Any] | None = None
                    ) -> None: ...

    def warn(self, message: str) -> None: ...


class Fills(Protocol):
    """The settings, the worker and the fill pipeline with its dg/status."""

    @property
    def settings(self) -> Settings: ...
    @property
    def worker(self) -> Worker: ...

    def not_ready(self) -> str | None:
        """Why no fill can run now (None: ready)."""

    async def fill(self, snap: Snapshot, hole: Hole, kind: RequestKind, trace: Trace, request_id: str,
                   progress_token: T.ProgressToken | None = None, force: bool = False,
                   shape: Shape = HOLE_FILL, loaded: Loaded | None = None) -> FillOutcome: ...

    def report(self, stats: FillStats, trace: Trace, after_answer: bool) -> None: ...

    def status_after_answer(self, body: dict[str, Any], trace: Trace, engine_ms: float = 0.0) -> None: ...


class InlineSession(Documents, Editor, Fills, Protocol):
    """handlers.inline: inlineCompletion and completion."""

    @property
    def shown(self) -> dict[str, Shown]: ...


class CommandSession(Documents, Editor, Fills, Protocol):
    """handlers.commands: code actions, dg.fillHole, dg.rewriteSelection."""

    @property
    def withheld(self) -> Withheld: ...

    def min_confidence(self) -> float: ...

    def demo_gate_notice(self) -> str | None:
        """The demo model's once-per-session notice about its gate, the first time it is due (else None)."""

    async def fresh_snapshot(self, snap: Snapshot) -> Snapshot:
        """`snap` with its tree reparsed, within a bound (for a command)."""


class NextEditSession(Documents, Editor, Fills, Protocol):
    """handlers.nextedit: copilotInlineEdit, didShowInlineEdit, dg.acceptNextEdit."""

    @property
    def next_edits(self) -> NextEdits: ...
    @property
    def caches(self) -> FillCaches: ...
    @property
    def experimental(self) -> dict[str, Any]: ...


class SyncSession(Protocol):
    """handlers.documents: didOpen, didChange, didSave, didClose (every state they touch, mutated in order)."""

    @property
    def store(self) -> DocumentStore: ...
    @property
    def encoding(self) -> Encoding: ...
    @property
    def worker(self) -> Worker: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def shown(self) -> dict[str, Shown]: ...
    @property
    def withheld(self) -> Withheld: ...
    @property
    def next_edits(self) -> NextEdits: ...
    @property
    def cross_file(self) -> Workspace: ...

    def catch_up(self, uri: str) -> None:
        """Reparse `uri` in the background."""

    def note_change(self, uri: str, arrived: float | None) -> None: ...

    def release_memory_soon(self) -> None: ...


class LifecycleSession(Editor, Protocol):
    """handlers.lifecycle: initialize, initialized, didChangeConfiguration, shutdown, watched files."""

    encoding: Encoding
    settings: Settings
    roots: list[str]
    load_task: asyncio.Task[None] | None

    @property
    def worker(self) -> Worker: ...
    @property
    def caches(self) -> FillCaches: ...
    @property
    def shown(self) -> dict[str, Shown]: ...
    @property
    def cross_file(self) -> Workspace: ...
    @property
    def experimental(self) -> dict[str, Any]: ...
    @property
    def loads(self) -> itertools.count[int]: ...
    @property
    def default_model(self) -> str | None: ...

    def idle_wait(self) -> float: ...
